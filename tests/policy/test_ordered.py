"""The fixed-order CPU kernels (exact_kernels="ordered"): each element computed in the order the
kernel defines, so rows do not depend on the row count, the batch, zero padding or threads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import kernels as K
from agentjax.policy import ordered
from agentjax.policy.config import ModelConfig

ROWS = (1, 2, 3, 5, 8, 17, 57, 130, 300)  # across XLA:CPU's (and YNNPACK's) shape switches


def _chain(a, b):
    """The specified order, in numpy: acc = fma(a[:, k], b[k], acc) for k = 0..K-1 from +0. A
    float32 fma is emulated in float64 (the product is exact; one double rounding in ~2^29)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        acc = (a[:, k, None] * b[None, k] + acc.astype(np.float64)).astype(np.float32)
    return acc


def _lane_sum(x):
    """The rows kernels' sum order, in numpy float32: 16 lanes, then a fixed tree."""
    x = np.asarray(x, np.float32)
    lane = np.zeros((x.shape[0], 16), np.float32)
    for j in range(x.shape[1]):
        lane[:, j % 16] += x[:, j]
    for w in (8, 4, 2, 1):
        lane[:, :w] += lane[:, w : 2 * w]
    return lane[:, 0]


@pytest.mark.parametrize("k,n", [(128, 512), (37, 33), (5, 1), (300, 70)])
def test_dot_rows_are_the_specified_chain_whatever_the_row_count(k, n):
    rng = np.random.default_rng(k + n)
    a = rng.standard_normal((300, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    f = jax.jit(lambda x, w: ordered.dot(x[None], w[None])[0])
    full = np.asarray(f(a, b))
    for m in ROWS:
        np.testing.assert_array_equal(np.asarray(f(a[:m], b)), full[:m])
    np.testing.assert_array_equal(full[:40], _chain(a[:40], b))
    # batched, with one operand shared (broadcast) or not: the same rows
    stacked = np.asarray(jax.jit(ordered.dot)(np.stack([a[:7], a[7:14]]), b[None]))
    np.testing.assert_array_equal(stacked.reshape(14, n), full[:14])


def test_dot_ignores_zero_terms_wherever_they_sit():
    """Attention's property: a key with weight exactly 0 (masked, padding, a cache slot not yet
    written) may sit anywhere along the contraction without changing a bit."""
    rng = np.random.default_rng(0)
    w = rng.random((6, 20)).astype(np.float32)
    v = rng.standard_normal((20, 9)).astype(np.float32)
    want = np.asarray(ordered.dot(w[None], v[None]))[0]
    for seed in range(5):
        r = np.random.default_rng(seed)
        slots = np.sort(r.choice(48, 20, replace=False))  # the 20 keys spread over 48 slots
        wp = np.zeros((6, 48), np.float32)
        vp = r.standard_normal((48, 9)).astype(np.float32) * 1e6  # garbage in the empty slots
        wp[:, slots], vp[slots] = w, v
        np.testing.assert_array_equal(np.asarray(ordered.dot(wp[None], vp[None]))[0], want)


def test_row_kernels_do_not_depend_on_the_row_count_and_use_their_own_order():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((300, 72)) * 3).astype(np.float32)
    scale = rng.standard_normal(72).astype(np.float32)
    x_masked = np.where(rng.random(x.shape) < 0.2, -np.inf, x).astype(np.float32)
    x_masked[:, 0] = 1.0  # every row keeps one entry
    cases = {
        "rms_norm": (lambda z: ordered.rms_norm(z, scale, 1e-6), x),
        "log_softmax": (lambda z: ordered.softmax(z, ordered.LOG_SOFTMAX), x_masked),
        "softmax": (lambda z: ordered.softmax(z, ordered.SOFTMAX), x_masked),
        "exp_shifted": (lambda z: ordered.softmax(z, ordered.EXP_SHIFTED), x_masked),
        "swiglu": (lambda z: ordered.swiglu(z, z[:, ::-1]), x),
    }
    for name, (fn, data) in cases.items():
        f = jax.jit(fn)
        full = np.asarray(f(data))
        for m in ROWS:
            np.testing.assert_array_equal(np.asarray(f(data[:m])), full[:m], err_msg=f"{name} rows={m}")
    # values: the kernel's exp is within 2 ulp of the correctly rounded one; -inf weighs 0
    e = np.asarray(ordered.softmax(x_masked, ordered.EXP_SHIFTED))
    want = np.exp((x_masked - x_masked.max(-1, keepdims=True)).astype(np.float64))  # of the f32 argument
    np.testing.assert_allclose(e, want, rtol=3e-7, atol=0)
    assert np.all(e[np.isinf(x_masked)] == 0.0)
    lp = np.asarray(ordered.softmax(x_masked, ordered.LOG_SOFTMAX))
    np.testing.assert_allclose(np.exp(lp).sum(-1), 1.0, rtol=1e-5)
    # rms_norm's mean square is the 16-lane sum, then divisions and one sqrt (IEEE: exact)
    ms = _lane_sum(x * x) / np.float32(72)
    inv = np.float32(1.0) / np.sqrt(ms + np.float32(1e-6))
    want = (x * inv[:, None]) * scale
    np.testing.assert_array_equal(np.asarray(ordered.rms_norm(x, scale, 1e-6)), want)
    np.testing.assert_allclose(
        np.asarray(ordered.swiglu(x, x)), x / (1 + np.exp(-x.astype(np.float64))) * x, rtol=1e-5, atol=1e-6
    )


def test_kernels_take_standard_gradients_and_the_xla_path_is_not_batch_invariant():
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((12, 40)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((40, 24)), jnp.float32)
    g_ord = jax.grad(lambda a, b: jnp.sum(jnp.sin(K.matmul(a, b, "ordered"))), (0, 1))(x, w)
    g_std = jax.grad(lambda a, b: jnp.sum(jnp.sin(a @ b)), (0, 1))(x, w)
    for a, b in zip(g_ord, g_std, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # the construction is needed: XLA's exp(z - max z) changes with the row count on this CPU
    z = (rng.standard_normal((96, 64)) * 3).astype(np.float32)
    f = jax.jit(lambda a: jnp.exp(a - a.max(-1, keepdims=True)))
    full = np.asarray(f(z))
    xla_invariant = all(np.array_equal(np.asarray(f(z[:m])), full[:m]) for m in (1, 3, 5, 8))
    g = jax.jit(lambda a: ordered.softmax(a, ordered.EXP_SHIFTED))
    full = np.asarray(g(z))
    assert all(np.array_equal(np.asarray(g(z[:m])), full[:m]) for m in (1, 3, 5, 8))
    if xla_invariant:  # another XLA build may route it elsewhere; say so rather than pass silently
        pytest.skip("XLA's exp(z - max z) was batch-invariant on this build: nothing to contrast")


def test_auto_picks_ordered_on_cpu_and_an_unbuildable_library_names_the_field(monkeypatch):
    cfg = ModelConfig(exact_tile=1)
    assert cfg.exact_kernels == "auto" and cfg.invariant == "ordered"
    assert ModelConfig(exact_tile=1, exact_kernels="exact_sum").invariant == "exact_sum"
    assert ModelConfig(exact_tile=1, exact_kernels="tiled").invariant == ""
    assert ModelConfig(exact_tile=0, exact_kernels="ordered").invariant == ""
    monkeypatch.setattr(ordered, "_load", lambda: "no C++ compiler found")
    assert ModelConfig(exact_tile=1).invariant == "exact_sum"  # auto falls back
    with pytest.raises(ordered.OrderedKernelsUnavailable, match=r"exact_kernels=.ordered.*no C\+\+ compiler"):
        ordered.dot(jnp.ones((1, 2, 3)), jnp.ones((1, 3, 4)))


def test_a_learner_batch_sharded_over_the_mesh_gives_the_single_device_bits():
    """A custom call has no sharding rule: XLA runs it on gathered operands. The rows keep their
    bits (and the gradient runs) when the learner's batch is split over 8 devices."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from agentjax.policy.model import init_params
    from agentjax.policy.scoring import token_logprobs
    from agentjax.testing.models import tiny_moe

    cfg = tiny_moe(exact_tile=4)
    assert cfg.invariant == "ordered"
    params = init_params(cfg, jax.random.key(0))
    rng = np.random.default_rng(3)
    tok = jnp.asarray(rng.integers(0, cfg.vocab_size, (8, 16)), jnp.int32)
    pos = jnp.tile(jnp.arange(16, dtype=jnp.int32), (8, 1))
    score = lambda p, t, q: token_logprobs(p, t, q, config=cfg)[0]
    want = np.asarray(jax.jit(score)(params, tok, pos))
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "fsdp"))
    rows = NamedSharding(mesh, P(("data", "fsdp")))
    ps = jax.device_put(params, NamedSharding(mesh, P()))
    got = jax.jit(score)(ps, jax.device_put(tok, rows), jax.device_put(pos, rows))
    np.testing.assert_array_equal(np.asarray(got), want)
    grads = jax.jit(jax.grad(lambda p, t, q: score(p, t, q).sum()))(
        ps, jax.device_put(tok, rows), jax.device_put(pos, rows)
    )
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


_PATH_PROBE = """
import numpy as np, jax, sys
from agentjax.policy import ordered
r = np.random.default_rng(5)
a, b = r.standard_normal((37, 45)).astype(np.float32), r.standard_normal((45, 71)).astype(np.float32)
z = (r.standard_normal((9, 75)) * 4).astype(np.float32)
z[:, 3] = -np.inf
out = dict(dot=ordered.dot(a[None], b[None]), rms=ordered.rms_norm(z[:, 4:], z[0, 4:], 1e-5),
           lsm=ordered.softmax(z, ordered.LOG_SOFTMAX), exp=ordered.softmax(z, ordered.EXP_SHIFTED),
           glu=ordered.swiglu(z, z[::-1]))
np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in out.items()})
"""


@pytest.mark.parametrize("flags", ["-mno-avx512f", "-mno-avx512f -mno-avx2 -mno-fma"], ids=["avx2", "scalar"])
def test_every_instruction_set_path_computes_the_same_bits(tmp_path, flags):
    """The kernels promise the same IEEE operations per element on any SIMD width: a build
    without AVX-512 (the AVX2 path) and one without AVX2/FMA (the scalar path, libm's fmaf)
    give the native build's bits."""
    import os
    import subprocess
    import sys

    outs = {}
    for name, extra in (("native", ""), ("other", flags)):
        env = {**os.environ, "AGENTJAX_ORDERED_CFLAGS": extra, "AGENTJAX_CACHE": str(tmp_path / "cache")}
        env.pop("XLA_FLAGS", None)
        path = tmp_path / f"{name}.npz"
        subprocess.run([sys.executable, "-c", _PATH_PROBE, str(path)], env=env, check=True, timeout=300)
        outs[name] = np.load(path)
    for k in outs["native"].files:
        np.testing.assert_array_equal(outs["other"][k], outs["native"][k], err_msg=k)
