"""The Pallas kernels of exact mode (exact_kernels="pallas"): each kernel's rows do not depend on
the row count, decode attention against the cache equals the teacher-forced pass, and the tiny
model's sampler and learner agree bitwise. On the CPU they run in Pallas interpret mode; on a GPU
(benchmarks/gpu_check.sh) the same tests run the Triton lowering."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import kernels as K
from agentjax.policy import pallas_attention as PA
from agentjax.policy import pallas_kernels as P
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import init_params
from agentjax.testing.models import tiny_dense
from tests.diagnostics.test_consistency import T, _check_contract

R = np.random.default_rng(0)
normal = lambda *shape: jnp.asarray(R.standard_normal(shape), jnp.float32)


def test_interpret_is_decided_by_backend_and_can_be_forced():
    assert P.interpret() == (jax.default_backend() == "cpu")
    with P.interpret_mode(False):
        assert not P.interpret() and "forced" in P.decision()
    assert "default backend" in P.decision()
    assert ModelConfig(exact_tile=1, exact_kernels="pallas").invariant == "pallas"


def test_row_kernels_give_a_row_the_same_bits_in_any_row_count():
    """A row of an M = 1 call equals the same row of an M = 37 call (K = 300: three K blocks,
    the last one padded), for the matmul, RMSNorm and (log-)softmax over a padded vocabulary."""
    x, w, s, z = normal(37, 300), normal(300, 70), normal(300), normal(37, 200)
    full, rows = P.matmul(x, w), [0, 5, 36]
    for i in rows:
        np.testing.assert_array_equal(P.matmul(x[i : i + 1], w), full[i : i + 1])
    np.testing.assert_array_equal(P.matmul(x[5:21], w), full[5:21])  # a subset, other offsets
    np.testing.assert_allclose(full, x @ w, rtol=1e-4, atol=1e-4)
    norm = P.rms_norm(x, s, 1e-6)
    np.testing.assert_array_equal(P.rms_norm(x[5:6], s, 1e-6), norm[5:6])
    for fn, ref in ((P.log_softmax, jax.nn.log_softmax), (P.softmax, jax.nn.softmax)):
        out = fn(z)
        np.testing.assert_array_equal(fn(z[36:37]), out[36:37])
        np.testing.assert_allclose(out, ref(z), rtol=1e-5, atol=1e-6)


def test_decode_attention_equals_the_teacher_forced_pass_bitwise():
    """Queries at every position of a left-padded learner batch (B = 3) against the sequence's
    own keys, and each position decoded alone (B = 1) against a 33-slot cache with stale
    values after it, give the same bits; the values match the standard attention."""
    b, t, h, hkv, d, n_slots, pad = 3, 9, 4, 2, 8, 33, 2
    q, k, v = normal(b, t, h, d), normal(b, hkv, t, d), normal(b, hkv, t, d)
    pos = jnp.broadcast_to(jnp.arange(t), (b, t))
    padp = lambda a, axis, c=0: jnp.pad(
        a, [(pad, 0) if i == axis else (0, 0) for i in range(a.ndim)], constant_values=c
    )
    lpos = padp(pos, 1, n_slots)  # garbage pads at a position past every query
    ones = jnp.ones((b, t + pad), bool)
    forced = PA.attention(padp(q, 1), padp(k, 2), padp(v, 2), lpos, lpos, ones, n_max=n_slots)[:, pad:]
    from agentjax.policy import layers

    ref = layers.attention_standard(q, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, jnp.ones((b, t), bool))
    np.testing.assert_allclose(forced, ref, rtol=1e-5, atol=1e-5)
    stale = normal(1, hkv, n_slots, d)
    slots = jnp.arange(n_slots)[None]
    for i in (0, 4, t - 1):
        kc = stale.at[:, :, : i + 1].set(k[1:2, :, : i + 1])
        vc = stale.at[:, :, : i + 1].set(v[1:2, :, : i + 1])
        dec = PA.attention(
            q[1:2, i : i + 1],
            kc,
            vc,
            pos[1:2, i : i + 1],
            slots,
            slots < n_slots - 1,
            n_max=n_slots,
            slotted=True,
        )
        np.testing.assert_array_equal(dec[0, 0], forced[1, i])


def test_kernels_take_the_standard_gradient():
    x, w = normal(3, 40), normal(40, 24)
    g = jax.grad(lambda x_, w_: jnp.sum(K.matmul(x_, w_, "pallas") ** 2), (0, 1))(x, w)
    ref = jax.grad(lambda x_, w_: jnp.sum((x_ @ w_) ** 2), (0, 1))(x, w)
    for a, r in zip(g, ref, strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiny_model_sampler_and_learner_agree_bitwise(dtype):
    """Sampler batches 1, 3 and 8 (decode against the cache, top-k/top-p transform), every row
    rescored in shuffled, randomly padded learner batches (teacher-forced): bitwise."""
    cfg = tiny_dense(exact_tile=4, exact_kernels="pallas", param_dtype=dtype, compute_dtype=dtype)
    assert cfg.invariant == "pallas"
    params = init_params(cfg, jax.random.key(0))
    _, n_tokens = _check_contract(
        cfg,
        params,
        (1, 3, 8),
        np.random.default_rng(1),
        transform=T,
        max_new=6,
        prompt_width=6,
        compositions=1,
    )
    assert n_tokens >= 40


@pytest.mark.slow
def test_an_exact_step_with_the_pallas_kernels_compiles_for_tpu():
    """AOT, Mosaic (interpret=False): the tiny model's exact-mode log-prob value and gradient
    for one v5e chip (a chip of the v5e:2x2 topology; no float64 reaches the program)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from agentjax.policy.model import abstract_params
    from agentjax.policy.scoring import token_logprobs
    from agentjax.sharding.topology import TopologyUnavailable, topology_devices

    try:
        devices = topology_devices("v5e:2x2")
    except TopologyUnavailable as e:
        pytest.skip(f"no TPU compiler: {e}")
    rep = NamedSharding(Mesh(np.array(devices[:1]), ("x",)), PartitionSpec())
    cfg = tiny_dense(exact_tile=8, exact_kernels="pallas")
    params = abstract_params(cfg)
    tokens = jax.ShapeDtypeStruct((4, 32), jnp.int32)

    def loss(p, t, pos):
        return -jnp.mean(token_logprobs(p, t, pos, config=cfg)[0])

    step = jax.jit(jax.value_and_grad(loss), in_shardings=(jax.tree.map(lambda _: rep, params), rep, rep))
    with P.interpret_mode(False):
        lowered = step.lower(params, tokens, tokens)
    text = lowered.as_text()
    assert text.count("tpu_custom_call") >= 10 and "f64" not in text
    mem = lowered.compile().memory_analysis()
    assert 0 < mem.argument_size_in_bytes < 1 << 20
