"""Multi-process (multi-host) helpers: global arrays from host data, local views, checksums.

With ``jax.distributed`` every process runs the same program; arrays that span devices of
several processes are built from host data with ``make_array_from_callback`` (each process fills
its own shards). The sampler and the environments are host-local: they read a process-local copy
of the parameters (``local_view`` all-gathers the learner's FSDP shards).
"""

from __future__ import annotations

import functools
import hashlib

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def is_distributed() -> bool:
    """A run under ``jax.distributed`` (``launch.train --num_processes=N``), for any N >= 1.

    Every such run takes the multi-process path (episodes split over processes, the sampler on a
    process-local copy of the weights), so N = 1 runs the very program that N > 1 runs: it is
    their single-process reference (``tests/test_multiprocess.py``)."""
    from jax._src import distributed  # noqa: PLC0415

    return jax.process_count() > 1 or distributed.global_state.client is not None


def to_global(tree, shardings):
    """Host values -> global arrays with ``shardings`` (one sharding or a matching pytree)."""
    if not isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x, s: to_global(x, s), tree, shardings)

    def one(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, shardings, lambda idx: host[idx])

    return jax.tree.map(one, tree)


def globalize(tree, mesh: Mesh):
    """Global arrays stay as they are (e.g. FSDP-sharded parameters and optimizer moments); every
    process-local leaf (a step counter, an rng, an optimizer count: identical on every process)
    becomes a global array replicated over ``mesh``. Identity outside ``jax.distributed``."""
    if not is_distributed():
        return tree
    on_mesh = set(mesh.devices.flat)

    def one(x):
        if isinstance(x, jax.Array) and x.sharding.device_set == on_mesh:
            return x
        return to_global(jax.device_get(x), NamedSharding(mesh, PartitionSpec()))

    return jax.tree.map(one, tree)


def shard_batch(batch: dict, mesh: Mesh, axes=("data", "fsdp")):
    """Splits each array's leading (batch) dimension over the mesh's data-parallel axes."""
    axes = tuple(a for a in axes if mesh.shape.get(a, 1) > 1)
    spec = lambda x: PartitionSpec(axes if axes else None, *([None] * (np.ndim(x) - 1)))
    return {k: to_global(v, NamedSharding(mesh, spec(v))) for k, v in batch.items()}


def local_view(tree):
    """Under ``jax.distributed``, a copy of ``tree`` on this process's first device: sharded
    arrays (FSDP parameters) are all-gathered first, in one program over their mesh. Collective:
    every process calls it with the same tree. Identity otherwise."""
    if not is_distributed():
        return tree
    spread = [x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1]
    if any(not x.sharding.is_fully_replicated for x in spread):
        tree = _gather(spread[0].sharding.mesh)(tree)

    def one(x):
        if not isinstance(x, jax.Array) or len(x.sharding.device_set) == 1:
            return x
        return x.addressable_data(0)

    return jax.tree.map(one, tree)


@functools.cache
def _gather(mesh: Mesh):
    return jax.jit(lambda t: t, out_shardings=NamedSharding(mesh, PartitionSpec()))


def checksum(tree) -> str:
    """sha256 of every leaf's bytes (process-local view): equal across processes iff equal."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(local_view(tree)):
        h.update(np.ascontiguousarray(np.asarray(x)).tobytes())
    return h.hexdigest()
