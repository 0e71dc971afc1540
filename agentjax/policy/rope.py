"""RoPE frequencies of a model: plain, linear, Llama-3 and YaRN scaling, global and local layers.

The formulas are transformers' ``modeling_rope_utils`` (``_compute_*_parameters``), computed here
once on the host in float64 from :class:`ModelConfig` fields. A :class:`Rotary` is the result:
the inverse frequencies ``inv_freq[j]`` (angle of position p = ``p * inv_freq[j]``) and the factor
``scale`` by which cos and sin are multiplied (YaRN's attention factor; 1 otherwise).

- ``linear``: ``inv_freq / factor``.
- ``llama3`` (Llama 3.1+): wavelengths ``2 pi / inv_freq`` above ``original / low_freq_factor``
  are divided by ``factor``, below ``original / high_freq_factor`` kept, and in between
  interpolated with ``s = (original / wavelen - low) / (high - low)``:
  ``(1 - s) inv / factor + s inv``.
- ``yarn`` (Peng et al. 2023, arXiv:2309.00071): ``inv = interp (1 - e) + extrap e`` with
  ``e = 1 - ramp(low, high)`` over the dimensions, ``low``/``high`` the correction dimensions of
  ``beta_fast``/``beta_slow`` rotations at the original length (floored/ceiled when truncating).

Sliding-window layers with ``local_rope_theta > 0`` (Gemma-3) use plain RoPE of that base.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from agentjax.policy.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class Rotary:
    inv_freq: tuple[float, ...]  # float64 values, head_dim / 2 of them
    scale: float = 1.0

    @classmethod
    def plain(cls, theta: float, d: int) -> Rotary:
        return cls(tuple(1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))))


def _llama3(c: ModelConfig, inv: np.ndarray) -> np.ndarray:
    low, high, old = c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_len
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > old / low, inv / c.rope_factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / c.rope_factor + smooth * out
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, out)


def _yarn(c: ModelConfig, d: int) -> np.ndarray:
    base, old = c.rope_theta, c.rope_original_max_len

    def dim_of(rotations):
        return (d * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = dim_of(c.rope_beta_fast), dim_of(c.rope_beta_slow)
    if c.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # as transformers: no singular ramp
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    extrap = 1 - ramp
    return (1.0 / (c.rope_factor * pos_freqs)) * (1 - extrap) + (1.0 / pos_freqs) * extrap


def rotary(c: ModelConfig, local: bool = False) -> Rotary:
    """The RoPE of the model's global layers, or (``local``) of its sliding-window layers."""
    d = c.head_dim
    if local and c.local_rope_theta > 0:
        return Rotary.plain(c.local_rope_theta, d)
    inv = np.asarray(Rotary.plain(c.rope_theta, d).inv_freq)
    scale = 1.0
    if c.rope_type == "linear":
        inv = inv / c.rope_factor
    elif c.rope_type == "llama3":
        inv = _llama3(c, inv)
    elif c.rope_type == "yarn":
        inv, scale = _yarn(c, d), c.rope_attention_factor
    return Rotary(tuple(float(v) for v in inv), float(scale))


def is_plain(c: ModelConfig) -> bool:
    """One plain RoPE of base ``rope_theta`` in every layer (the original, cheapest path)."""
    local_differs = c.local_rope_theta > 0 and any(c.is_sliding)
    return c.rope_type == "default" and not local_differs


def rotaries(c: ModelConfig) -> tuple[Rotary, Rotary]:
    """(global, local) RoPE; a layer picks one by :attr:`ModelConfig.is_sliding`."""
    return rotary(c, False), rotary(c, True)
