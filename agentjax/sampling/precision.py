"""The sampler's precision, separate from the learner's: the mismatch modes of
``launch.consistency`` (bf16 parameters / compute, a bf16 LM head, int8 fake-quantised weights)
as something a run can train with.

    s = SamplerPrecision(compute_dtype="bfloat16", head_dtype="bfloat16")
    sampler = Sampler(sampler_model(model, s), ...)
    worker.publish(v, to_sampler(learner_params, s), ...)

The learner keeps its own precision; the sampler's log-probs then differ from the learner's at
the same parameters, which is exactly the mismatch that IcePop / KPop / TIS / HisPO measure
(``agentjax.learner.objective``, ``filter_ratio="mismatch"``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agentjax.policy.config import ModelConfig

DTYPES = ("", "float32", "bfloat16")  # "": the learner's


@dataclasses.dataclass(frozen=True)
class SamplerPrecision:
    """Run config section ``sampler``; every default is "as the learner"."""

    param_dtype: str = ""  # the weights the sampler holds (bfloat16: cast at every sync)
    compute_dtype: str = ""
    head_dtype: str = ""  # the LM head's dtype (MiniMax-M1: keep it float32 with a bf16 body)
    quantize_bits: int = 0  # > 0: symmetric per-output-channel fake quantisation (8: int8)
    exact_tile: int = -1  # -1: the learner's; 0: standard XLA kernels
    replay_routes: bool = True  # MoE: the learner replays the sampler's experts (R3)

    def __post_init__(self):
        for f in ("param_dtype", "compute_dtype", "head_dtype"):
            if getattr(self, f) not in DTYPES:
                raise ValueError(
                    f"sampler.{f}={getattr(self, f)!r} is invalid; allowed values: {list(DTYPES)}"
                )
        if self.quantize_bits not in (0, 4, 8):
            raise ValueError(
                f"sampler.quantize_bits={self.quantize_bits} is invalid; allowed values: [0, 4, 8]"
            )
        if self.exact_tile < -1:
            raise ValueError(
                f"sampler.exact_tile={self.exact_tile} is invalid; -1 (the learner's), 0 or a tile > 0"
            )

    @property
    def same_as_learner(self) -> bool:
        return self == SamplerPrecision()


def sampler_model(model: ModelConfig, s: SamplerPrecision) -> ModelConfig:
    """The sampler's model config: the learner's with the section's overrides."""
    over = {f: getattr(s, f) for f in ("param_dtype", "compute_dtype", "head_dtype") if getattr(s, f)}
    if s.exact_tile >= 0:
        over["exact_tile"] = s.exact_tile
    return dataclasses.replace(model, **over) if over else model


def fake_quantize(params, bits: int = 8):
    """Rounds every matrix to ``bits``-bit symmetric integers per output channel (last axis) and
    back: ``w_q = round(w / s) * s``, ``s = max|w| / (2^(bits-1) - 1)`` over the input axis."""
    qmax = 2.0 ** (bits - 1) - 1

    def q(w):
        if w.ndim < 2:
            return w
        s = jnp.max(jnp.abs(w), axis=-2, keepdims=True) / qmax
        s = jnp.where(s == 0, 1.0, s)
        return (jnp.clip(jnp.round(w / s), -qmax, qmax) * s).astype(w.dtype)

    return jax.tree.map(q, params)


def to_sampler(params, s: SamplerPrecision):
    """The weights the sampler uses, from the learner's: fake-quantised, then cast."""
    if s.quantize_bits:
        params = fake_quantize(params, s.quantize_bits)
    if s.param_dtype:
        dt = jnp.dtype(s.param_dtype)
        params = jax.tree.map(lambda w: w.astype(dt) if jnp.issubdtype(w.dtype, jnp.floating) else w, params)
    return params
