"""The policy model: ``init_params``, ``forward``, ``init_cache`` and logical axis names.

This module: ``forward``, the vocabulary head and the MoE statistics, and the public names of the
parts (importable from here): parameters in ``params.py``, the layer trunk and its ``Layout`` in
``trunk.py``, the KV cache and attention in ``attention.py``; the exact kernels are ``kernels.py``.

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
layers (the sampler, which unstacks once per call). ``mesh``: the mesh the caller jits on,
where ``ModelConfig.activation_rows`` names mesh axes to split the hidden rows over (the model
never reads an ambient ``jax.set_mesh``).
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, Mesh

from agentjax.policy import kernels as K
from agentjax.policy import layers as L
from agentjax.policy import pallas_kernels
from agentjax.policy.attention import init_cache, stack_cache, unstack_cache
from agentjax.policy.config import ModelConfig, ValueHead
from agentjax.policy.params import (
    abstract_params,
    axes_of,
    critic_config,
    init_params,
    logical_axes,
    param_spec,
)
from agentjax.policy.trunk import Layout, mm, pin, trunk, unstack_layers

__all__ = [
    "Layout",
    "abstract_params",
    "axes_of",
    "check_token_ids",
    "critic_config",
    "critic_values",
    "forward",
    "head_logits",
    "hidden",
    "init_cache",
    "init_params",
    "logical_axes",
    "param_spec",
    "stack_cache",
    "unstack_cache",
    "unstack_layers",
]


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
    logits = L.rowwise(lambda x_: mm(c, pin(c, x_).astype(c.hdtype), head), c.row_tile, x)
    if c.final_softcap:  # Gemma-2: cap * tanh(logits / cap)
        capped = (
            K.softcap(logits, c.final_softcap, c.invariant)
            if c.invariant
            else L.softcap(logits, c.final_softcap)
        )
        logits = capped.astype(logits.dtype)
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
    layout: Layout = Layout.STACKED,
    mesh: Mesh | AbstractMesh | None = None,
):
    """Logits (head dtype), the updated cache (None without one) and aux metrics.

    ``layout``: :class:`Layout` ``STACKED`` (stacked params and cache, scanned) or ``UNROLLED``
    (``unstack_layers(params)`` and ``unstack_cache(cache)``, a loop over layers); a pytree that
    does not match raises ``ValueError``.
    ``mesh``: needed when ``config.activation_rows`` is set (the hidden rows are split over
    those axes of it at every layer); ignored otherwise.

    Logits are ``[B, T, V]``, or with ``logits_at`` (int ``[B, K]``, columns of ``tokens``)
    ``[B, K, V]`` at those columns only: ``[B, 0]`` computes none (the sampler's prefill),
    ``[B, 1]`` one per row. In exact mode a selected row's logits are bitwise those of the full call.
    """
    c = config
    b, t = tokens.shape
    _check_inputs(c, tokens, positions, routes)
    with kernel_mesh(c, mesh):
        x, new_cache, chosen, probs = trunk(c, params, tokens, positions, cache, routes, layout, mesh)
        logits = _head(c, params, x, b, t, logits_at)
    return logits, new_cache, _aux(c, params, x, chosen, probs, b, t)


def _check_inputs(c: ModelConfig, tokens, positions, routes) -> None:
    if positions.shape != tokens.shape:
        raise ValueError(f"positions {positions.shape} must match tokens {tokens.shape}")
    check_token_ids("forward(tokens)", tokens, c.vocab_size)
    if routes is not None and not c.is_moe:
        raise ValueError("routes were given but the model has no experts (n_experts=0)")


def _aux(c: ModelConfig, params, x, chosen, probs, b, t):
    aux = {}
    if c.is_moe:
        aux.update(_moe_aux(c, chosen, probs, b, t))
    if c.value_head == ValueHead.SHARED:
        aux["values"] = _value(x, params["value_head"]).reshape(b, t)
    return aux


def hidden(params, tokens, positions, *, config: ModelConfig, routes=None, mesh=None):
    """``(x, aux)``: the final-normed rows ``[B, T, D]`` that :func:`forward` (no cache,
    ``Layout.STACKED``) projects onto the vocabulary, and its aux metrics. With
    :func:`head_logits` a caller projects a part of them at a time (the scorer's
    ``ModelConfig.score_chunk``): in exact mode those logits are bitwise the full call's."""
    c = config
    b, t = tokens.shape
    _check_inputs(c, tokens, positions, routes)
    with kernel_mesh(c, mesh):
        x, _, chosen, probs = trunk(c, params, tokens, positions, None, routes, Layout.STACKED, mesh)
    return x.reshape(b, t, -1), _aux(c, params, x, chosen, probs, b, t)


def head_logits(params, x, *, config: ModelConfig, mesh=None):
    """Logits ``[B, K, V]`` (head dtype) of final-normed rows ``x`` ``[B, K, D]`` (from
    :func:`hidden`): the vocabulary head of :func:`forward`, with its kernels."""
    b, k, _ = x.shape
    with kernel_mesh(config, mesh):
        return _head(config, params, x.reshape(b * k, -1), b, k, None)


def kernel_mesh(c: ModelConfig, mesh):
    """The context the Pallas kernels of exact mode partition in: ``mesh`` with the rows split
    like ``c.activation_rows`` (``pallas_kernels.on_mesh``); nothing for other kernels or
    without a mesh (an enclosing ``on_mesh`` stays in force)."""
    if c.invariant != "pallas" or mesh is None:
        return contextlib.nullcontext()
    return pallas_kernels.on_mesh(mesh, c.activation_rows)


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
    with kernel_mesh(cc, mesh):
        x, _, _, _ = trunk(cc, params["critic"], tokens, positions, None, None, Layout.STACKED, mesh)
    return _value(x, params["critic"]["value_head"]).reshape(tokens.shape)
