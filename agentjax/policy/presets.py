"""Model presets: the published shapes of Qwen3 models, plus the tiny test models by name.

Shapes are from the models' Hugging Face ``config.json`` files (Qwen3 technical report, 2025):

===============  ======  ======  =====  ========  ========  ============  =======  =====
preset           layers  hidden  heads  kv heads  head dim  intermediate  experts  top-k
===============  ======  ======  =====  ========  ========  ============  =======  =====
qwen3_8b         36      4096    32     8         128       12288         -        -
qwen3_32b        64      5120    64     8         128       25600         -        -
qwen3_30b_a3b    48      2048    32     4         128       768 (expert)  128      8
===============  ======  ======  =====  ========  ========  ============  =======  =====

All three: vocab 151936, q/k RMSNorm (``qk_norm``), untied LM head, RoPE theta 1e6, RMSNorm eps
1e-6, 40960 positions. Parameters and compute are bfloat16 and the LM head float32. These presets
carry no weights: use them with :func:`agentjax.policy.abstract_params` for ahead-of-time
compilation (``agentjax.podcheck.aot``), or load a checkpoint into them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax

from agentjax.policy.config import ModelConfig
from agentjax.policy.model import abstract_params

_QWEN3 = dict(
    vocab_size=151936,
    head_dim=128,
    max_seq_len=40960,
    rope_theta=1_000_000.0,
    norm_eps=1e-6,
    tie_embeddings=False,
    qk_norm=True,
    param_dtype="bfloat16",
    compute_dtype="bfloat16",
    head_dtype="float32",
)


def qwen3_8b(**overrides) -> ModelConfig:
    """Qwen3-8B: 36 layers, hidden 4096, 32 q / 8 kv heads, SwiGLU 12288 (8.2B parameters)."""
    base = dict(_QWEN3, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8, d_ff=12288)
    return ModelConfig(**{**base, **overrides})


def qwen3_32b(**overrides) -> ModelConfig:
    """Qwen3-32B: 64 layers, hidden 5120, 64 q / 8 kv heads, SwiGLU 25600 (32.8B parameters)."""
    base = dict(_QWEN3, d_model=5120, n_layers=64, n_heads=64, n_kv_heads=8, d_ff=25600)
    return ModelConfig(**{**base, **overrides})


def qwen3_30b_a3b(**overrides) -> ModelConfig:
    """Qwen3-30B-A3B-style MoE: 48 layers, hidden 2048, 128 experts of 768, top-8 (30.5B)."""
    base = dict(
        _QWEN3,
        d_model=2048,
        n_layers=48,
        n_heads=32,
        n_kv_heads=4,
        d_ff=768,
        n_experts=128,
        n_experts_per_token=8,
    )
    return ModelConfig(**{**base, **overrides})


def tiny_dense(**overrides) -> ModelConfig:
    """d_model 32, 2 layers, vocab 64: compiles in seconds on CPU (tests, benchmarks, examples)."""
    base = dict(
        vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64, max_seq_len=32
    )
    return ModelConfig(**{**base, **overrides})


def tiny_moe(**overrides) -> ModelConfig:
    """tiny_dense with 4 experts, top-2 routing."""
    return tiny_dense(**{"n_experts": 4, "n_experts_per_token": 2, **overrides})


PRESETS: dict[str, Callable[..., ModelConfig]] = {
    "qwen3_8b": qwen3_8b,
    "qwen3_32b": qwen3_32b,
    "qwen3_30b_a3b": qwen3_30b_a3b,
    "tiny_dense": tiny_dense,
    "tiny_moe": tiny_moe,
}


def preset(name: str, **overrides) -> ModelConfig:
    """The preset called ``name`` (see :data:`PRESETS`), with field ``overrides``."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name](**overrides)


def n_params(config: ModelConfig) -> int:
    """Total parameter count of ``config`` (from its parameter shapes)."""
    return sum(math.prod(x.shape) for x in jax.tree.leaves(abstract_params(config)))
