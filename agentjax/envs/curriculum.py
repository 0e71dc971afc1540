"""A noise curriculum: per-fault-class rates that start low and rise with steps and performance.

PROBLEMS.md s8 (after LongCat-Flash-Thinking-2601): start with low-rate *recoverable* tool failures,
raise them gradually while the agent copes, keep tasks solvable, and measure clean and noisy
performance both. This is an optax-style pair of pure functions over a NamedTuple state::

    curriculum = noise_curriculum({"tool_error": 0.0}, {"tool_error": 0.2}, ramp_steps=100)
    state = curriculum.init()
    state = curriculum.update(state, success)     # once per training step
    env.reset(task, seed, fault_rates=rates(state))

Update rule, with ``s_t`` the step's success rate (``None`` or nan: no observation, EMA kept)::

    ema_{t+1}   = decay * ema_t + (1 - decay) * s_t
    level_{t+1} = min(1, level_t + 1 / ramp_steps)   if t + 1 > warmup_steps and ema_{t+1} >= gate
                = max(0, level_t - backoff)          if ema_{t+1} < floor
                = level_t                            otherwise (hold)
    rate_c      = start_c + (cap_c - start_c) * level_{t+1}

With ``gate = 0`` the level is a pure linear schedule in steps. With a gate, noise only rises
while the (smoothed) agent succeeds at least ``gate`` of the time, and ``backoff`` lowers it when
performance collapses below ``floor``. Rates never leave ``[start_c, cap_c]``. The state holds only
numbers (and the current rates), so it is a pytree: checkpointable and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple


class CurriculumState(NamedTuple):
    step: int
    level: float  # in [0, 1]: 0 = start rates, 1 = caps
    ema_success: float
    rates: dict[str, float]


class NoiseCurriculum(NamedTuple):
    init: Callable[[], CurriculumState]
    update: Callable[[CurriculumState, float | None], CurriculumState]


def rates(state: CurriculumState) -> dict[str, float]:
    """The fault rates to use now (a fresh dict, one entry per fault class)."""
    return dict(state.rates)


def noise_curriculum(
    start: Mapping[str, float],
    cap: Mapping[str, float],
    ramp_steps: int,
    *,
    warmup_steps: int = 0,
    gate: float = 0.0,
    floor: float = 0.0,
    backoff: float = 0.0,
    decay: float = 0.9,
    initial_success: float = 0.0,
) -> NoiseCurriculum:
    """Builds the (init, update) pair; see the module docstring for the rule."""
    if set(start) != set(cap):
        raise ValueError(f"start and cap name different classes: {sorted(start)} vs {sorted(cap)}")
    for c in start:
        if not 0.0 <= start[c] <= cap[c] <= 1.0:
            raise ValueError(f"need 0 <= start <= cap <= 1 for {c!r}: {start[c]}, {cap[c]}")
    if ramp_steps <= 0 or warmup_steps < 0:
        raise ValueError(f"need ramp_steps > 0 and warmup_steps >= 0, got {ramp_steps}, {warmup_steps}")
    if not (0.0 <= floor <= gate <= 1.0 and 0.0 <= decay < 1.0 and backoff >= 0.0):
        raise ValueError("need 0 <= floor <= gate <= 1, 0 <= decay < 1 and backoff >= 0")
    classes = sorted(start)

    def at(level: float) -> dict[str, float]:
        return {c: start[c] + (cap[c] - start[c]) * level for c in classes}

    def init() -> CurriculumState:
        return CurriculumState(0, 0.0, float(initial_success), at(0.0))

    def update(state: CurriculumState, success: float | None) -> CurriculumState:
        ema = state.ema_success
        if success is not None and not math.isnan(success):
            if not 0.0 <= success <= 1.0:
                raise ValueError(f"success must lie in [0, 1], got {success}")
            ema = decay * ema + (1.0 - decay) * float(success)
        step, level = state.step + 1, state.level
        if step > warmup_steps and ema >= gate:
            level = min(1.0, level + 1.0 / ramp_steps)
        elif ema < floor:
            level = max(0.0, level - backoff)
        return CurriculumState(step, level, ema, at(level))

    return NoiseCurriculum(init, update)
