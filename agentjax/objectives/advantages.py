"""Advantages: group-relative (GRPO, Dr.GRPO), leave-one-out (RLOO), and GAE with honest discounts.

Advantage = how much better than expected, not the reward. Group methods need no critic; GAE needs
one, and needs to know *why* an episode stopped: a terminal step has discount 0, a step cut by the
system's budget keeps discount gamma and is bootstrapped with the critic's value (PROBLEMS.md s2,
s6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agentjax.objectives.core import Array, _as_float, _as_mask, _check_ndim, _check_shape
from agentjax.trajectory import StopReason

GROUP_SCALES = ("std", "none")

# Episodes that ended for good: the value after the last step is 0.
TERMINAL_REASONS = (
    StopReason.FINISHED,
    StopReason.TASK_CAP,  # the cap is part of the task: exceeding it is the agent's failure
    StopReason.AGENT_ERROR,
    StopReason.REWARD_HACK,
)
# Episodes the system cut while the task could continue: bootstrap with V(c_T). A full context
# is the system's limit (model.max_seq_len), not one of the task's caps.
TRUNCATED_REASONS = (StopReason.ROUND_BUDGET_PAUSED, StopReason.CONTEXT_FULL)
# Episodes that must not be trained on at all (no discount is defined for them).
UNTRAINABLE_REASONS = (StopReason.INFRA_FAULT, StopReason.CANCELLED, StopReason.REJECTED_STALE)


def group_advantages(rewards: Any, *, scale: str = "std", eps: float = 1e-6) -> Array:
    """Group-relative advantages of GRPO (Shao et al. 2024, DeepSeekMath) and Dr.GRPO.

    ``scale="std"`` (GRPO): ``A_ij = (R_ij - mean_j R_ij) / (std_j R_ij + eps)`` with the population
    standard deviation (ddof=0) over the group. ``scale="none"`` (Dr.GRPO, Liu et al. 2025):
    ``A_ij = R_ij - mean_j R_ij``. A group whose rewards are all equal gets all-zero advantages: it
    carries no signal (see :func:`prob_same_group`).

    Args:
        rewards: ``[P, G]``, P prompts with G sampled answers each.
        scale: ``"std"`` or ``"none"``.
        eps: added to the standard deviation.

    Returns:
        ``[P, G]`` advantages.
    """
    if scale not in GROUP_SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {GROUP_SCALES}")
    xp = _namespace(rewards)
    r = rewards if xp is np else _as_float("rewards", rewards)
    _check_ndim("rewards", r, 2, "[P, G]")
    # An all-equal group is exactly zero (rounding in the mean must not invent a tiny signal).
    same = xp.max(r, axis=1, keepdims=True) == xp.min(r, axis=1, keepdims=True)
    centred = xp.where(same, 0.0, r - xp.mean(r, axis=1, keepdims=True))
    if scale == "none":
        return centred
    return centred / (xp.std(r, axis=1, keepdims=True) + eps)


def _namespace(rewards: Any):
    """numpy for a host float64 array (the learner's batching computes advantages on the host in
    float64), jax.numpy otherwise: one formula, either array library."""
    return np if isinstance(rewards, np.ndarray) and rewards.dtype == np.float64 else jnp


def rloo_advantages(rewards: Any) -> Array:
    """REINFORCE leave-one-out advantages (Kool et al. 2019; Ahmadian et al. 2024).

    ``A_ij = R_ij - (1 / (G - 1)) sum_{k != j} R_ik``: each sample's baseline is the mean of the
    other G - 1 samples of its group, so the baseline is independent of the sample.

    Args:
        rewards: ``[P, G]`` with ``G >= 2``.

    Returns:
        ``[P, G]`` advantages.
    """
    xp = _namespace(rewards)
    r = rewards if xp is np else _as_float("rewards", rewards)
    _check_ndim("rewards", r, 2, "[P, G]")
    g = r.shape[1]
    if g < 2:
        raise ValueError(f"rewards must have G >= 2 samples per group for RLOO, got shape {r.shape}")
    adv = r - (xp.sum(r, axis=1, keepdims=True) - r) / (g - 1)
    same = xp.max(r, axis=1, keepdims=True) == xp.min(r, axis=1, keepdims=True)
    return xp.where(same, 0.0, adv)  # exactly 0 for an all-equal group, despite rounding


def prob_same_group(p: Any, group_size: int) -> Array:
    """Probability that G binary rewards with success rate p are all equal: ``p^G + (1 - p)^G``.

    Such a group gets zero group advantage and trains nothing (PROBLEMS.md s5): for G = 8,
    p = 0.5 gives 0.78%, p = 0.01 gives 92.3%.
    """
    p = jnp.asarray(p, jnp.float32)
    return p**group_size + (1.0 - p) ** group_size


def gae(
    rewards: Any, discounts: Any, values: Any, lam: float, *, mask: Any | None = None
) -> tuple[Array, Array]:
    """Generalised advantage estimation for one trajectory (Schulman et al. 2016).

    ``delta_t = r_t + discount_t * V_{t+1} - V_t`` and
    ``A_t = delta_t + discount_t * lam * A_{t+1}`` (with ``A_T = 0``); returns
    ``R_t = A_t + V_t``. With a constant ``discount_t = gamma`` this is
    ``A_t = sum_l (gamma lam)^l delta_{t+l}``. Build ``discounts`` with :func:`discounts_from`:
    a terminal last step has discount 0 (``V_T`` is ignored), a step truncated by a budget has
    discount gamma and ``values[T]`` must be the critic's bootstrap value ``V(c_T)``.

    For a batch, ``jax.vmap`` over trajectories padded to a common length and pass ``mask`` (1 on
    real steps, a prefix): padded steps get ``A_t = 0`` and never leak into real ones, so the
    bootstrap value of a trajectory of length L sits at ``values[L]``.

    Args:
        rewards: ``[T]`` step rewards.
        discounts: ``[T]`` per-step discounts (gamma times "the episode continues after step t").
        values: ``[T + 1]`` critic values; the last entry is the bootstrap value.
        lam: the GAE lambda.
        mask: optional ``[T]``, 1 on real steps.

    Returns:
        ``(advantages [T], returns [T])``. No stop_gradient is applied: wrap them yourself when they
        are regression targets.
    """
    r = _as_float("rewards", rewards)
    _check_ndim("rewards", r, 1, "[T]")
    t = r.shape[0]
    d = _as_float("discounts", discounts)
    _check_shape("discounts", d, (t,), f"[T] = ({t},)")
    v = _as_float("values", values)
    _check_shape("values", v, (t + 1,), f"[T + 1] = ({t + 1},)")
    m = jnp.ones((t,), r.dtype) if mask is None else _as_mask("mask", mask, r)
    delta = jnp.where(m != 0, r + d * v[1:] - v[:-1], 0.0)

    def step(next_adv, inputs):
        delta_t, discount_t, mask_t = inputs
        adv_t = jnp.where(mask_t != 0, delta_t + discount_t * lam * next_adv, 0.0)
        return adv_t, adv_t

    _, adv = jax.lax.scan(step, jnp.zeros((), r.dtype), (delta, d, m), reverse=True)
    return adv, jnp.where(m != 0, adv + v[:-1], 0.0)


def _reason(x: Any) -> StopReason:
    valid = [s.value for s in TERMINAL_REASONS + TRUNCATED_REASONS]
    try:
        reason = StopReason(x)
    except ValueError:
        raise ValueError(f"unknown stop reason {x!r}; valid: {valid}") from None
    if reason in UNTRAINABLE_REASONS:
        raise ValueError(
            f"stop reason {reason.value!r} marks an episode that is masked out, not trained on, "
            f"so it has no discount; valid: {valid}"
        )
    return reason


def needs_bootstrap(stop_reasons: Sequence[Any]) -> np.ndarray:
    """Bool ``[N]``: True where the episode was truncated by a budget and ``V(c_T)`` is needed."""
    return np.array([_reason(s) in TRUNCATED_REASONS for s in stop_reasons], bool)


def discounts_from(
    stop_reasons: Sequence[Any], gamma: float, *, lengths: Sequence[int] | None = None
) -> np.ndarray:
    """Per-step discounts from recorded stop reasons (host-side numpy), so nobody writes a zero.

    ``"finished"``, ``"task_cap"``, ``"agent_error"`` and ``"reward_hack"`` are terminal: the last
    step's discount is 0. ``"round_budget_paused"`` (the system cut sampling; the task could go on)
    keeps discount ``gamma`` at the last step, and ``gae`` then reads the bootstrap value
    ``values[L]`` (see :func:`needs_bootstrap`). ``"infra_fault"``, ``"cancelled"`` and
    ``"rejected_stale"`` episodes are never trained on and raise, like unknown reasons.

    Args:
        stop_reasons: ``N`` reasons, as strings or :class:`agentjax.trajectory.StopReason`.
        gamma: the discount factor, in ``[0, 1]``.
        lengths: optional ``N`` step counts (each >= 1).

    Returns:
        Without ``lengths``: float32 ``[N]``, the discount at each episode's last step (0 or gamma).
        With ``lengths``: float32 ``[N, max(lengths)]``; row i is ``gamma`` on steps
        ``0 .. L_i - 2``, the last-step discount at ``L_i - 1`` and 0 on padding; row i's first
        ``L_i`` entries are exactly the ``discounts`` argument of :func:`gae` for that episode.

    Raises:
        ValueError: unknown or untrainable reason, gamma outside [0, 1], bad lengths.
    """
    if isinstance(stop_reasons, str):
        raise ValueError("stop_reasons must be a sequence of reasons, not a single string")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    last = np.array([gamma if _reason(s) in TRUNCATED_REASONS else 0.0 for s in stop_reasons], np.float32)
    if lengths is None:
        return last
    lengths = np.asarray(lengths, np.int64)
    if lengths.shape != last.shape or (lengths.size and lengths.min() < 1):
        raise ValueError(
            f"lengths must be {last.shape[0]} positive step counts (one per stop reason), "
            f"got {lengths.tolist()}"
        )
    t_max = int(lengths.max()) if lengths.size else 0
    steps = np.arange(t_max)[None, :]
    out = np.where(steps < lengths[:, None] - 1, np.float32(gamma), np.float32(0.0))
    out[np.arange(len(last)), lengths - 1] = last
    return out.astype(np.float32)
