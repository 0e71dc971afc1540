"""The policy model: ``init_params``, ``forward``, ``init_cache`` and logical axis names.

(One module, over 300 lines: init, the layer trunk, attention, MoE routing and the head share one
config and one calling convention for the exact kernels; the kernels are ``kernels.py``.)

    logits, cache, aux = forward(params, tokens, positions, *, config, cache=None, routes=None,
                                 logits_at=None, layout=Layout.STACKED, mesh=None)

"Mode" is only whether ``cache`` is None. With a cache, keys and values are written at slot ==
position and each query attends to slots ``<= its position`` (prefill and decode are the same
call). ``routes`` ([B, T, layers, k]) forces MoE expert choices (Rollout Routing Replay);
``aux["routes"]`` reports the choices made. ``logits_at`` ([B, K] columns) limits the vocabulary
projection to the rows a caller samples from (the sampler's prefill asks for none). Parameters
are a plain pytree (dict of arrays) with layers stacked on a leading axis. The caller says how
the layers run (``layout``, checked against the pytrees): ``Layout.STACKED`` scans them
(``ModelConfig.layer_unroll`` unrolls the scan; the learner); ``Layout.UNROLLED`` takes
:func:`unstack_layers` (a tuple of per-layer trees) and :func:`unstack_cache` and loops over the
layers (the sampler, which unstacks once per call). ``mesh``: the
mesh the caller jits on, where ``ModelConfig.activation_rows`` names mesh axes to split the
hidden rows over (the model never reads an ambient ``jax.set_mesh``).
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from agentjax.policy import kernels as K
from agentjax.policy import layers as L
from agentjax.policy.config import ModelConfig, ValueHead


def _layer_shapes(c: ModelConfig) -> dict[str, tuple[tuple[int, ...], tuple[str | None, ...]]]:
    n, d, h, kv, hd = c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim
    s = {
        "attn_norm": ((n, d), ("layers", "norm")),
        "wq": ((n, d, h * hd), ("layers", "embed", "heads")),
        "wk": ((n, d, kv * hd), ("layers", "embed", "kv_heads")),
        "wv": ((n, d, kv * hd), ("layers", "embed", "kv_heads")),
        "wo": ((n, h * hd, d), ("layers", "heads", "embed")),
        "mlp_norm": ((n, d), ("layers", "norm")),
    }
    if c.qkv_bias:
        s["bq"] = ((n, h * hd), ("layers", "heads"))
        s["bk"] = ((n, kv * hd), ("layers", "kv_heads"))
        s["bv"] = ((n, kv * hd), ("layers", "kv_heads"))
    if c.qk_norm:
        s["q_norm"] = ((n, hd), ("layers", "head_dim"))
        s["k_norm"] = ((n, hd), ("layers", "head_dim"))
    if c.is_moe:
        e, f = c.n_experts, c.d_ff
        s["router"] = ((n, d, e), ("layers", "embed", None))
        s["w_gate"] = ((n, e, d, f), ("layers", "experts", "embed", "mlp"))
        s["w_up"] = ((n, e, d, f), ("layers", "experts", "embed", "mlp"))
        s["w_down"] = ((n, e, f, d), ("layers", "experts", "mlp", "embed"))
    else:
        s["w_gate"] = ((n, d, c.d_ff), ("layers", "embed", "mlp"))
        s["w_up"] = ((n, d, c.d_ff), ("layers", "embed", "mlp"))
        s["w_down"] = ((n, c.d_ff, d), ("layers", "mlp", "embed"))
    return s


def _trunk_shapes(c: ModelConfig, with_lm_head: bool):
    s = {
        "embed": ((c.vocab_size, c.d_model), ("vocab", "embed")),
        "layers": _layer_shapes(c),
        "final_norm": ((c.d_model,), ("norm",)),
    }
    if with_lm_head and not c.tie_embeddings:
        s["lm_head"] = ((c.d_model, c.vocab_size), ("embed", "vocab"))
    return s


def critic_config(c: ModelConfig) -> ModelConfig:
    """The separate critic: the policy's shapes with ``critic_layers`` dense layers."""
    return c.replace(n_layers=c.critic_layers, n_experts=0, value_head="none", tie_embeddings=True)


def param_spec(c: ModelConfig):
    """Nested dict of ``(shape, logical_axes)`` leaves describing every parameter."""
    s = _trunk_shapes(c, with_lm_head=True)
    value = {"w": ((c.d_model,), ("embed",)), "b": ((), ())}
    if c.value_head == ValueHead.SHARED:
        s["value_head"] = value
    elif c.value_head == ValueHead.SEPARATE:
        s["critic"] = dict(_trunk_shapes(critic_config(c), with_lm_head=False), value_head=value)
    return s


def _is_leaf(x):
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


def logical_axes(c: ModelConfig):
    """Pytree (same structure as params) of logical axis-name tuples."""
    return jax.tree.map(lambda leaf: leaf[1], param_spec(c), is_leaf=_is_leaf)


def axes_of(params):
    """Logical axes for a params pytree, read from its structure (no config needed)."""
    lay = params["layers"]
    flags = ModelConfig(
        tie_embeddings="lm_head" not in params,
        qkv_bias="bq" in lay,
        qk_norm="q_norm" in lay,
        n_experts=2 if "router" in lay else 0,
        value_head="shared" if "value_head" in params else "separate" if "critic" in params else "none",
    )
    return logical_axes(flags)


def abstract_params(c: ModelConfig):
    """``jax.ShapeDtypeStruct`` pytree of the parameters (no memory; for AOT compilation)."""
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf[0], c.pdtype), param_spec(c), is_leaf=_is_leaf)


def init_params(config: ModelConfig, rng: jax.Array):
    """Random initial parameters: norms at 1, biases at 0, matrices ~ N(0, init_scale^2)."""
    spec = param_spec(config)
    flat, treedef = jax.tree.flatten_with_path(spec, is_leaf=_is_leaf)
    keys = jax.random.split(rng, len(flat))
    out = []
    for (path, (shape, _)), key in zip(flat, keys, strict=True):
        name = path[-1].key
        if "norm" in name:
            out.append(jnp.ones(shape, config.pdtype))
        elif name in ("b", "bq", "bk", "bv"):
            out.append(jnp.zeros(shape, config.pdtype))
        else:
            out.append((config.init_scale * jax.random.normal(key, shape)).astype(config.pdtype))
    return jax.tree.unflatten(treedef, out)


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


def _mm(c: ModelConfig, x, w):
    """``x @ w`` in x's dtype: the exact-sum kernel in exact mode, else XLA's dot."""
    return K.matmul(x, w) if c.exact_sum else x @ w.astype(x.dtype)


def _pin(c: ModelConfig, x):
    """An activation in the compute dtype; in exact mode rounded so XLA cannot keep excess
    precision in one engine and not the other (``kernels.cast``)."""
    return K.cast(x, c.cdtype) if c.exact_sum else x


def _norm(c: ModelConfig, x, scale):
    return (K.rms_norm if c.exact_sum else L.rms_norm)(x, scale, c.norm_eps)


def _rope(c: ModelConfig, x, pos):
    if c.exact_sum:
        return K.rope(x, pos, c.rope_theta, c.max_seq_len)
    return L.rope(x, pos, c.rope_theta)


def _qkv(c: ModelConfig, p, x, pos):
    """Row-wise: pre-norm, q/k/v projections, optional bias and q/k norm, RoPE."""
    dt = x.dtype
    a = _norm(c, x, p["attn_norm"])
    if c.exact_sum:  # one grid of ``a`` for the three (each column's grid is its own: same bits)
        qkv = K.matmul(a, jnp.concatenate([p["wq"], p["wk"], p["wv"]], axis=1))
        hq, hk = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        q, k, v = qkv[:, :hq], qkv[:, hq : hq + hk], qkv[:, hq + hk :]
    else:
        q, k, v = (_mm(c, a, p[w]) for w in ("wq", "wk", "wv"))
    if c.qkv_bias:
        q, k, v = (_pin(c, y + p[bn].astype(dt)) for y, bn in ((q, "bq"), (k, "bk"), (v, "bv")))
    n = x.shape[0]
    q = q.reshape(n, c.n_heads, c.head_dim)
    k = k.reshape(n, c.n_kv_heads, c.head_dim)
    v = v.reshape(n, c.n_kv_heads, c.head_dim)
    if c.qk_norm:
        q, k = _norm(c, q, p["q_norm"]), _norm(c, k, p["k_norm"])
    return _rope(c, q, pos), _rope(c, k, pos), v


def _post_attention(c: ModelConfig, p, x, o, forced):
    """Row-wise: output projection, residual, pre-norm feed-forward (dense or MoE), residual."""
    x = _pin(c, x + _mm(c, o.reshape(x.shape[0], -1), p["wo"]))
    m = _norm(c, x, p["mlp_norm"])
    if c.exact_sum and not c.is_moe:
        gu = K.matmul(m, jnp.concatenate([p["w_gate"], p["w_up"]], axis=1))
        h = _pin(c, jax.nn.silu(gu[:, : c.d_ff]) * gu[:, c.d_ff :])
        return _pin(c, x + K.matmul(h, p["w_down"])), None, None
    if not c.is_moe:
        return x + L.swiglu(m, p["w_gate"], p["w_up"], p["w_down"]), None, None
    moe = K.moe if c.exact_sum else L.moe
    y, chosen, probs = moe(m, p, c.n_experts_per_token, forced)
    return _pin(c, x + y), chosen, probs


def _rows_sharding(c: ModelConfig, mesh: Mesh | AbstractMesh | None, legacy: bool):
    """The sharding of the hidden rows ``[N, D]``: split over ``c.activation_rows`` of ``mesh``
    (None: no constraint).

    Without it, XLA's sharding propagation under FSDP follows the ``embed``-sharded weights and
    every chip computes every row of the batch (see docs/pod_readiness.md).
    """
    if not c.activation_rows:
        return None
    spec = PartitionSpec(c.activation_rows, None)
    if mesh is None:
        if legacy:  # TRANSITIONAL: the sampler's call (sampling/sampler.py) passes no mesh yet
            return spec  # resolved on the ambient mesh, as before
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


def unstack_cache(cache):
    """Per-layer K/V buffers (tuples) for the unrolled layers; :func:`stack_cache` undoes it."""
    if cache is None or isinstance(cache["k"], tuple):
        return cache
    return {kv: tuple(cache[kv][i] for i in range(cache[kv].shape[0])) for kv in ("k", "v")}


def stack_cache(cache):
    if cache is None or not isinstance(cache["k"], tuple):
        return cache
    return {kv: jnp.stack(cache[kv]) for kv in ("k", "v")}


def _attend(c: ModelConfig, q, k, v, kbuf, vbuf, positions, pos_rows, batch_rows):
    """One layer's attention for rows [N, H, D]; with buffers [B, Hkv, S, D], writes k/v first.

    Positions outside ``0 .. S - 2`` write to the sink slot ``S - 1`` (see :func:`init_cache`).
    """
    b, t = positions.shape
    if kbuf is None and c.exact_sum:  # teacher-forced: the sequence's own keys
        kv = lambda a: a.reshape(b, t, *a.shape[1:]).swapaxes(1, 2)
        o = K.attention(
            q.reshape(b, t, *q.shape[1:]),
            kv(k),
            kv(v),
            positions,
            positions,
            jnp.ones((b, t), bool),
            n_max=c.max_seq_len + 1,
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
        )
        return o.reshape(q.shape), None, None
    sink = kbuf.shape[2] - 1
    slot = jnp.where((pos_rows >= 0) & (pos_rows < sink), pos_rows, sink)
    put = lambda buf, x: buf.at[batch_rows, :, slot].set(x.astype(buf.dtype), mode="promise_in_bounds")
    kbuf, vbuf = put(kbuf, k), put(vbuf, v)
    if c.exact_sum:
        s = kbuf.shape[2]
        slots = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
        o = K.attention(
            q.reshape(b, t, *q.shape[1:]), kbuf, vbuf, positions, slots, slots < sink, n_max=c.max_seq_len + 1
        )
        return o.reshape(q.shape), kbuf, vbuf
    if c.exact:
        return L.attention_exact(q, pos_rows, batch_rows, kbuf, vbuf, c.exact_tile), kbuf, vbuf
    o = L.attention_cache(q.reshape(b, t, *q.shape[1:]), kbuf, vbuf, positions)
    return o.reshape(q.shape), kbuf, vbuf


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


def _trunk(c: ModelConfig, tp, tokens, positions, cache, routes, layout: Layout, mesh=None, legacy=False):
    """Embeddings and the layers; returns final-normed rows [N, D], the cache and MoE stats.

    ``layout`` (checked against ``tp`` and ``cache``): STACKED runs the stacked layers as a
    ``lax.scan``; UNROLLED runs a tuple of per-layer trees (see :func:`unstack_layers`) with
    per-layer buffers. ``legacy``: the transitional call of ``forward`` without a layout.
    """
    _check_layout(layout, tp, cache)
    unrolled = layout is Layout.UNROLLED
    b, t = tokens.shape
    n, tile = b * t, c.row_tile
    rows = _rows_sharding(c, mesh, legacy=legacy and unrolled)
    pos_rows = positions.reshape(n).astype(jnp.int32)
    batch_rows = jnp.repeat(jnp.arange(b, dtype=jnp.int32), t)
    x = _pin(c, tp["embed"][tokens.reshape(n)].astype(c.cdtype))
    forced_all = None if routes is None else routes.reshape(n, c.n_layers, -1).swapaxes(0, 1)
    # The tiled exact kernels without a cache still attend over a fresh buffer of exactly
    # max_seq_len slots (plus the write sink, see init_cache).
    fresh = cache is None and bool(c.row_tile)
    if fresh:
        shape = (c.n_layers, b, c.n_kv_heads, c.max_seq_len + 1, c.head_dim)
        cache = {"k": jnp.zeros(shape, c.cdtype), "v": jnp.zeros(shape, c.cdtype)}
        cache = unstack_cache(cache) if unrolled else cache

    def block(x, p, forced, kbuf, vbuf):
        x = _constrain_rows(rows, x)
        q, k, v = L.rowwise(lambda x_, pos_: _qkv(c, p, x_, pos_), tile, x, pos_rows)
        o, kbuf, vbuf = _attend(c, q, k, v, kbuf, vbuf, positions, pos_rows, batch_rows)
        post = lambda x_, o_, f_: _post_attention(c, p, x_, o_, f_)
        if forced is None:
            x, chosen, probs = L.rowwise(lambda x_, o_: post(x_, o_, None), tile, x, o)
        else:
            x, chosen, probs = L.rowwise(post, tile, x, o, forced)
        return x, kbuf, vbuf, chosen, probs

    run = _unrolled_layers if unrolled else _scanned_layers
    x, cache, chosen, probs = run(c, block, x, tp["layers"], cache, forced_all)
    x = L.rowwise(lambda x_: _norm(c, x_, tp["final_norm"]), tile, x)
    return x, None if fresh else cache, chosen, probs


def _unrolled_layers(c: ModelConfig, block, x, layers, cache, forced_all):
    """Per-layer weights and per-layer K/V buffers, in a Python loop."""
    ks, vs, chosen, probs = [], [], [], []
    for i, p in enumerate(layers):
        kb, vb = (None, None) if cache is None else (cache["k"][i], cache["v"][i])
        forced = None if forced_all is None else forced_all[i]
        x, kb, vb, ch, pr = block(x, p, forced, kb, vb)
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
        x, kb, vb, ch, pr = block(x, p, forced, kb, vb)
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


def _moe_aux(c: ModelConfig, chosen, probs, b, t):
    """Routes [B, T, layers, k], per-layer expert load and the Switch load-balancing loss."""
    onehot = jax.nn.one_hot(chosen, c.n_experts, dtype=jnp.float32)  # [layers, N, k, E]
    load = jnp.mean(jnp.sum(onehot, axis=2), axis=1) / c.n_experts_per_token  # [layers, E]
    importance = jnp.mean(probs, axis=1)  # [layers, E]
    return {
        "routes": chosen.swapaxes(0, 1).reshape(b, t, c.n_layers, c.n_experts_per_token),
        "router_load": load,
        "router_lb_loss": c.n_experts * jnp.mean(jnp.sum(load * importance, axis=-1)),
    }


def _value(x, vp):
    return x.astype(jnp.float32) @ vp["w"].astype(jnp.float32) + vp["b"].astype(jnp.float32)


def check_token_ids(name: str, tokens, vocab_size: int, lengths=None) -> None:
    """Raises ``ValueError`` naming ``name`` if a token id is outside ``[0, vocab_size)``.

    Checked at the public boundary (eager calls, the sampler's prompt/observation input): the
    embedding lookup would otherwise clamp an out-of-range id silently (the last row's embedding).
    Traced values (inside ``jit``) pass: their callers checked them where they were concrete.
    ``lengths`` [B]: only ``tokens[i, :lengths[i]]`` is checked (the rest is padding).
    """
    if any(
        isinstance(x, jax.core.Tracer) or (isinstance(x, jax.Array) and not x.is_fully_addressable)
        for x in (tokens, lengths)
    ):
        return  # traced, or another process's shards: checked where they were concrete
    t = np.asarray(tokens)
    if lengths is not None:
        n = np.broadcast_to(np.asarray(lengths), t.shape[:1])
        t = t[np.arange(t.shape[-1])[None, :] < n[:, None]]
    bad = t[(t < 0) | (t >= vocab_size)]
    if bad.size:
        raise ValueError(
            f"{name}: token id {int(bad.flat[0])} is outside the vocabulary "
            f"[0, {vocab_size}) ({bad.size} such ids)"
        )


def _head(c: ModelConfig, params, x, b, t, logits_at):
    """Logits of the rows ``x`` [B * T, D]: all ``[B, T, V]``, or ``[B, K, V]`` at ``logits_at``.

    Only the selected rows reach the vocabulary matmul, so a prefill that asks for the last
    position (or none) never holds a [B, T, V] buffer (Qwen3-8B, 256 x 1024 prompts: 148 GiB).
    """
    head = params["embed"].T if c.tie_embeddings else params["lm_head"]
    if logits_at is not None:
        if logits_at.ndim != 2 or logits_at.shape[0] != b:
            raise ValueError(f"logits_at {logits_at.shape} must be [batch={b}, K] column indices")
        k = logits_at.shape[1]
        if k == 0:
            return jnp.zeros((b, 0, head.shape[-1]), c.hdtype)
        rows = jnp.arange(b, dtype=jnp.int32)[:, None] * t + jnp.clip(logits_at, 0, t - 1)
        x, t = x[rows.reshape(-1)], k
    logits = L.rowwise(lambda x_: _mm(c, _pin(c, x_).astype(c.hdtype), head), c.row_tile, x)
    return logits.reshape(b, t, -1)


def forward(
    params,
    tokens,
    positions,
    *,
    config: ModelConfig,
    cache=None,
    routes=None,
    logits_at=None,
    layout: Layout | None = None,
    mesh: Mesh | AbstractMesh | None = None,
):
    """Logits (head dtype), the updated cache (None without one) and aux metrics.

    ``layout``: :class:`Layout` ``STACKED`` (stacked params and cache, scanned) or ``UNROLLED``
    (``unstack_layers(params)`` and ``unstack_cache(cache)``, a loop over layers); a pytree that
    does not match raises ``ValueError``. None is TRANSITIONAL, for ``sampling/sampler.py``'s
    calls until they pass it: inferred from ``params["layers"]`` (a stacked cache with unrolled
    layers is unstacked and restacked around the call).
    ``mesh``: needed when ``config.activation_rows`` is set (the hidden rows are split over
    those axes of it at every layer); ignored otherwise.

    Logits are ``[B, T, V]``, or with ``logits_at`` (int ``[B, K]``, columns of ``tokens``)
    ``[B, K, V]`` at those columns only: ``[B, 0]`` computes none (the sampler's prefill),
    ``[B, 1]`` one per row. In exact mode a selected row's logits are bitwise those of the full call.
    """
    c = config
    b, t = tokens.shape
    if positions.shape != tokens.shape:
        raise ValueError(f"positions {positions.shape} must match tokens {tokens.shape}")
    check_token_ids("forward(tokens)", tokens, c.vocab_size)
    if routes is not None and not c.is_moe:
        raise ValueError("routes were given but the model has no experts (n_experts=0)")
    legacy, restack = layout is None, False
    if legacy:  # TRANSITIONAL (see above): remove once every caller passes a layout
        layout = Layout.UNROLLED if isinstance(params["layers"], tuple) else Layout.STACKED
        restack = layout is Layout.UNROLLED and cache is not None and not isinstance(cache["k"], tuple)
        cache = unstack_cache(cache) if restack else cache
    x, new_cache, chosen, probs = _trunk(c, params, tokens, positions, cache, routes, layout, mesh, legacy)
    new_cache = stack_cache(new_cache) if restack else new_cache
    logits = _head(c, params, x, b, t, logits_at)
    aux = {}
    if c.is_moe:
        aux.update(_moe_aux(c, chosen, probs, b, t))
    if c.value_head == ValueHead.SHARED:
        aux["values"] = _value(x, params["value_head"]).reshape(b, t)
    return logits, new_cache, aux


def critic_values(params, tokens, positions, *, config: ModelConfig, mesh=None):
    """Values [B, T] from the separate critic (value_head="separate") or the shared head;
    ``mesh`` as for :func:`forward`."""
    if config.value_head == ValueHead.SHARED:
        return forward(params, tokens, positions, config=config, layout=Layout.STACKED, mesh=mesh)[2][
            "values"
        ]
    if config.value_head != ValueHead.SEPARATE:
        raise ValueError("critic_values needs value_head 'shared' or 'separate'; got 'none'")
    cc = critic_config(config)
    x, _, _, _ = _trunk(cc, params["critic"], tokens, positions, None, None, Layout.STACKED, mesh)
    return _value(x, params["critic"]["value_head"]).reshape(tokens.shape)
