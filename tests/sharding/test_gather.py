"""``multihost.gather_whole`` makes sharded leaves whole in one all-gather of flat bytes: every
leaf comes back bitwise, replicated, whatever its dtype and however its dimensions are split over
the mesh's axes (one axis, several, in either order, replicated over the rest)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from agentjax.sharding import multihost
from agentjax.sharding.mesh import make_mesh
from agentjax.sharding.multihost import gather_whole

SPECS = [
    P("fsdp", "tensor"),
    P(None, ("data", "fsdp"), "tensor"),
    P(("fsdp", "data")),
    P(None, None, "data"),
    P(),
]
DTYPES = [np.float32, jnp.bfloat16, np.int32, np.int8, np.bool_]


def _leaf(rng, spec: P, dtype, mesh):
    shape = [int(np.prod([mesh.shape[a] for a in ((d,) if isinstance(d, str) else d or ())])) for d in spec]
    shape = [k * int(rng.integers(1, 4)) for k in shape] + [int(rng.integers(1, 4))] * (3 - len(shape))
    host = rng.normal(size=shape) * 50
    return jax.device_put(host.astype(dtype), NamedSharding(mesh, spec))


@pytest.mark.parametrize("seed", range(3))
def test_every_leaf_comes_back_whole_and_bitwise(seed):
    rng = np.random.default_rng(seed)
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    tree = {
        f"{i}": _leaf(rng, SPECS[int(rng.integers(len(SPECS)))], DTYPES[int(rng.integers(len(DTYPES)))], mesh)
        for i in range(8)
    }
    tree["host"] = np.arange(3)  # not an array on the mesh: left as it is
    out = gather_whole(tree)
    assert out["host"] is tree["host"]
    for k, x in tree.items():
        got, want = np.asarray(out[k]), np.asarray(x)
        assert np.array_equal(got, want) and got.dtype == want.dtype
        if k != "host":
            assert out[k].sharding.is_fully_replicated


def test_one_collective_for_the_whole_tree():
    mesh = make_mesh({"fsdp": 4, "tensor": 2})
    rng = np.random.default_rng(0)
    tree = [_leaf(rng, P("fsdp", "tensor"), np.float32, mesh) for _ in range(6)]
    specs = tuple(multihost._full_spec(x.sharding.spec, x.ndim) for x in tree)
    hlo = multihost._flat_gather(mesh, specs, (np.dtype(np.float32),) * 6).lower(*tree).compile().as_text()
    assert hlo.count("all-gather-start(") + hlo.count("all-gather(") == 1  # one dtype: one collective
