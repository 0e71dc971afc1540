"""Decoupled PPO (AReaL) and the three-policy split of the off-policy ratio.

Three policies touch an asynchronous batch: the behaviour policy ``mu`` (the sampler's engine at
the behaviour version v: its recorded log-probs), the learner's engine at that same version
``pi_v`` (a recompute with the kept parameters of version v), the *proximal* policy ``pi_prox``
(the learner's parameters when this training step starts) and the current policy ``pi`` (what the
gradient moves). The total ratio ``pi / mu`` factors exactly into

    update    pi / pi_prox      optimiser updates within this step (minibatches)
    staleness pi_prox / pi_v    versions trained since the batch was sampled
    mismatch  pi_v / mu         the two engines disagreeing at the same parameters

(:func:`decompose_three`). HisPO masks on ``staleness x update`` and ``mismatch`` separately;
decoupled PPO clips on ``update`` and reweights by ``pi_prox / mu``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from agentjax.objectives.core import Array, _as_mask, _token_advantages, _token_inputs, aggregate, masked_mean

sg = jax.lax.stop_gradient


def decompose_three(
    logp_current: Any, logp_prox: Any, logp_train_at_behavior_version: Any, logp_infer: Any
) -> tuple[Array, Array, Array, Array]:
    """``(update, staleness, mismatch, total)`` ratios, with ``total = update * staleness * mismatch``.

    ``update = pi / pi_prox``, ``staleness = pi_prox / pi_v``, ``mismatch = pi_v / mu``,
    ``total = pi / mu`` (computed directly from ``logp_current - logp_infer``, so the identity is
    a check, not a definition).
    """
    cur, prox, train_v, infer = _token_inputs(
        logp_current=logp_current,
        logp_prox=logp_prox,
        logp_train_at_behavior_version=logp_train_at_behavior_version,
        logp_infer=logp_infer,
    )
    return (jnp.exp(cur - prox), jnp.exp(prox - train_v), jnp.exp(train_v - infer), jnp.exp(cur - infer))


def decoupled_ppo_loss(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float,
    clip_high: float,
    behavior_cap: float | None,
    aggregation: str = "token_mean",
    max_len: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Decoupled PPO (Fu et al. 2025, AReaL, arXiv:2505.24298, eq. 5): the trust region is
    centred on the proximal policy, not on the (possibly many versions old) behaviour policy.

    Per token: ``w_t = sg(pi_prox / mu)`` (the behaviour importance weight),
    ``u_t = pi / sg(pi_prox)``, objective ``w_t * min(u_t A_t, clip(u_t, 1 - clip_low,
    1 + clip_high) A_t)``, aggregated and negated. ``behavior_cap``: tokens whose ``w_t`` exceeds
    it are dropped (weight 0), as AReaL's optional behaviour-weight cap does; None keeps all.

    Args:
        logp: ``[B, T]`` current log-probs (differentiated).
        logp_prox: ``[B, T]`` log-probs under the parameters at the start of the training step.
        logp_behavior: ``[B, T]`` the sampler's recorded log-probs.
        advantages: ``[B]`` or ``[B, T]``.
        mask: ``[B, T]`` loss mask.
        clip_low, clip_high: clip epsilons on ``u_t``.
        behavior_cap: upper bound on ``w_t`` (tokens above it are dropped), or None.
        aggregation, max_len: see :func:`aggregate`.

    Returns:
        ``(loss, metrics)``: ``loss``, ``clip_fraction``, ``behavior_weight/mean``,
        ``behavior_weight/max``, ``masked/behavior_cap``, ``ratio/update_mean``.
    """
    if behavior_cap is not None and behavior_cap <= 0:
        raise ValueError(f"behavior_cap must be positive or None, got {behavior_cap}")
    logp, prox, behav = _token_inputs(logp=logp, logp_prox=logp_prox, logp_behavior=logp_behavior)
    mask = _as_mask("mask", mask, logp)
    adv = _token_advantages(advantages, logp.shape)
    on = mask != 0
    w = jnp.where(on, jnp.exp(sg(prox) - sg(behav)), 0.0)
    keep = jnp.ones_like(w) if behavior_cap is None else (w <= behavior_cap).astype(w.dtype)
    u = jnp.exp(jnp.where(on, logp - sg(prox), 0.0))
    obj = jnp.minimum(u * adv, jnp.clip(u, 1.0 - clip_low, 1.0 + clip_high) * adv)
    loss = -aggregate(jnp.where(on, w * keep * obj, 0.0), mask, aggregation, max_len=max_len)
    clipped = ((adv > 0) & (u > 1.0 + clip_high)) | ((adv < 0) & (u < 1.0 - clip_low))
    return loss, {
        "loss": loss,
        "clip_fraction": masked_mean(clipped.astype(u.dtype), mask),
        "behavior_weight/mean": masked_mean(w, mask),
        "behavior_weight/max": jnp.max(w),
        "masked/behavior_cap": masked_mean(1.0 - keep, mask),
        "ratio/update_mean": masked_mean(sg(u), mask),
    }
