"""The layer trunk of the policy model: embeddings, the row-wise transformer block (pre-norm
attention and feed-forward, dense or MoE), the caller's layer :class:`Layout`, and the hidden rows'
sharding on the caller's mesh (``ModelConfig.activation_rows``)."""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from agentjax.policy import kernels as K
from agentjax.policy import layers as L
from agentjax.policy import rope as R
from agentjax.policy.attention import attend, unstack_cache
from agentjax.policy.config import ModelConfig


def mm(c: ModelConfig, x, w):
    """``x @ w`` in x's dtype: the batch-invariant kernel in exact mode, else XLA's dot."""
    return K.matmul(x, w, c.invariant) if c.invariant else x @ w.astype(x.dtype)


def pin(c: ModelConfig, x):
    """An activation in the compute dtype; in exact mode rounded so XLA cannot keep excess
    precision in one engine and not the other (``kernels.cast``)."""
    return K.cast(x, c.cdtype) if c.invariant else x


def norm(c: ModelConfig, x, scale):
    """RMSNorm with scale ``norm_offset + w`` (Gemma's ``1 + w``, in float32)."""
    if c.norm_offset:
        scale = scale.astype(jnp.float32) + jnp.float32(c.norm_offset)
    if c.invariant:
        return K.rms_norm(x, scale, c.norm_eps, c.invariant)
    return L.rms_norm(x, scale, c.norm_eps)


def rope(c: ModelConfig, x, pos, which):
    """RoPE of the layer: ``which`` picks global (0) or local (1) frequencies (``policy/rope.py``)."""
    theta, which = (c.rope_theta, None) if R.is_plain(c) else (R.rotaries(c), which)
    if c.invariant:
        return K.rope(x, pos, theta, c.max_seq_len, which, c.invariant)
    return L.rope(x, pos, theta, which)


def layer_kind(c: ModelConfig, i):
    """Layer ``i``'s (sliding window or None, RoPE index); ``i`` may be traced (a scan)."""
    sliding = c.is_sliding
    if not any(sliding):
        return None, 0
    if all(sliding):
        return c.sliding_window, 1
    local = jnp.asarray(np.array(sliding, np.int32))[i]
    return jnp.where(local > 0, c.sliding_window, c.max_seq_len + 2), local


def qkv(c: ModelConfig, p, x, pos, which=0):
    """Row-wise: pre-norm, q/k/v projections, optional bias and q/k norm, RoPE."""
    dt = x.dtype
    a = norm(c, x, p["attn_norm"])
    if c.invariant:  # one grid of ``a`` for the three (each column's grid is its own: same bits)
        fused = K.matmul(a, jnp.concatenate([p["wq"], p["wk"], p["wv"]], axis=1), c.invariant)
        hq, hk = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        q, k, v = fused[:, :hq], fused[:, hq : hq + hk], fused[:, hq + hk :]
    else:
        q, k, v = (mm(c, a, p[w]) for w in ("wq", "wk", "wv"))
    if c.qkv_bias:
        q, k, v = (pin(c, y + p[bn].astype(dt)) for y, bn in ((q, "bq"), (k, "bk"), (v, "bv")))
    n = x.shape[0]
    q = q.reshape(n, c.n_heads, c.head_dim)
    k = k.reshape(n, c.n_kv_heads, c.head_dim)
    v = v.reshape(n, c.n_kv_heads, c.head_dim)
    if c.qk_norm:
        q, k = norm(c, q, p["q_norm"]), norm(c, k, p["k_norm"])
    return rope(c, q, pos, which), rope(c, k, pos, which), v


def post_attention(c: ModelConfig, p, x, o, forced):
    """Row-wise: output projection, [post-norm,] residual, pre-norm feed-forward (dense or MoE),
    [post-norm,] residual."""
    a = mm(c, o.reshape(x.shape[0], -1), p["wo"])
    if c.post_norms:
        a = norm(c, pin(c, a), p["post_attn_norm"])
    x = pin(c, x + a)
    m = norm(c, x, p["mlp_norm"])
    chosen = probs = None
    if c.invariant and not c.is_moe:
        gu = K.matmul(m, jnp.concatenate([p["w_gate"], p["w_up"]], axis=1), c.invariant)
        h = pin(c, K.gated(gu[:, : c.d_ff], gu[:, c.d_ff :], c.invariant, c.mlp_act))
        y = K.matmul(h, p["w_down"], c.invariant)
    elif not c.is_moe:
        y = L.swiglu(m, p["w_gate"], p["w_up"], p["w_down"], c.mlp_act)
    elif c.invariant:
        y, chosen, probs = K.moe(m, p, c.n_experts_per_token, forced, kind=c.invariant)
    else:
        y, chosen, probs = L.moe(m, p, c.n_experts_per_token, forced)
    if c.post_norms:
        y = norm(c, pin(c, y), p["post_mlp_norm"])
    return pin(c, x + y), chosen, probs


def _rows_sharding(c: ModelConfig, mesh: Mesh | AbstractMesh | None):
    """The sharding of the hidden rows ``[N, D]``: split over ``c.activation_rows`` of ``mesh``
    (None: no constraint).

    Without it, XLA's sharding propagation under FSDP follows the ``embed``-sharded weights and
    every chip computes every row of the batch (see docs/pod_readiness.md).
    """
    if not c.activation_rows:
        return None
    spec = PartitionSpec(c.activation_rows, None)
    if mesh is None:
        raise ValueError(
            f"ModelConfig.activation_rows={c.activation_rows} splits the hidden rows over mesh "
            "axes, but no mesh was given: pass forward(..., mesh=<the mesh the call is jitted "
            "on>) (make_train_step(..., mesh=...) for the learner); the model does not read "
            "an ambient jax.set_mesh"
        )
    missing = [a for a in c.activation_rows if a not in mesh.axis_names]
    if missing:
        raise ValueError(
            f"ModelConfig.activation_rows={c.activation_rows}: the mesh has no axes {missing} "
            f"(its axes: {tuple(mesh.axis_names)})"
        )
    return NamedSharding(mesh, spec)


def _constrain_rows(rows, x):
    """``x`` constrained to the row sharding ``rows`` (None: unchanged)."""
    return x if rows is None else jax.lax.with_sharding_constraint(x, rows)


def unstack_layers(params):
    """``params`` with ``layers`` as a tuple of per-layer trees (``forward`` then unrolls them).

    The decode loop calls this once per call: each step then reads every layer's weights where
    they lie, where the scanned layers copied each layer's weights out of the stacked arrays at
    every step (measured: 66 MB per step for d_model 512, 4 layers).
    """
    if isinstance(params["layers"], tuple):
        return params
    n = jax.tree.leaves(params["layers"])[0].shape[0]
    return {**params, "layers": tuple(jax.tree.map(lambda a, i=i: a[i], params["layers"]) for i in range(n))}


class Layout(enum.Enum):
    """How ``forward`` runs the layers; the caller decides (the pytrees must match)."""

    STACKED = "stacked"  # layers stacked on a leading axis (and cache [layers, ...]): a lax.scan,
    #                      unrolled by ModelConfig.layer_unroll (the learner, the scorer)
    UNROLLED = "unrolled"  # a tuple of per-layer trees (unstack_layers) and per-layer K/V buffers
    #                        (unstack_cache): a Python loop over layers (the sampler)


def _check_layout(layout: Layout, tp, cache) -> None:
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a policy.model.Layout, got {layout!r}")
    unrolled = layout is Layout.UNROLLED
    if isinstance(tp["layers"], tuple) != unrolled:
        raise ValueError(
            f"layout={layout.name} but params['layers'] is "
            + ("a tuple of per-layer trees: pass layout=Layout.UNROLLED" if not unrolled
               else "stacked: pass layout=Layout.STACKED, or unstack_layers(params) first")
        )  # fmt: skip
    if cache is not None and isinstance(cache["k"], tuple) != unrolled:
        raise ValueError(
            f"layout={layout.name} but the cache is "
            + ("per layer (tuples): pass layout=Layout.UNROLLED or stack_cache(cache)" if not unrolled
               else "stacked: pass unstack_cache(cache) (and stack_cache the result)")
        )  # fmt: skip


def trunk(c: ModelConfig, tp, tokens, positions, cache, routes, layout: Layout, mesh=None):
    """Embeddings and the layers; returns final-normed rows [N, D], the cache and MoE stats.

    ``layout`` (checked against ``tp`` and ``cache``): STACKED runs the stacked layers as a
    ``lax.scan``; UNROLLED runs a tuple of per-layer trees (see :func:`unstack_layers`) with
    per-layer buffers.
    """
    _check_layout(layout, tp, cache)
    unrolled = layout is Layout.UNROLLED
    b, t = tokens.shape
    n, tile = b * t, c.row_tile
    rows = _rows_sharding(c, mesh)
    pos_rows = positions.reshape(n).astype(jnp.int32)
    batch_rows = jnp.repeat(jnp.arange(b, dtype=jnp.int32), t)
    x = tp["embed"][tokens.reshape(n)].astype(c.cdtype)
    if c.embed_scale:  # Gemma: x sqrt(d_model), the factor rounded to the activations' dtype
        root = np.sqrt(c.d_model)
        x = K.scale(x, root, c.invariant) if c.invariant else x * jnp.asarray(root, c.cdtype)
    x = pin(c, x)
    forced_all = None if routes is None else routes.reshape(n, c.n_layers, -1).swapaxes(0, 1)
    # The tiled exact kernels without a cache still attend over a fresh buffer of exactly
    # max_seq_len slots (plus the write sink, see init_cache).
    fresh = cache is None and bool(c.row_tile)
    if fresh:
        shape = (c.n_layers, b, c.n_kv_heads, c.max_seq_len + 1, c.head_dim)
        cache = {"k": jnp.zeros(shape, c.cdtype), "v": jnp.zeros(shape, c.cdtype)}
        cache = unstack_cache(cache) if unrolled else cache

    def block(x, p, forced, kbuf, vbuf, i):
        x = _constrain_rows(rows, x)
        window, which = layer_kind(c, i)
        q, k, v = L.rowwise(lambda x_, pos_: qkv(c, p, x_, pos_, which), tile, x, pos_rows)
        o, kbuf, vbuf = attend(c, q, k, v, kbuf, vbuf, positions, pos_rows, batch_rows, window)
        post = lambda x_, o_, f_: post_attention(c, p, x_, o_, f_)
        if forced is None:
            x, chosen, probs = L.rowwise(lambda x_, o_: post(x_, o_, None), tile, x, o)
        else:
            x, chosen, probs = L.rowwise(post, tile, x, o, forced)
        return x, kbuf, vbuf, chosen, probs

    run = _unrolled_layers if unrolled else _scanned_layers
    x, cache, chosen, probs = run(c, block, x, tp["layers"], cache, forced_all)
    x = L.rowwise(lambda x_: norm(c, x_, tp["final_norm"]), tile, x)
    return x, None if fresh else cache, chosen, probs


def _unrolled_layers(c: ModelConfig, block, x, layers, cache, forced_all):
    """Per-layer weights and per-layer K/V buffers, in a Python loop."""
    ks, vs, chosen, probs = [], [], [], []
    for i, p in enumerate(layers):
        kb, vb = (None, None) if cache is None else (cache["k"][i], cache["v"][i])
        forced = None if forced_all is None else forced_all[i]
        x, kb, vb, ch, pr = block(x, p, forced, kb, vb, i)
        ks, vs, chosen, probs = ks + [kb], vs + [vb], chosen + [ch], probs + [pr]
    cache = None if cache is None else {"k": tuple(ks), "v": tuple(vs)}
    chosen = None if chosen[0] is None else jnp.stack(chosen)
    probs = None if probs[0] is None else jnp.stack(probs)
    return x, cache, chosen, probs


def _scanned_layers(c: ModelConfig, block, x, layers, cache, forced_all):
    """Stacked weights in a ``lax.scan``. The K/V buffers ride in the scan carry and are updated
    in place (as scan inputs and outputs XLA copied the whole cache every decode step)."""

    def layer(carry, xs):
        x, ck, cv = carry
        p, i, forced = xs
        kb, vb = (None, None) if ck is None else (ck[i], cv[i])
        x, kb, vb, ch, pr = block(x, p, forced, kb, vb, i)
        if ck is not None:
            ck = jax.lax.dynamic_update_index_in_dim(ck, kb, i, 0)
            cv = jax.lax.dynamic_update_index_in_dim(cv, vb, i, 0)
        return (x, ck, cv), (ch, pr)

    if c.remat == "layer":  # keep only each layer's inputs for the backward pass
        layer = jax.checkpoint(layer, prevent_cse=False)
    ids = jnp.arange(c.n_layers, dtype=jnp.int32)
    ck, cv = (None, None) if cache is None else (cache["k"], cache["v"])
    (x, ck, cv), (chosen, probs) = jax.lax.scan(
        layer, (x, ck, cv), (layers, ids, forced_all), unroll=min(c.layer_unroll, c.n_layers)
    )
    return x, None if ck is None else {"k": ck, "v": cv}, chosen, probs
