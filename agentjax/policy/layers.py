"""Building blocks: RMSNorm, RoPE, SwiGLU, MoE, attention, and the row tiling of exact mode.

Every function here is pure. Row-wise work is written for a ``[N, ...]`` block of rows so that
:func:`rowwise` can run it either directly (standard kernels) or over fixed tiles of exactly
``tile`` rows (exact mode), which makes each row's result independent of the other rows.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -1e30


def rowwise(fn: Callable, tile: int, *xs):
    """Applies ``fn`` to rows ``xs[i][:N]``; in exact mode over zero-padded tiles of ``tile`` rows.

    XLA picks matmul and reduction kernels by shape, so a row's value can depend on how many
    other rows are computed with it. With a fixed tile shape the kernel is always the same one.
    There are always at least two tiles: XLA inlines a loop of trip count 1 and then fuses its
    body with the surrounding ops, which changed results by an ulp (measured: rows 0..7 of a
    29-row call differed from the same 8 rows alone until the loop was kept).
    """
    if tile <= 0:
        return fn(*xs)
    n = xs[0].shape[0]
    n_tiles = max(-(-n // tile), 2)
    pad = n_tiles * tile - n

    def split(x):
        x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape((n_tiles, tile) + x.shape[1:])

    out = jax.lax.map(lambda args: fn(*args), tuple(split(x) for x in xs))
    return jax.tree.map(lambda y: y.reshape((n_tiles * tile,) + y.shape[2:])[:n], out)


def rms_norm(x, scale, eps):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * scale.astype(jnp.float32)).astype(x.dtype)


def rope(x, pos, theta, which=None):
    """Rotary embedding (rotate-half layout, as Llama/Qwen in transformers). x: [N, H, D], pos: [N].

    ``theta``: the base of plain RoPE, or a tuple of :class:`agentjax.policy.rope.Rotary` of which
    ``which`` (an int, traced in a scan over layers) is used: its inverse frequencies, and cos and
    sin multiplied by its ``scale``.
    """
    d = x.shape[-1]
    scale = None
    if isinstance(theta, tuple):
        inv = jnp.asarray(np.array([r.inv_freq for r in theta], np.float32))[which]
        scale = jnp.asarray(np.array([r.scale for r in theta], np.float32))[which]
    else:
        inv = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    ang = pos.astype(jnp.float32)[:, None] * inv[None, :]  # [N, D/2]
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    if scale is not None:
        cos, sin = cos * scale, sin * scale
    cos = jnp.concatenate([cos] * 2, -1)[:, None, :]
    sin = jnp.concatenate([sin] * 2, -1)[:, None, :]
    xf = x.astype(jnp.float32)
    rot = jnp.concatenate([-xf[..., d // 2 :], xf[..., : d // 2]], -1)
    return (xf * cos + rot * sin).astype(x.dtype)


def act(g, kind: str = "silu"):
    """The gate's activation: ``silu`` (SwiGLU) or ``gelu_tanh`` (GeGLU, tanh approximation)."""
    return jax.nn.silu(g) if kind == "silu" else jax.nn.gelu(g, approximate=True)


def softcap(s, cap: float):
    """``cap * tanh(s / cap)`` (Gemma-2's soft-capping; ``cap == 0``: ``s`` unchanged)."""
    return s if not cap else cap * jnp.tanh(s / cap)


def local_mask(q_pos, k_pos, window):
    """[B, T, S]: key within ``window`` of the query (``q - k < window``; None: every key)."""
    if window is None:
        return True
    return (q_pos[:, :, None] - k_pos[:, None, :]) < window


def swiglu(x, w_gate, w_up, w_down, kind: str = "silu"):
    """The gated MLP ``(act(x W_gate) * x W_up) W_down`` (``kind``: see :func:`act`)."""
    dt = x.dtype
    g = x @ w_gate.astype(dt)
    u = x @ w_up.astype(dt)
    return (act(g, kind) * u) @ w_down.astype(dt)


def moe(x, p, k: int, forced=None):
    """Top-k mixture of experts with dense (capacity-free) dispatch.

    Args:
      x: [N, D] rows. p: router [D, E], w_gate/w_up [E, D, F], w_down [E, F, D].
      forced: optional [N, k] expert ids to use instead of the router's top-k (routing replay, R3).
        Gate weights are always the current router's softmax renormalised over the chosen experts.
    Returns: (y [N, D], chosen [N, k] int32, router_probs [N, E] float32).
    """
    dt = x.dtype
    logits = (x @ p["router"].astype(dt)).astype(jnp.float32)  # [N, E]
    probs = jax.nn.softmax(logits, axis=-1)
    chosen = jax.lax.top_k(logits, k)[1] if forced is None else forced.astype(jnp.int32)
    picked = jnp.take_along_axis(probs, chosen, axis=-1)
    gates = picked / jnp.sum(picked, axis=-1, keepdims=True)  # [N, k]
    n_exp = logits.shape[-1]
    weight = jnp.sum(jax.nn.one_hot(chosen, n_exp, dtype=jnp.float32) * gates[..., None], axis=1)
    g = jnp.einsum("nd,edf->nef", x, p["w_gate"].astype(dt))
    u = jnp.einsum("nd,edf->nef", x, p["w_up"].astype(dt))
    h = jnp.einsum("nef,efd->ned", jax.nn.silu(g) * u, p["w_down"].astype(dt))
    y = jnp.sum(h * weight.astype(dt)[..., None], axis=1)
    return y, chosen.astype(jnp.int32), probs


def attention_standard(q, k, v, q_pos, k_pos, k_valid, window=None, scalar=0.0, cap=0.0):
    """Grouped-query causal attention. q: [B,T,H,D]; k,v: [B,S,Hkv,D]; positions [B,T], [B,S].

    Scores are divided by ``sqrt(scalar or D)`` and soft-capped at ``cap`` (0: none); a query
    sees keys within ``window`` of it (None: all earlier ones)."""
    b, t, h, d = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, t, hkv, h // hkv, d)
    s = jnp.einsum("btkgd,bskd->bkgts", qg, k).astype(jnp.float32) / jnp.sqrt(jnp.float32(scalar or d))
    s = softcap(s, cap)
    mask = (k_pos[:, None, :] <= q_pos[:, :, None]) & k_valid[:, None, :]  # [B,T,S]
    mask = mask & local_mask(q_pos, k_pos, window)
    s = jnp.where(mask[:, None, None], s, NEG_INF)
    w = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    o = jnp.einsum("bkgts,bskd->btkgd", w, v)
    return o.reshape(b, t, h, d)


def attention_cache(q, k_cache, v_cache, q_pos, window=None, scalar=0.0, cap=0.0):
    """Grouped-query causal attention against a cache. q: [B,T,H,D]; caches [B,Hkv,S,D] with
    slot == position; each query attends to slots ``<= its position`` (and within ``window``;
    ``scalar``, ``cap``: see :func:`attention_standard`)."""
    b, t, h, d = q.shape
    hkv, s = k_cache.shape[1:3]
    g = h // hkv
    # One batch dimension (B * Hkv) with the (group, query) rows behind it: XLA:CPU ran the
    # two-batch-dimension einsum form 1.4x slower per decode step (tiny model, batch 32).
    qg = q.reshape(b, t, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b * hkv, g * t, d)
    kc, vc = k_cache.reshape(b * hkv, s, d), v_cache.reshape(b * hkv, s, d)
    sc = jax.lax.dot_general(qg, kc, (((2,), (2,)), ((0,), (0,))))
    sc = softcap(sc.reshape(b, hkv, g, t, s).astype(jnp.float32) / jnp.sqrt(jnp.float32(scalar or d)), cap)
    slots = jnp.broadcast_to(jnp.arange(s), (b, s))
    mask = (slots[:, None, :] <= q_pos[:, :, None]) & local_mask(q_pos, slots, window)  # [B,T,S]
    sc = jnp.where(mask[:, None, None], sc, NEG_INF)
    w = jax.nn.softmax(sc, axis=-1).astype(v_cache.dtype).reshape(b * hkv, g * t, s)
    o = jax.lax.dot_general(w, vc, (((2,), (1,)), ((0,), (0,)))).reshape(b, hkv, g, t, d)
    return o.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)


def attention_exact(q_rows, pos_rows, batch_rows, k_buf, v_buf, tile, window=None, scalar=0.0, cap=0.0):
    """Per-query-row attention against a fixed-length key buffer (exact mode).

    q_rows: [N, H, D]; pos_rows, batch_rows: [N]; k_buf, v_buf: [B, Hkv, L, D] with slot == position.
    Each query attends to slots ``<= pos`` of its own batch row; the softmax and weighted sum
    always run over exactly L slots, so the result does not depend on N or on the batch
    (``window``, ``scalar``, ``cap``: see :func:`attention_standard`).
    """
    hkv, l, d = k_buf.shape[1:]

    def one_tile(q, pos, bidx):
        kk = k_buf[bidx]  # [M, Hkv, L, D]
        vv = v_buf[bidx]
        m = q.shape[0]
        qg = q.reshape(m, hkv, -1, d)
        s = jnp.einsum("mkgd,mkld->mkgl", qg, kk).astype(jnp.float32) / jnp.sqrt(jnp.float32(scalar or d))
        s = softcap(s, cap)
        valid = jnp.arange(l)[None, :] <= pos[:, None]  # [M, L]
        if window is not None:
            valid = valid & ((pos[:, None] - jnp.arange(l)[None, :]) < window)
        s = jnp.where(valid[:, None, None, :], s, NEG_INF)
        w = jax.nn.softmax(s, axis=-1).astype(vv.dtype)
        return jnp.einsum("mkgl,mkld->mkgd", w, vv).reshape(m, -1, d)

    return rowwise(one_tile, tile, q_rows, pos_rows, batch_rows)
