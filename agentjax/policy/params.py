"""The policy model's parameters: shapes and logical axes (``param_spec``), initialisation, the
abstract shapes AOT compiles against, and the separate critic's config."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

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
    if c.post_norms:
        s["post_attn_norm"] = ((n, d), ("layers", "norm"))
        s["post_mlp_norm"] = ((n, d), ("layers", "norm"))
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
    """The separate critic: the policy's shapes with ``critic_layers`` dense full-attention layers."""
    return c.replace(
        n_layers=c.critic_layers,
        n_experts=0,
        value_head="none",
        tie_embeddings=True,
        sliding_window=0,
        sliding_layers=(),
    )


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
        post_norms="post_attn_norm" in lay,
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


def onto_mesh_of(tree, params):
    """``tree`` with its leaves that are on no mesh (uncommitted: an optimiser's step count, a
    sampler's fresh state) replicated over the mesh of ``params``; leaves on a mesh, or any tree
    when ``params`` is on none, as they are.

    A jitted step returns its outputs on that mesh: inputs placed there first make its first call
    and the ones after it one compiled program (an uncommitted input compiles it a second time)."""
    mesh = next(
        (x.sharding.mesh for x in jax.tree.leaves(params) if isinstance(x.sharding, NamedSharding)), None
    )
    if mesh is None:
        return tree
    rep = NamedSharding(mesh, PartitionSpec())

    def one(x):
        if isinstance(x.sharding, NamedSharding):
            return x
        if rep.is_fully_addressable:
            return jax.device_put(x, rep)
        host = np.asarray(x)  # a mesh over several processes: each fills its own devices
        return jax.make_array_from_callback(host.shape, rep, lambda idx: host[idx])

    return jax.tree.map(one, tree)
