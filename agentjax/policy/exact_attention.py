"""Exact mode's attention (split from :mod:`agentjax.policy.kernels`, whose grid, rounding and
standard-gradient rules it uses): one signature, four constructions chosen by ``kind`` (the
standard float32 kernel as every construction's backward; ``"exact_sum"``: exact float64 sums;
``"ordered"``: the fixed-order CPU custom calls; ``"pallas"``: the Pallas kernels of
:mod:`agentjax.policy.pallas_attention`, their backward blockwise over long rows)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from agentjax.policy import blockwise, layers, ordered, pallas_attention
from agentjax.policy import kernels as K

NEG_INF = -1e30
# The Pallas attention's backward (the standard float32 gradient) attends blockwise from this
# many keys on (policy/blockwise.py, FlashAttention-2's backward: O(T x block) memory): the full
# score tensor of a 32k-token row is 128 GiB for Qwen3-8B. Below it, the full scores.
PALLAS_GRAD_BLOCKWISE_FROM = 4096
PALLAS_GRAD_BLOCK = 512


def _attention_standard(q, k, v, mask, scalar=0.0, cap=0.0):
    """Reference for the gradient: q [B,Hkv,R,D], k/v [B,Hkv,S,D], mask [B,Hkv or 1,R,S]."""
    d = q.shape[-1]
    s = jnp.einsum("bkrd,bksd->bkrs", q, k).astype(jnp.float32) / jnp.sqrt(jnp.float32(scalar or d))
    s = layers.softcap(s, cap)
    w = jax.nn.softmax(jnp.where(mask, s, NEG_INF), axis=-1).astype(v.dtype)
    return jnp.einsum("bkrs,bksd->bkrd", w, v)


def _attention_exact(q, k, v, mask, n_max: int, scalar=0.0, cap=0.0):
    d = q.shape[-1]
    batch = ((0, 1), (0, 1))
    with jax.enable_x64(True):
        bits = (53 - K._log2_ceil(d)) // 2
        qi, eq = K._grid(q, (3,), bits)
        ki, ek = K._grid(k, (3,), bits)
        s = jax.lax.dot_general(qi, ki, (((3,), (3,)), batch))  # [B,Hkv,R,S] exact integers
        s = s * jax.lax.dot_general(K._pow2(eq), K._pow2(ek), (((3,), (3,)), batch))
        s = s / np.sqrt(np.float64(scalar or d))
        s = K.cast(cap * jnp.tanh(s / cap) if cap else s, jnp.float32)
        s = jnp.where(mask, s, NEG_INF)
        m = jnp.max(s, axis=-1, keepdims=True)
        e = jnp.where(mask, jnp.exp(s.astype(K.F64) - m.astype(K.F64)), 0.0)  # <= 1, max == 1
        den = K.exact_sum(e, -1, n_max)  # [B,Hkv,R]
        bits = (53 - K._log2_ceil(n_max)) // 2
        vi, ev = K._grid(v, (3,), bits)  # per key: v = vi * 2^ev
        w = e * jnp.swapaxes(K._pow2(ev), 2, 3)  # [B,Hkv,R,S]: e_j * 2^ev_j, exact
        wi, ew = K._grid(w, (3,), bits)
        num = jax.lax.dot_general(wi, vi, (((3,), (2,)), batch)) * K._pow2(ew)  # exact
        return K.cast(K.cast(num / den[..., None], jnp.float32), v.dtype)


def _attention_ordered(q, k, v, mask, scalar=0.0):
    """Fixed-order attention: both contractions are FMA chains in key order, and masked keys
    weigh exactly 0, so a learner pass over T keys and a decode step over the cache agree. The
    softmax denominator is the same chain over a column of ones appended to ``v``."""
    b, hkv, r, d = q.shape
    s = k.shape[2]
    qs = K.cast(q, jnp.float32) * np.float32(1.0 / np.sqrt(scalar or d))  # feeds the custom call
    kt = K.cast(k, jnp.float32).swapaxes(2, 3).reshape(b * hkv, d, s)
    sc = ordered.dot(qs.reshape(b * hkv, r, d), kt).reshape(b, hkv, r, s)
    e = ordered.softmax(jnp.where(mask, sc, -jnp.inf), ordered.EXP_SHIFTED)  # masked: exactly 0
    v1 = jnp.concatenate([K.cast(v, jnp.float32), jnp.ones((b, hkv, s, 1), jnp.float32)], -1)
    nd = ordered.dot(e.reshape(b * hkv, r, s), v1.reshape(b * hkv, s, d + 1)).reshape(b, hkv, r, d + 1)
    return K.cast(nd[..., :d] / nd[..., d:], v.dtype)


def attention(
    q,
    k,
    v,
    q_pos,
    k_pos,
    k_valid,
    n_max: int,
    kind: str = "K.exact_sum",
    window=None,
    scalar=0.0,
    cap=0.0,
    slotted: bool = False,
):
    """Grouped-query causal attention with exact sums over keys (``window``, ``scalar``, ``cap``:
    see :func:`agentjax.policy.layers.attention_standard`; the ordered kernels have no ``cap``).

    q: [B, T, H, D]; k, v: [B, Hkv, S, D] (the KV-cache layout); q_pos [B, T]; k_pos, k_valid
    [B, S]. Query t attends to the valid keys with ``k_pos <= q_pos[t]``. ``n_max`` bounds the
    number of keys any query attends to (``max_seq_len + 1``): it sets the grid widths, so a
    learner pass over T keys and a decode step over the whole cache round the same way.
    ``slotted`` (the KV cache): key ``j`` sits at slot ``j`` (its position); the Pallas kernels
    use it (:func:`agentjax.policy.pallas_attention.attention`). Returns [B, T, H, D].
    """
    if kind == "pallas":
        return _attention_pallas(q, k, v, q_pos, k_pos, k_valid, n_max, window, scalar, cap, slotted)
    b, t, h, d = q.shape
    hkv = k.shape[1]
    g = h // hkv
    qr, mask = _grouped(q, k, q_pos, k_pos, k_valid, window)
    if kind == "ordered":
        if cap:
            raise ValueError("the ordered kernels have no attention soft-capping (see ModelConfig)")
        exact = lambda q_, k_, v_, m_: _attention_ordered(q_, k_, v_, m_, scalar)
    else:
        exact = lambda q_, k_, v_, m_: _attention_exact(q_, k_, v_, m_, n_max, scalar, cap)
    standard = lambda q_, k_, v_, m_: _attention_standard(q_, k_, v_, m_, scalar, cap)
    o = K._with_standard_grad(exact, standard)(qr, k, v, mask)
    return o.reshape(b, hkv, g, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)


def _grouped(q, k, q_pos, k_pos, k_valid, window):
    """q as [B, Hkv, G * T, D] (rows (g, t)) and the mask [B, 1, G * T, S]."""
    b, t, h, d = q.shape
    hkv = k.shape[1]
    g = h // hkv
    qr = q.reshape(b, t, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, hkv, g * t, d)
    mask = (k_pos[:, None, :] <= q_pos[:, :, None]) & k_valid[:, None, :]  # [B,T,S]
    mask = mask & layers.local_mask(q_pos, k_pos, window)
    mask = jnp.broadcast_to(mask[:, None, None], (b, 1, g, t, k.shape[2])).reshape(b, 1, g * t, -1)
    return qr, mask


def _attention_pallas(q, k, v, q_pos, k_pos, k_valid, n_max, window, scalar, cap, slotted):
    """:func:`attention` by the Pallas kernel (``window`` travels as an array argument); its
    gradient is the standard attention's, blockwise from ``PALLAS_GRAD_BLOCKWISE_FROM`` keys."""
    b, t, h, d = q.shape
    win = jnp.asarray(pallas_attention.FAR if window is None else window, jnp.int32)

    def exact(q_, k_, v_, qp, kp, kv, w):
        f = lambda a: K.cast(a, jnp.float32)
        o = pallas_attention.attention(
            f(q_), f(k_), f(v_), qp, kp, kv, n_max=n_max, window=w, scalar=scalar, cap=cap, slotted=slotted
        )
        return K.cast(o, v_.dtype)

    def standard(q_, k_, v_, qp, kp, kv, w):
        if k_.shape[2] >= PALLAS_GRAD_BLOCKWISE_FROM:
            o = blockwise.blockwise_attention(
                q_, k_, v_, qp, kp, kv, window=w, scalar=scalar, cap=cap, block=PALLAS_GRAD_BLOCK
            )
            return o.astype(v_.dtype)
        qr, mask = _grouped(q_, k_, qp, kp, kv, w)
        o = _attention_standard(qr, k_, v_, mask, scalar, cap)
        return o.reshape(b, k_.shape[1], -1, t, d).transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)

    return K._with_standard_grad(exact, standard)(q, k, v, q_pos, k_pos, k_valid, win)
