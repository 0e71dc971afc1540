"""The exact-summation kernels: exact sums, rows independent of the row count, standard grads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import exact_attention as EA
from agentjax.policy import kernels as K
from agentjax.policy import layers as L

ROWS = (1, 2, 3, 5, 8, 12, 57, 200)  # 1: XLA's vector-matrix dot; 2..48 / >= 56: YNNPACK's two


def _rows(fn, x, *rest):
    """fn applied to the first n rows of x, for each n in ROWS, one compile each."""
    f = jax.jit(fn)
    return {n: np.asarray(f(x[:n], *rest)) for n in ROWS}


@pytest.mark.parametrize("k,f", [(128, 512), (10, 96), (300, 64)])
def test_matmul_rows_do_not_depend_on_the_row_count(k, f):
    rng = np.random.default_rng(k)
    x = jnp.asarray(rng.standard_normal((200, k)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((k, f)), jnp.float32)
    out = _rows(K.matmul, x, w)
    for n in ROWS:
        np.testing.assert_array_equal(out[n], out[200][:n])
    # the XLA dot does depend on it here (the construction is needed, not decorative)
    if (k, f) == (128, 512):
        std = _rows(lambda a, b: a @ b, x, w)
        assert not all(np.array_equal(std[n], std[200][:n]) for n in ROWS)
    # and the value is the exact product of the gridded operands, rounded once
    bits = (53 - (k - 1).bit_length()) // 2
    xi, ex = (np.asarray(a) for a in _np_grid(np.asarray(x, np.float64), 1, bits))
    wi, ew = (np.asarray(a) for a in _np_grid(np.asarray(w, np.float64), 0, bits))
    want = ((xi @ wi) * ex * ew).astype(np.float32)
    np.testing.assert_array_equal(out[200], want)
    np.testing.assert_allclose(out[200], np.asarray(x) @ np.asarray(w), rtol=1e-4, atol=1e-4)


def _np_grid(a, axis, bits):
    m = np.max(np.abs(a), axis=axis, keepdims=True)
    e = np.frexp(m)[1] - bits  # m < 2^frexp(m)[1]
    q = np.ldexp(1.0, e)
    return np.round(a / q), q


def test_exact_sum_is_order_free():
    rng = np.random.default_rng(0)
    t = rng.standard_normal((4, 1000)) * np.exp(rng.uniform(-20, 20, (4, 1000)))
    with jax.enable_x64(True):
        a = np.asarray(K.exact_sum(jnp.asarray(t), -1))
        b = np.asarray(K.exact_sum(jnp.asarray(t[:, ::-1]), -1))
        c = np.asarray(K.exact_sum(jnp.asarray(rng.permuted(t, axis=1)), -1))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    # each term is rounded to a grid of 2^-42 of the largest: far below float32 resolution
    assert np.all(np.abs(a - t.sum(-1)) <= np.abs(t).max(-1) * 1000 * 2.0**-43)


def test_rowwise_kernels_do_not_depend_on_the_row_count():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((200, 48)), jnp.float32)
    scale = jnp.asarray(rng.uniform(0.5, 1.5, 48), jnp.float32)
    pos = jnp.asarray(rng.integers(0, 30, 200), jnp.int32)
    for fn, args in (
        (lambda a, s: K.rms_norm(a, s, 1e-6), (scale,)),
        (K.log_softmax, ()),
        (K.softmax, ()),
        (lambda a: K.exclusive_mass(K.softmax(a)), ()),
        (lambda a, p: K.rope(a.reshape(-1, 4, 12), p[: a.shape[0]], 1e4, 32), (pos,)),
    ):
        out = _rows(fn, x, *args)
        for n in ROWS:
            np.testing.assert_array_equal(out[n], out[200][:n])


def _attn_inputs(rng, b=3, t=7, h=6, hkv=2, d=10):
    q = jnp.asarray(rng.standard_normal((b, t, h, d)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((b, t, hkv, d)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((b, t, hkv, d)), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    return q, k, v, pos


def test_attention_over_a_cache_equals_teacher_forced_bitwise():
    """A query against the whole sequence (learner) == against a longer buffer with garbage in
    the future and unused slots (KV cache), and == the same query alone."""
    rng = np.random.default_rng(2)
    q, k, v, pos = _attn_inputs(rng)
    b, t = pos.shape
    ones = jnp.ones((b, t), bool)
    kv = lambda a: a.swapaxes(1, 2)  # [B, Hkv, T, D]
    full = EA.attention(q, kv(k), kv(v), pos, pos, ones, n_max=30)
    s = 29  # cache slots (incl. the sink): garbage beyond the written positions
    junk = lambda a: (
        jnp.asarray(rng.standard_normal((b, a.shape[2], s, a.shape[3])) * 50, jnp.float32)
        .at[:, :, :t]
        .set(kv(a))
    )
    slots = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    for i in (0, 3, t - 1):
        one = EA.attention(
            q[:, i : i + 1], junk(k), junk(v), pos[:, i : i + 1], slots, slots < s - 1, n_max=30
        )
        np.testing.assert_array_equal(np.asarray(one[:, 0]), np.asarray(full[:, i]))
    std = L.attention_standard(q, k, v, pos, pos, ones)
    np.testing.assert_allclose(np.asarray(full), np.asarray(std), rtol=1e-5, atol=1e-5)


def test_gradients_are_the_standard_kernels():
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((5, 12)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((12, 7)), jnp.float32)
    g_exact = jax.grad(lambda a, b: jnp.sum(jnp.sin(K.matmul(a, b))), (0, 1))(x, w)
    g_std = jax.grad(lambda a, b: jnp.sum(jnp.sin(a @ b)), (0, 1))(x, w)
    for a, b in zip(g_exact, g_std, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    q, k, v, pos = _attn_inputs(rng)
    ones = jnp.ones(pos.shape, bool)
    f = lambda q_: jnp.sum(
        jnp.cos(EA.attention(q_, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, ones, n_max=30))
    )
    f_std = lambda q_: jnp.sum(jnp.cos(L.attention_standard(q_, k, v, pos, pos, ones)))
    np.testing.assert_allclose(
        np.asarray(jax.grad(f)(q)), np.asarray(jax.grad(f_std)(q)), rtol=1e-4, atol=1e-5
    )
