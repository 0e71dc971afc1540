"""Tiny model configurations shared by tests, benchmarks and examples (defined with the presets)."""

from agentjax.policy.presets import tiny_dense, tiny_moe

__all__ = ["tiny_dense", "tiny_moe"]
