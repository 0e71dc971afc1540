"""Blockwise (online-softmax, flash-style) attention in plain JAX: memory O(T x block), not O(T x S).

The full-score kernels (``layers.attention_standard``, ``layers.attention_cache``) hold every
query's scores against every key, ``[B, Hkv, G, T, S]`` in float32: Qwen3-8B's prefill of 256 x
1025 tokens against a 4097-slot cache is 128 GiB of scores before partitioning (issue #32).
Here the keys are visited in blocks of ``block`` slots (a ``fori_loop``); each query keeps a
running maximum ``m``, a running denominator ``l`` and an un-normalised output, rescaled when the
maximum grows (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022). Only one block's
scores ``[B, Hkv, G, T, block]`` are live at a time.

The backward pass is a ``custom_vjp`` that recomputes each block's scores from ``q``, ``k`` and
the saved ``m`` and ``l`` (the FlashAttention-2 backward), so the gradient is O(T x block) as
well: differentiating the loop itself would keep every block's scores for the backward pass.

The mask is the model's, by position (as in the full-score kernels): a query at position ``p``
sees the valid keys at positions ``<= p`` (and ``p - k < window`` when the layer slides). Keys
and values are in the cache layout ``[B, Hkv, S, D]`` (slot == position for the cache, see
``attention.init_cache``); the teacher-forced caller passes its own keys transposed to it.
Padding is whatever positions say: the learner's padding at position ``length`` and a sampler
row's padding at the write sink are masked by position; left padding works the same way (pad
keys at positions beyond every real query). A query that sees no key at all (a padding query)
averages all ``S`` values uniformly, as the full-score kernels' softmax over ``NEG_INF`` does.

A block size that does not divide ``S`` is handled without copying the keys: the last block
starts at ``S - block`` and the slots an earlier block already visited are excluded from it.
Results equal the full-score kernels' up to float rounding (the sums run in another order), so
this is a fast-mode kernel only; exact mode keeps its batch-invariant kernels (``kernels.py``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

NEG_INF = -1e30  # as layers.NEG_INF: masked scores, so a fully masked row is uniform there too


def blockwise_attention(q, k, v, q_pos, k_pos, k_valid=None, *, window=None, scalar=0.0, cap=0.0, block=512):
    """Grouped-query attention by key blocks. q: [B, T, H, D]; k, v: [B, Hkv, S, D];
    q_pos [B, T], k_pos [B, S] int; k_valid [B, S] bool (None: all). Returns [B, T, H, D] in
    ``v``'s dtype.

    Scores are divided by ``sqrt(scalar or D)`` and soft-capped at ``cap`` (0: none); ``window``
    (None, an int or a traced int) as in ``layers.attention_standard``.
    """
    b, t, h, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    if k.shape != (b, hkv, s, d) or v.shape != k.shape or h % hkv:
        raise ValueError(f"blockwise_attention: q {q.shape}, k {k.shape}, v {v.shape} do not match")
    if k_valid is None:
        k_valid = jnp.ones((b, s), bool)
    block = max(1, min(int(block), s))
    has_window = window is not None
    win = jnp.asarray(window if has_window else 0, jnp.int32)
    qg = q.reshape(b, t, hkv, h // hkv, d).transpose(0, 2, 3, 1, 4)  # [B, Hkv, G, T, D]
    o = _attend(block, float(scalar or d), float(cap), has_window, qg, k, v, q_pos, k_pos, k_valid, win)
    return o.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d).astype(v.dtype)


def _block(j, block, s):
    """Start of key block ``j`` (the last one ends at ``s``) and which of its slots are new."""
    start = jnp.minimum(j * block, s - block)
    fresh = start + jnp.arange(block) >= j * block  # [block]
    return start, fresh


def _scores(qg, kb, qp, kp, kv, win, scale_d, cap, has_window):
    """One block: capped scores [B, Hkv, G, T, blk] (masked to NEG_INF), the mask, and d s / d raw."""
    raw = jnp.einsum("bkgtd,bksd->bkgts", qg, kb, preferred_element_type=jnp.float32)
    raw = raw / jnp.sqrt(jnp.float32(scale_d))
    if cap:
        sc = cap * jnp.tanh(raw / cap)
        dcap = 1.0 - jnp.square(sc / cap)
    else:
        sc, dcap = raw, None
    mask = (kp[:, None, :] <= qp[:, :, None]) & kv[:, None, :]  # [B, T, blk]
    if has_window:
        mask = mask & ((qp[:, :, None] - kp[:, None, :]) < win)
    mask = mask[:, None, None]  # [B, 1, 1, T, blk]
    return jnp.where(mask, sc, NEG_INF), mask, dcap


def _slice(x, start, block, axis):
    return jax.lax.dynamic_slice_in_dim(x, start, block, axis=axis)


def _forward(block, scale_d, cap, has_window, qg, k, v, q_pos, k_pos, k_valid, win):
    """Output [B, Hkv, G, T, D] (float32) and the per-query statistics ``m``, ``l``."""
    s = k.shape[2]
    nb = -(-s // block)
    shape = qg.shape[:-1]  # [B, Hkv, G, T]

    def body(j, carry):
        m, l, acc = carry
        start, fresh = _block(j, block, s)
        kb, vb = _slice(k, start, block, 2), _slice(v, start, block, 2)
        kp, kv = _slice(k_pos, start, block, 1), _slice(k_valid, start, block, 1)
        sc, _, _ = _scores(qg, kb, q_pos, kp, kv, win, scale_d, cap, has_window)
        sc = jnp.where(fresh, sc, NEG_INF)
        m_new = jnp.maximum(m, jnp.max(sc, axis=-1))
        p = jnp.where(fresh, jnp.exp(sc - m_new[..., None]), 0.0)
        alpha = jnp.exp(m - m_new)
        l = alpha * l + jnp.sum(p, axis=-1)
        pv = jnp.einsum("bkgts,bksd->bkgtd", p.astype(vb.dtype), vb, preferred_element_type=jnp.float32)
        return m_new, l, alpha[..., None] * acc + pv

    init = (
        jnp.full(shape, NEG_INF, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros((*shape, v.shape[-1]), jnp.float32),
    )
    # A while_loop, not a fori_loop: with a static trip count that is a scan, and inside a scan
    # over the layers the gradient's partial evaluation stacked its per-block values (masks of
    # [B, Hkv, G, T, block]) across the blocks as residuals despite the custom_vjp: O(T x S)
    # bytes per head (Qwen3-8B at 32k: three 32 GiB stacks per chip). A while_loop is never split.
    step = lambda c: (c[0] + 1, body(c[0], c[1]))
    _, (m, l, acc) = jax.lax.while_loop(lambda c: c[0] < nb, step, (0, init))
    return acc / l[..., None], m, l


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _attend(block, scale_d, cap, has_window, qg, k, v, q_pos, k_pos, k_valid, win):
    return _forward(block, scale_d, cap, has_window, qg, k, v, q_pos, k_pos, k_valid, win)[0]


def _attend_fwd(block, scale_d, cap, has_window, qg, k, v, q_pos, k_pos, k_valid, win):
    o, m, l = _forward(block, scale_d, cap, has_window, qg, k, v, q_pos, k_pos, k_valid, win)
    return o, (qg, k, v, q_pos, k_pos, k_valid, win, o, m, l)


def _attend_bwd(block, scale_d, cap, has_window, res, do):
    qg, k, v, q_pos, k_pos, k_valid, win, o, m, l = res
    s = k.shape[2]
    nb = -(-s // block)
    f32, dt = jnp.float32, v.dtype
    do_c = do.astype(dt)
    delta = jnp.sum(do.astype(f32) * o, axis=-1)  # [B, Hkv, G, T]: sum_j p_ij dp_ij
    inv = 1.0 / jnp.sqrt(jnp.float32(scale_d))

    def body(j, carry):
        dq, dk, dv = carry
        start, fresh = _block(j, block, s)
        kb, vb = _slice(k, start, block, 2), _slice(v, start, block, 2)
        kp, kv = _slice(k_pos, start, block, 1), _slice(k_valid, start, block, 1)
        sc, mask, dcap = _scores(qg, kb, q_pos, kp, kv, win, scale_d, cap, has_window)
        p = jnp.where(fresh, jnp.exp(sc - m[..., None]) / l[..., None], 0.0)  # [B, Hkv, G, T, blk]
        # The matmuls take their operands in the inputs' dtype (bf16 on the MXU / tensor cores)
        # and accumulate in float32, as the forward's and the full-score kernels' do.
        dvb = jnp.einsum("bkgts,bkgtd->bksd", p.astype(dt), do_c, preferred_element_type=f32)
        dp = jnp.einsum("bkgtd,bksd->bkgts", do_c, vb.astype(dt), preferred_element_type=f32)
        ds = p * (dp - delta[..., None])
        if dcap is not None:
            ds = ds * dcap
        ds = (jnp.where(mask & fresh, ds, 0.0) * inv).astype(dt)  # masked scores are constants
        dq = dq + jnp.einsum("bkgts,bksd->bkgtd", ds, kb.astype(dt), preferred_element_type=f32)
        dkb = jnp.einsum("bkgts,bkgtd->bksd", ds, qg.astype(dt), preferred_element_type=f32)
        add = lambda acc, x: jax.lax.dynamic_update_slice_in_dim(
            acc, _slice(acc, start, block, 2) + x, start, 2
        )
        return dq, add(dk, dkb), add(dv, dvb)

    zeros = lambda x: jnp.zeros(x.shape, jnp.float32)
    dq, dk, dv = jax.lax.fori_loop(0, nb, body, (zeros(qg), zeros(k), zeros(v)))
    return dq.astype(qg.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None


_attend.defvjp(_attend_fwd, _attend_bwd)
