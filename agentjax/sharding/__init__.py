"""Meshes, logical-axis rules, placement and weight sync."""

from agentjax.sharding.mesh import MESH_AXES, make_mesh
from agentjax.sharding.rules import (
    ACTIVATION_AXES,
    DEFAULT_RULES,
    ShardingError,
    ShardingRules,
    activation_sharding,
    param_shardings,
    shard_params,
)

__all__ = [
    "ACTIVATION_AXES",
    "DEFAULT_RULES",
    "MESH_AXES",
    "ShardingError",
    "ShardingRules",
    "activation_sharding",
    "make_mesh",
    "param_shardings",
    "shard_params",
]
