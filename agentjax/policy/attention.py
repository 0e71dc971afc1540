"""The KV cache and one layer's attention (teacher-forced, or writing the cache then reading it),
in the standard, tiled-exact or exact-sum kernels of the config."""

from __future__ import annotations

import jax.numpy as jnp

from agentjax.policy import kernels as K
from agentjax.policy import layers as L
from agentjax.policy.config import ModelConfig


def init_cache(config: ModelConfig, batch: int, max_len: int | None = None):
    """An empty KV cache: ``{"k", "v"}`` of shape [layers, batch, kv_heads, max_len + 1, head_dim].

    Heads before slots, so the attention contractions read each head's keys and values in place
    (a [.., slots, kv_heads, ..] layout was transposed per layer at every decode step).

    Slots ``0 .. max_len - 1`` hold positions; the last slot is a write sink: padding tokens
    (positions outside the cache) write there and no query attends to it. Every cache write is
    therefore in bounds by construction; XLA's "drop out-of-bounds" scatter is not relied on
    (measured on an H200, jax 0.11: a write at slot ``max_len`` of row b landed in slot 0 of
    row b + 1).
    """
    max_len = config.max_seq_len if max_len is None else max_len
    if config.exact and max_len != config.max_seq_len:
        raise ValueError(
            f"exact mode attends over exactly max_seq_len={config.max_seq_len} slots; "
            f"init_cache got max_len={max_len}"
        )
    shape = (config.n_layers, batch, config.n_kv_heads, max_len + 1, config.head_dim)
    return {"k": jnp.zeros(shape, config.cdtype), "v": jnp.zeros(shape, config.cdtype)}


def unstack_cache(cache):
    """Per-layer K/V buffers (tuples) for the unrolled layers; :func:`stack_cache` undoes it."""
    if cache is None or isinstance(cache["k"], tuple):
        return cache
    return {kv: tuple(cache[kv][i] for i in range(cache[kv].shape[0])) for kv in ("k", "v")}


def stack_cache(cache):
    if cache is None or not isinstance(cache["k"], tuple):
        return cache
    return {kv: jnp.stack(cache[kv]) for kv in ("k", "v")}


def attend(c: ModelConfig, q, k, v, kbuf, vbuf, positions, pos_rows, batch_rows, window=None):
    """One layer's attention for rows [N, H, D]; with buffers [B, Hkv, S, D], writes k/v first.

    Positions outside ``0 .. S - 2`` write to the sink slot ``S - 1`` (see :func:`init_cache`).
    ``window``: this layer's sliding window (None: full causal attention).
    """
    b, t = positions.shape
    opt = dict(window=window, scalar=c.attn_scalar, cap=c.attn_softcap)
    if kbuf is None and c.invariant:  # teacher-forced: the sequence's own keys
        kv = lambda a: a.reshape(b, t, *a.shape[1:]).swapaxes(1, 2)
        o = K.attention(
            q.reshape(b, t, *q.shape[1:]),
            kv(k),
            kv(v),
            positions,
            positions,
            jnp.ones((b, t), bool),
            n_max=c.max_seq_len + 1,
            kind=c.invariant,
            **opt,
        )
        return o.reshape(q.shape), None, None
    if kbuf is None:
        o = L.attention_standard(
            q.reshape(b, t, *q.shape[1:]),
            k.reshape(b, t, *k.shape[1:]),
            v.reshape(b, t, *v.shape[1:]),
            positions,
            positions,
            jnp.ones((b, t), bool),
            **opt,
        )
        return o.reshape(q.shape), None, None
    sink = kbuf.shape[2] - 1
    slot = jnp.where((pos_rows >= 0) & (pos_rows < sink), pos_rows, sink)
    put = lambda buf, x: buf.at[batch_rows, :, slot].set(x.astype(buf.dtype), mode="promise_in_bounds")
    kbuf, vbuf = put(kbuf, k), put(vbuf, v)
    if c.invariant:
        s = kbuf.shape[2]
        slots = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
        o = K.attention(
            q.reshape(b, t, *q.shape[1:]),
            kbuf,
            vbuf,
            positions,
            slots,
            slots < sink,
            n_max=c.max_seq_len + 1,
            kind=c.invariant,
            **opt,
        )
        return o.reshape(q.shape), kbuf, vbuf
    if c.exact:
        return L.attention_exact(q, pos_rows, batch_rows, kbuf, vbuf, c.exact_tile, **opt), kbuf, vbuf
    o = L.attention_cache(q.reshape(b, t, *q.shape[1:]), kbuf, vbuf, positions, **opt)
    return o.reshape(q.shape), kbuf, vbuf
