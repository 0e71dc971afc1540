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
float32 throughout (see ``pallas_kernels.py`` for block shapes, padding, interpret mode and
partitioning over a mesh). The slots are visited in chunks of :data:`KV_CHUNK` slots, one grid
step each (in order: the chunk axis is the last grid axis and TPU grids run sequentially), so
VMEM holds one chunk of keys, not the whole ``n_max`` (32k slots of float32 keys and values
would be 64 MiB); on GPU (Triton, whose grid runs in parallel) all slots are one chunk.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from agentjax.policy import pallas_kernels as PK
from agentjax.policy.pallas_kernels import BM, F32, HIGHEST, NEG_INF, interpret, pad_to, span

BKV = 128  # keys per block
KV_CHUNK = 512  # key slots per grid step (TPU, interpret): the state is carried in VMEM scratch
BQ = BM  # query rows per block
FAR = 1 << 30  # the position of an empty slot: after every query


def _kernel(q_ref, k_ref, v_ref, qp_ref, qw_ref, kp_ref, o_ref, *scratch, scale: float, cap: float):
    """One query block against one chunk of key slots (``KV_CHUNK``, or all of them): the online
    softmax over its blocks of :data:`BKV` slots in order. With several chunks (a grid axis,
    run in order) the running state lives in ``scratch`` between chunks; the sequence of float32
    operations on it is the same as in one chunk, so the chunk size changes no bit."""
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
    n_blocks = k_ref.shape[0] // BKV
    if not scratch:  # all slots in one chunk
        _, l, acc = jax.lax.fori_loop(0, n_blocks, body, init)
        o_ref[...] = jnp.where(l > 0, acc / jnp.where(l > 0, l, 1.0), 0.0)
        return
    m_ref, l_ref, acc_ref = scratch
    c, last = pl.program_id(2), pl.num_programs(2) - 1

    @pl.when(c == 0)
    def _():
        m_ref[...], l_ref[...], acc_ref[...] = init

    m, l, acc = jax.lax.fori_loop(0, n_blocks, body, (m_ref[...], l_ref[...], acc_ref[...]))
    m_ref[...], l_ref[...], acc_ref[...] = m, l, acc

    @pl.when(c == last)
    def _():
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
    there (:func:`slot_keys`, ``n_max`` slots). Returns [B, T, H, D] float32.

    On a mesh (``pallas_kernels.on_mesh``): the batch is split over the row axes that divide it
    and the kv heads (with their query heads) over ``tensor``; every query row still sees all
    of its keys, in the same blocks and order."""
    win = jnp.asarray(FAR if window is None else window, jnp.int32)
    local = functools.partial(_attention, n_max=n_max, scalar=scalar, cap=cap, slotted=slotted)
    ctx = PK.current_mesh()
    if ctx is None:
        return local(q, k, v, q_pos, k_pos, k_valid, win)
    mesh, rows = ctx
    h_axes = PK.split_axes(mesh, k.shape[1], ("tensor",) if "tensor" in mesh.axis_names else ())
    b_axes = PK.split_axes(mesh, q.shape[0], PK.row_axes(mesh, rows, exclude=h_axes))
    b_, h_ = PK.spec_axes(b_axes), PK.spec_axes(h_axes)
    q_, kv_, row = P(b_, None, h_, None), P(b_, h_, None, None), P(b_, None)
    specs = (q_, kv_, kv_, row, row, row, P())
    return PK.shard(local, mesh, specs, P(b_, None, h_, None))(q, k, v, q_pos, k_pos, k_valid, win)


def _attention(q, k, v, q_pos, k_pos, k_valid, win, *, n_max, scalar, cap, slotted):
    b, t, h, d = q.shape
    hkv = k.shape[1]
    g = h // hkv
    if slotted:
        kp = jnp.where(k_valid, k_pos, FAR).astype(jnp.int32)
    else:
        k, v, kp = slot_keys(k, v, k_pos, k_valid, n_max)
    s = k.shape[2]
    sp = span(s, BKV)
    chunk = sp if PK._triton() or sp <= KV_CHUNK else KV_CHUNK  # Triton: no grid reduction
    sp = -(-sp // chunk) * chunk  # slots past the keys are empty (FAR): no bit changes
    r, rp, dp = g * t, span(g * t, BQ), span(d, 128)
    qr = q.astype(F32).reshape(b, t, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b * hkv, r, d)
    qr = pad_to(pad_to(qr, 1, rp), 2, dp)
    kv = lambda a: pad_to(pad_to(a.astype(F32).reshape(b * hkv, s, d), 1, sp), 2, dp)
    qp = pad_to(jnp.tile(q_pos.astype(jnp.int32), (1, g)), 1, rp, -1)[..., None]  # rows (g, t)
    qw = jnp.broadcast_to(win, qp.shape)
    kp = pad_to(kp, 1, sp, FAR)[:, None, :]
    n_chunks = sp // chunk
    state = [pltpu.VMEM((BQ, 1), F32), pltpu.VMEM((BQ, 1), F32), pltpu.VMEM((BQ, dp), F32)]  # m, l, acc
    scratch = [] if n_chunks == 1 else state
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float((scalar or d) ** -0.5), cap=float(cap)),
        out_shape=jax.ShapeDtypeStruct((b * hkv, rp, dp), F32),
        grid=(b * hkv, rp // BQ, n_chunks),
        in_specs=[
            pl.BlockSpec((None, BQ, dp), lambda i, j, c: (i, j, 0)),
            pl.BlockSpec((None, chunk, dp), lambda i, j, c: (i, c, 0)),
            pl.BlockSpec((None, chunk, dp), lambda i, j, c: (i, c, 0)),
            pl.BlockSpec((None, BQ, 1), lambda i, j, c: (jax.lax.div(i, hkv), j, 0)),
            pl.BlockSpec((None, BQ, 1), lambda i, j, c: (jax.lax.div(i, hkv), j, 0)),
            pl.BlockSpec((None, 1, chunk), lambda i, j, c: (jax.lax.div(i, hkv), 0, c)),
        ],
        out_specs=pl.BlockSpec((None, BQ, dp), lambda i, j, c: (i, j, 0)),
        scratch_shapes=scratch,
        interpret=interpret(),
        compiler_params=PK.compiler_params(),
    )(qr, kv(k), kv(v), qp, qw, kp)
    out = out[:, :r, :d].reshape(b, hkv, g, t, d)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)
