"""Model math only: config, init, forward (dense + MoE), KV cache, tokenizers, HF import."""

from agentjax.policy.config import ConfigError, ModelConfig, ValueHead
from agentjax.policy.model import (
    abstract_params,
    critic_values,
    forward,
    init_cache,
    init_params,
    logical_axes,
    param_spec,
)

__all__ = [
    "ConfigError",
    "ModelConfig",
    "ValueHead",
    "abstract_params",
    "critic_values",
    "forward",
    "init_cache",
    "init_params",
    "logical_axes",
    "param_spec",
]
