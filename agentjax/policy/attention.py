"""The KV cache and one layer's attention (teacher-forced, or writing the cache then reading it),
in the standard, blockwise, tiled-exact or exact-sum kernels of the config.

Which kernel attends is :func:`attention_plan`'s choice, made per call shape at trace time and
recorded with its reason (:func:`recorded_plans`): exact mode always keeps its batch-invariant
kernels; fast mode uses the full score tensor below ``attention_blockwise_from`` keys or for
fewer queries than ``attention_block`` (decode), and the blockwise online-softmax kernel
(``policy/blockwise.py``) otherwise.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

from agentjax.policy import blockwise as BW
from agentjax.policy import exact_attention as EA
from agentjax.policy import layers as L
from agentjax.policy.config import ModelConfig

# Why no fused kernel is used where one exists: the model masks by per-row positions (slot ==
# position, padding at position ``length`` or at the cache's write sink, per-row offsets in the
# slot engine), which neither fused kernel takes without a dense [B, T, S] mask.
FUSED_UNUSED = {
    "gpu": (
        "cuDNN flash attention (jax.nn.dot_product_attention(implementation='cudnn')) is not "
        "used: it masks by causal index and sequence lengths, the model by per-row positions; "
        "a dense mask argument would be O(T x S) again"
    ),
    "tpu": (
        "Pallas Splash attention is not used: its masks are static block-sparse patterns, the "
        "model's are per-row positions known only at run time"
    ),
    # Any other backend (the CPU, and the CPU host that compiles for TPU ahead of time):
    "": (
        "no fused kernel on any backend: the model masks by per-row positions, cuDNN flash takes "
        "causal/length masks only and Pallas Splash static block-sparse ones"
    ),
}

_PLANS: dict[tuple, tuple[str, str]] = {}


def attention_plan(c: ModelConfig, q_len: int, k_len: int, backend: str | None = None) -> tuple[str, str]:
    """``(kernel, reason)`` for one layer's attention of ``q_len`` queries over ``k_len`` keys.

    Kernels: ``"exact"`` (exact mode's batch-invariant or tiled kernels, whatever
    ``attention_kernel`` says: bitwise sampler == learner rests on them), ``"full"`` (the full
    score tensor) or ``"blockwise"`` (:func:`agentjax.policy.blockwise.blockwise_attention`).
    ``"auto"`` is ``"full"`` below ``attention_blockwise_from`` keys (so the default run's
    shapes keep their bits) and for fewer queries than ``attention_block`` (decode); the reason
    says why no fused kernel was taken on ``backend`` (default: JAX's default backend).
    """
    if c.exact:
        kind = c.invariant or "tiled"
        return "exact", f"exact mode: the batch-invariant {kind!r} kernels (bitwise sampler == learner)"
    backend = backend or jax.default_backend()
    fused = FUSED_UNUSED.get({"cuda": "gpu", "rocm": "gpu"}.get(backend, backend), FUSED_UNUSED[""])
    if c.attention_kernel == "full":
        return "full", "attention_kernel='full'"
    if c.attention_kernel == "blockwise":
        return "blockwise", f"attention_kernel='blockwise', block={c.attention_block}; {fused}"
    if k_len < c.attention_blockwise_from:
        return "full", (
            f"{k_len} keys < attention_blockwise_from={c.attention_blockwise_from}: the full score "
            f"tensor [.., {q_len}, {k_len}]"
        )
    if q_len < c.attention_block:  # decode, and the slot engine's short chunks
        return "full", (
            f"{q_len} queries < attention_block={c.attention_block}: the full scores "
            f"[.., {q_len}, {k_len}] are already linear in the keys (attention_kernel='blockwise' "
            "forces the block loop)"
        )
    return "blockwise", (
        f"{k_len} keys >= attention_blockwise_from={c.attention_blockwise_from}: blockwise, "
        f"block={c.attention_block} (memory O({q_len} x {min(c.attention_block, k_len)}) per head); {fused}"
    )


def _plan(c: ModelConfig, q_len: int, k_len: int, where: str) -> str:
    """:func:`attention_plan`, recorded (and logged once) per distinct call."""
    kernel, reason = attention_plan(c, q_len, k_len)
    key = (where, q_len, k_len, kernel, reason)
    if key not in _PLANS:
        _PLANS[key] = (kernel, reason)
        logging.info("attention (%s, %d queries x %d keys): %s (%s)", where, q_len, k_len, kernel, reason)
    return kernel


def recorded_plans() -> list[dict]:
    """Every distinct attention choice traced in this process: where (``"forced"``: teacher
    forced, ``"cache"``: prefill/decode), queries, keys, kernel and the reason."""
    return [{"where": w, "queries": t, "keys": s, "kernel": k, "reason": r} for (w, t, s, k, r) in _PLANS]


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
        o = EA.attention(
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
    if kbuf is None and _plan(c, t, t, "forced") == "blockwise":
        kv = lambda a: a.reshape(b, t, *a.shape[1:]).swapaxes(1, 2)  # the cache layout
        o = BW.blockwise_attention(
            q.reshape(b, t, *q.shape[1:]), kv(k), kv(v), positions, positions, block=c.attention_block, **opt
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
        o = EA.attention(
            q.reshape(b, t, *q.shape[1:]),
            kbuf,
            vbuf,
            positions,
            slots,
            slots < sink,
            n_max=c.max_seq_len + 1,
            kind=c.invariant,
            slotted=True,  # key j at slot j: the Pallas kernel attends without moving them
            **opt,
        )
        return o.reshape(q.shape), kbuf, vbuf
    if c.exact:
        return L.attention_exact(q, pos_rows, batch_rows, kbuf, vbuf, c.exact_tile, **opt), kbuf, vbuf
    if _plan(c, t, kbuf.shape[2], "cache") == "blockwise":
        slots = jnp.broadcast_to(jnp.arange(kbuf.shape[2], dtype=jnp.int32), (b, kbuf.shape[2]))
        o = BW.blockwise_attention(
            q.reshape(b, t, *q.shape[1:]), kbuf, vbuf, positions, slots, block=c.attention_block, **opt
        )
        return o.reshape(q.shape), kbuf, vbuf
    o = L.attention_cache(q.reshape(b, t, *q.shape[1:]), kbuf, vbuf, positions, **opt)
    return o.reshape(q.shape), kbuf, vbuf
