"""Tiny model configurations shared by tests, benchmarks and examples."""

from agentjax.policy.config import ModelConfig


def tiny_dense(**overrides) -> ModelConfig:
    """d_model 32, 2 layers, vocab 64: compiles in seconds on CPU."""
    base = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                d_ff=64, max_seq_len=32)
    return ModelConfig(**{**base, **overrides})


def tiny_moe(**overrides) -> ModelConfig:
    """tiny_dense with 4 experts, top-2 routing."""
    return tiny_dense(**{"n_experts": 4, "n_experts_per_token": 2, **overrides})
