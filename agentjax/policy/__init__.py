"""Model math only: config, init, forward (dense + MoE), KV cache, tokenizers, HF import."""

from agentjax.policy.chat import ChatTemplate, load_chat_tokenizer
from agentjax.policy.codec import Codec
from agentjax.policy.config import ConfigError, ModelConfig, ValueHead
from agentjax.policy.hf import HFImportError, load_hf_checkpoint, load_hf_config
from agentjax.policy.hf_export import export_hf
from agentjax.policy.logprobs import token_logprobs_from_logits
from agentjax.policy.model import (
    Layout,
    abstract_params,
    critic_values,
    forward,
    init_cache,
    init_params,
    logical_axes,
    param_spec,
)
from agentjax.policy.presets import PRESETS, preset, qwen3_8b, qwen3_30b_a3b, qwen3_32b, tiny_dense, tiny_moe
from agentjax.policy.scoring import token_logprobs
from agentjax.policy.tokenizer import HFTokenizer, WordTokenizer

__all__ = [
    "PRESETS",
    "ChatTemplate",
    "Codec",
    "ConfigError",
    "HFImportError",
    "HFTokenizer",
    "WordTokenizer",
    "export_hf",
    "load_chat_tokenizer",
    "load_hf_checkpoint",
    "load_hf_config",
    "preset",
    "qwen3_8b",
    "qwen3_30b_a3b",
    "qwen3_32b",
    "tiny_dense",
    "tiny_moe",
    "token_logprobs",
    "token_logprobs_from_logits",
    "Layout",
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
