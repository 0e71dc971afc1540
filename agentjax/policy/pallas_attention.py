"""Exact mode's attention in Pallas (``exact_kernels="pallas"``): an online softmax over keys
in blocks of :data:`BKV` slots, in slot order, each query row on its own.

The split over keys is fixed by *position*, not by the caller: keys sit in slots indexed by
their position (the sampler's KV cache already holds them so; the learner's teacher-forced pass
scatters its own keys into ``n_max`` slots first), so a query sees the same keys in the same
slots of the same blocks whether it is a decode step against the cache, a prompt prefill or a
row of a learner batch (any batch size, padding or order). A block with no key a query may see
leaves its state bitwise unchanged (its weights are exactly 0 and the running max does not
move), so a longer cache, or a shorter learner row, changes no bit.

Per query row, per block of keys: ``s = (q . k) * scale`` (one block product of fixed shape),
optional soft-capping, ``m' = max(m, max_s)``, ``p = exp(s - m')`` (0 where masked),
``l = exp(m - m') l + sum p``, ``acc = exp(m - m') acc + p @ v``; the output is ``acc / l``.
float32 throughout (see ``pallas_kernels.py`` for block shapes, padding and interpret mode).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from agentjax.policy.pallas_kernels import BM, F32, HIGHEST, NEG_INF, interpret, pad_to, span

BKV = 128  # keys per block
BQ = BM  # query rows per block
FAR = 1 << 30  # the position of an empty slot: after every query


def _kernel(q_ref, k_ref, v_ref, qp_ref, qw_ref, kp_ref, o_ref, *, scale: float, cap: float):
    q = q_ref[...]
    qp, qw = qp_ref[...], qw_ref[...]  # [BQ, 1]

    def body(j, carry):
        m, l, acc = carry
        s0 = pl.multiple_of(j * BKV, BKV)
        kb, vb, kp = k_ref[pl.ds(s0, BKV), :], v_ref[pl.ds(s0, BKV), :], kp_ref[:, pl.ds(s0, BKV)]
        s = jax.lax.dot_general(
            q, kb, (((1,), (1,)), ((), ())), precision=HIGHEST, preferred_element_type=F32
        )
        s = s * F32(scale)
        if cap:
            s = F32(cap) * jnp.tanh(s / F32(cap))
        ok = (kp <= qp) & (qp - kp < qw)  # [BQ, BKV]
        s = jnp.where(ok, s, NEG_INF)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        p = jnp.where(ok, jnp.exp(s - m_new), 0.0)
        alpha = jnp.exp(m - m_new)
        l = alpha * l + jnp.sum(p, axis=-1, keepdims=True)
        acc = alpha * acc + jnp.dot(p, vb, precision=HIGHEST, preferred_element_type=F32)
        return m_new, l, acc

    rows = q.shape[0]
    init = (jnp.full((rows, 1), NEG_INF, F32), jnp.zeros((rows, 1), F32), jnp.zeros(q.shape, F32))
    _, l, acc = jax.lax.fori_loop(0, k_ref.shape[0] // BKV, body, init)
    o_ref[...] = jnp.where(l > 0, acc / jnp.where(l > 0, l, 1.0), 0.0)


def slot_keys(k, v, k_pos, k_valid, n_slots: int):
    """The keys [B, Hkv, S, D] moved to the slot of their position (``0 .. n_slots - 2``; others,
    and invalid keys, are dropped); returns ``(k, v, slot_pos)`` with ``FAR`` in empty slots."""
    b = k.shape[0]
    sink = n_slots - 1
    slot = jnp.where(k_valid & (k_pos >= 0) & (k_pos < sink), k_pos, sink).astype(jnp.int32)
    rows = jnp.arange(b, dtype=jnp.int32)[:, None]
    put = lambda x: (
        jnp.zeros((b, x.shape[1], n_slots, x.shape[3]), x.dtype).at[rows, :, slot].set(x.swapaxes(1, 2))
    )
    here = jnp.zeros((b, n_slots), bool).at[rows, slot].set(True).at[:, sink].set(False)
    slots = jnp.broadcast_to(jnp.arange(n_slots, dtype=jnp.int32), (b, n_slots))
    return put(k), put(v), jnp.where(here, slots, FAR)


def attention(q, k, v, q_pos, k_pos, k_valid, *, n_max: int, window=None, scalar=0.0, cap=0.0, slotted=False):
    """Grouped-query causal attention, float32: q [B, T, H, D]; k, v [B, Hkv, S, D]; q_pos
    [B, T]; k_pos, k_valid [B, S]. ``slotted``: the keys already sit at the slot of their
    position (the KV cache; key ``j`` has position ``k_pos[:, j] = j``); else they are moved
    there (:func:`slot_keys`, ``n_max`` slots). Returns [B, T, H, D] float32."""
    b, t, h, d = q.shape
    hkv = k.shape[1]
    g = h // hkv
    if slotted:
        kp = jnp.where(k_valid, k_pos, FAR).astype(jnp.int32)
    else:
        k, v, kp = slot_keys(k, v, k_pos, k_valid, n_max)
    s = k.shape[2]
    r, rp, sp, dp = g * t, span(g * t, BQ), span(s, BKV), span(d, 128)
    qr = q.astype(F32).reshape(b, t, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b * hkv, r, d)
    qr = pad_to(pad_to(qr, 1, rp), 2, dp)
    kv = lambda a: pad_to(pad_to(a.astype(F32).reshape(b * hkv, s, d), 1, sp), 2, dp)
    win = jnp.asarray(FAR if window is None else window, jnp.int32)
    qp = pad_to(jnp.tile(q_pos.astype(jnp.int32), (1, g)), 1, rp, -1)[..., None]  # rows (g, t)
    qw = jnp.broadcast_to(win, qp.shape)
    kp = pad_to(kp, 1, sp, FAR)[:, None, :]
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float((scalar or d) ** -0.5), cap=float(cap)),
        out_shape=jax.ShapeDtypeStruct((b * hkv, rp, dp), F32),
        grid=(b * hkv, rp // BQ),
        in_specs=[
            pl.BlockSpec((None, BQ, dp), lambda i, j: (i, j, 0)),
            pl.BlockSpec((None, sp, dp), lambda i, j: (i, 0, 0)),
            pl.BlockSpec((None, sp, dp), lambda i, j: (i, 0, 0)),
            pl.BlockSpec((None, BQ, 1), lambda i, j: (jax.lax.div(i, hkv), j, 0)),
            pl.BlockSpec((None, BQ, 1), lambda i, j: (jax.lax.div(i, hkv), j, 0)),
            pl.BlockSpec((None, 1, sp), lambda i, j: (jax.lax.div(i, hkv), 0, 0)),
        ],
        out_specs=pl.BlockSpec((None, BQ, dp), lambda i, j: (i, j, 0)),
        interpret=interpret(),
    )(qr, kv(k), kv(v), qp, qw, kp)
    out = out[:, :r, :d].reshape(b, hkv, g, t, d)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)
