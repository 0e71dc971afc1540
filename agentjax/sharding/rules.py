"""Sharding as data: logical axis names -> mesh axes, applied at the jit boundary.

Every parameter carries logical axis names (``agentjax.policy.logical_axes``); key activations
have theirs in :data:`ACTIVATION_AXES`. One :class:`ShardingRules` maps logical names to mesh
axes; FSDP vs tensor parallelism is then a change of rules, not of model code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentjax.policy.model import axes_of

MeshAxes = str | tuple[str, ...] | None

DEFAULT_RULES: dict[str, MeshAxes] = {
    # parameters
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "experts": "expert",
    "layers": None,
    "norm": None,
    "head_dim": None,
    # activations
    "batch": ("data", "fsdp"),
    "seq": None,
    "cache_seq": None,
    "act_embed": None,
    "act_vocab": "tensor",
}

ACTIVATION_AXES: dict[str, tuple[str | None, ...]] = {
    "tokens": ("batch", "seq"),
    "logits": ("batch", "seq", "act_vocab"),
    "logps": ("batch", "seq"),
    "cache": ("layers", "batch", "kv_heads", "cache_seq", "head_dim"),
    "hidden": ("batch", "seq", "act_embed"),
}


class ShardingError(ValueError):
    """A rule that cannot be applied; the message names the parameter and the mesh axis."""


@dataclasses.dataclass(frozen=True)
class ShardingRules:
    """Logical axis name -> mesh axis (a name, a tuple of names, or None for replicated)."""

    mapping: Mapping[str, MeshAxes] = dataclasses.field(default_factory=lambda: dict(DEFAULT_RULES))

    def replace(self, **updates: MeshAxes) -> ShardingRules:
        return ShardingRules({**self.mapping, **updates})

    def spec(self, names: tuple[str | None, ...], *, mesh: Mesh, shape=None, what="array"):
        """PartitionSpec for logical ``names``; validated against ``mesh`` (and ``shape``)."""
        out, used = [], set()
        for i, name in enumerate(names):
            if name is None:
                out.append(None)
                continue
            if name not in self.mapping:
                raise ShardingError(
                    f"{what}: logical axis {name!r} has no rule; known: {sorted(self.mapping)}"
                )
            axes = self.mapping[name]
            group = (axes,) if isinstance(axes, str) else tuple(axes or ())
            # Mesh axes of size 1 shard nothing: drop them so specs stay minimal.
            for ax in group:
                if ax not in mesh.shape:
                    raise ShardingError(
                        f"{what}: rule {name!r} -> mesh axis {ax!r}, which the mesh does not have "
                        f"(mesh axes: {list(mesh.shape)})"
                    )
                if ax in used:
                    raise ShardingError(f"{what}: mesh axis {ax!r} used twice in {names}")
            used.update(group)
            group = tuple(ax for ax in group if mesh.shape[ax] > 1)
            size = 1
            for ax in group:
                size *= mesh.shape[ax]
            if shape is not None and shape[i] % size:
                raise ShardingError(
                    f"{what}: dimension {i} (size {shape[i]}, logical {name!r}) is not divisible "
                    f"by mesh axis {group} of size {size}"
                )
            out.append(None if not group else group[0] if len(group) == 1 else group)
        return PartitionSpec(*out)


def param_shardings(params, mesh: Mesh, rules: ShardingRules, axes=None):
    """A NamedSharding per parameter (``params`` may hold arrays or ShapeDtypeStructs)."""
    axes = axes_of(params) if axes is None else axes
    flat, treedef = jax.tree.flatten_with_path(params)
    flat_axes = treedef.flatten_up_to(axes)
    out = []
    for (path, leaf), names in zip(flat, flat_axes, strict=True):
        what = "param " + jax.tree_util.keystr(path)
        if len(names) != len(leaf.shape):
            raise ShardingError(f"{what}: {len(names)} logical axes for shape {leaf.shape}")
        out.append(NamedSharding(mesh, rules.spec(names, mesh=mesh, shape=leaf.shape, what=what)))
    return jax.tree.unflatten(treedef, out)


def shard_params(params, mesh: Mesh, rules: ShardingRules | None = None, axes=None):
    """Places ``params`` on ``mesh`` according to ``rules`` (default rules when None)."""
    rules = ShardingRules() if rules is None else rules
    return jax.device_put(params, param_shardings(params, mesh, rules, axes))


def activation_sharding(name: str, mesh: Mesh, rules: ShardingRules, shape=None) -> NamedSharding:
    """NamedSharding of a key activation (see :data:`ACTIVATION_AXES`)."""
    if name not in ACTIVATION_AXES:
        raise ShardingError(f"unknown activation {name!r}; known: {sorted(ACTIVATION_AXES)}")
    return NamedSharding(mesh, rules.spec(ACTIVATION_AXES[name], mesh=mesh, shape=shape, what=name))
