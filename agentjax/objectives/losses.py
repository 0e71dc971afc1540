"""Clipped policy-gradient losses: PPO, GRPO, GSPO and CISPO.

Every loss takes log-probs ``[B, T]`` of the sampled tokens under the current policy (``logp``, the
one that carries gradients) and under the policy that the ratio is taken against (``old_logp``,
always wrapped in ``stop_gradient``), advantages, and a ``[B, T]`` mask. Every loss is *to be
minimised* (the negated objective) and returns ``(loss, metrics)`` with scalar metrics.

Log-ratios are zeroed on masked-out tokens *before* ``exp``, so padding may hold anything (even
``-inf`` log-probs) without reaching the loss or its gradient.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from agentjax.objectives.core import (
    Array,
    _as_float,
    _as_mask,
    _check_shape,
    _safe_divide,
    _token_advantages,
    _token_inputs,
    _valid_rows,
    aggregate,
    check_clip,
    masked_mean,
)
from agentjax.objectives.corrections import kl_penalty

sg = jax.lax.stop_gradient


def _log_ratio(logp: Array, old_logp: Array, mask: Array) -> Array:
    """``logp - sg(old_logp)`` on masked-in tokens, 0 elsewhere."""
    return jnp.where(mask != 0, logp - sg(old_logp), 0.0)


def _clip_metrics(ratio: Array, adv: Array, mask: Array, low: float, high: float) -> dict:
    """Where the clipped branch of ``min(r A, clip(r) A)`` is active (its gradient is zero)."""
    hi = (adv > 0) & (ratio > 1.0 + high)
    lo = (adv < 0) & (ratio < 1.0 - low)
    return {
        "clip_fraction": masked_mean((hi | lo).astype(ratio.dtype), mask),
        "clip_fraction/high": masked_mean(hi.astype(ratio.dtype), mask),
        "clip_fraction/low": masked_mean(lo.astype(ratio.dtype), mask),
    }


def _ratio_metrics(ratio: Array, log_ratio: Array, mask: Array, prefix: str = "ratio") -> dict:
    return {
        f"{prefix}/mean": masked_mean(ratio, mask),
        f"{prefix}/max": jnp.max(jnp.where(mask != 0, ratio, 0.0)),
        # k3 estimate of KL(old || new) from samples of old: (r - 1) - log r >= 0.
        "approx_kl": masked_mean(sg(ratio) - 1.0 - sg(log_ratio), mask),
    }


def ppo_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float,
    clip_high: float,
    aggregation: str = "token_mean",
    max_len: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """PPO clipped surrogate (Schulman et al. 2017), with asymmetric bounds (DAPO's clip-higher).

    ``r_t = exp(logp_t - sg(old_logp_t))``, per-token objective
    ``min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t)``, aggregated by ``aggregation``
    (see :func:`aggregate`) and negated. Where the clipped branch wins (``A > 0`` and
    ``r > 1 + clip_high``, or ``A < 0`` and ``r < 1 - clip_low``) the token's gradient is zero;
    out-of-range tokens on the other side (e.g. ``A < 0``, ``r > 1 + clip_high``) keep it.

    Args:
        logp: ``[B, T]`` current log-probs of the sampled tokens (differentiated).
        old_logp: ``[B, T]`` log-probs under the policy that produced the data (stop-gradient).
        advantages: ``[B]`` (broadcast over tokens) or ``[B, T]``.
        mask: ``[B, T]`` loss mask.
        clip_low: lower clip epsilon.
        clip_high: upper clip epsilon.
        aggregation: see :func:`aggregate`.
        max_len: only for ``aggregation="seq_mean_token_sum_norm"``.

    Returns:
        ``(loss, metrics)``: ``loss``, ``clip_fraction`` (+ ``/high``, ``/low``), ``ratio/mean``,
        ``ratio/max``, ``approx_kl``.
    """
    check_clip(clip_low, clip_high)
    logp, old_logp = _token_inputs(logp=logp, old_logp=old_logp)
    mask = _as_mask("mask", mask, logp)
    adv = _token_advantages(advantages, logp.shape)
    log_ratio = _log_ratio(logp, old_logp, mask)
    ratio = jnp.exp(log_ratio)
    obj = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv)
    loss = -aggregate(obj, mask, aggregation, max_len=max_len)
    metrics = {"loss": loss}
    metrics.update(_clip_metrics(ratio, adv, mask, clip_low, clip_high))
    metrics.update(_ratio_metrics(ratio, log_ratio, mask))
    return loss, metrics


def grpo_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float,
    clip_high: float,
    ref_logp: Any | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    aggregation: str = "seq_mean_token_mean",
    max_len: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """GRPO (Shao et al. 2024, DeepSeekMath): PPO-clip on group advantages plus a KL term.

    ``loss = ppo_loss(...) + kl_coef * aggregate(kl_penalty(logp, sg(ref_logp), kl_kind))``. The
    paper uses ``kl_kind="k3"`` (``pi_ref/pi - log(pi_ref/pi) - 1``) and averages tokens within a
    sequence, then sequences (``aggregation="seq_mean_token_mean"``, the default here). Compute the
    advantages with :func:`group_advantages` and flatten ``[P, G]`` to ``[B = P * G]``.

    Args:
        logp, old_logp, advantages, mask, clip_low, clip_high, aggregation, max_len: as
            :func:`ppo_loss`.
        ref_logp: ``[B, T]`` reference-policy log-probs; required when ``kl_coef != 0``.
        kl_coef: weight of the KL term (0 disables it).
        kl_kind: ``"k1"``, ``"k2"`` or ``"k3"`` (see :func:`kl_penalty`).

    Returns:
        ``(loss, metrics)``: the PPO metrics plus ``pg_loss`` and, with a reference, ``kl``.
    """
    if ref_logp is None and isinstance(kl_coef, int | float) and kl_coef != 0:
        raise ValueError("ref_logp ([B, T]) is required when kl_coef != 0")
    pg_loss, metrics = ppo_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        aggregation=aggregation,
        max_len=max_len,
    )
    metrics = dict(metrics, pg_loss=pg_loss)
    if ref_logp is None:
        return pg_loss, metrics
    logp_f, ref = _token_inputs(logp=logp, ref_logp=ref_logp)
    mask_f = _as_mask("mask", mask, logp_f)
    on = mask_f != 0  # padding may hold -inf: zero it before the estimator, not after
    kl = kl_penalty(jnp.where(on, logp_f, 0.0), sg(jnp.where(on, ref, 0.0)), kl_kind)
    kl_agg = aggregate(kl, mask_f, aggregation, max_len=max_len)
    loss = pg_loss + kl_coef * kl_agg
    metrics.update(loss=loss, kl=kl_agg)
    return loss, metrics


def gspo_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[Array, dict[str, Array]]:
    """GSPO (Zheng et al. 2025, Qwen): a length-normalised sequence ratio, clipped per sequence.

    ``s_i = exp(sum_t m_it (logp_it - sg(old_logp_it)) / sum_t m_it)``, objective
    ``min(s_i A_i, clip(s_i, 1 - clip_low, 1 + clip_high) A_i)``, mean over valid sequences,
    negated. The gradient reaches every masked-in token of a sequence through ``s_i`` (unless the
    sequence is clipped). The paper's bounds are tiny (3e-4, 4e-4) because ``s_i`` is a geometric
    mean. Note ``s_i`` is not an unbiased full-trajectory importance weight.

    Args:
        logp: ``[B, T]`` current log-probs (differentiated).
        old_logp: ``[B, T]`` behaviour log-probs (stop-gradient).
        advantages: ``[B]`` sequence advantages.
        mask: ``[B, T]`` loss mask.
        clip_low: lower clip epsilon on ``s_i``.
        clip_high: upper clip epsilon on ``s_i``.

    Returns:
        ``(loss, metrics)``: ``loss``, ``clip_fraction`` (of valid sequences; + ``/high``,
        ``/low``), ``seq_ratio/mean``, ``seq_ratio/max``, ``approx_kl``.
    """
    check_clip(clip_low, clip_high)
    logp, old_logp = _token_inputs(logp=logp, old_logp=old_logp)
    mask = _as_mask("mask", mask, logp)
    adv = _as_float("advantages", advantages)
    _check_shape("advantages", adv, logp.shape[:1], f"[B] = ({logp.shape[0]},)")
    log_ratio = _log_ratio(logp, old_logp, mask)
    log_s = masked_mean(log_ratio, mask, axis=-1)
    s = jnp.exp(log_s)
    obj = jnp.minimum(s * adv, jnp.clip(s, 1.0 - clip_low, 1.0 + clip_high) * adv)
    valid = _valid_rows(mask)
    loss = -_safe_divide(jnp.sum(jnp.where(valid != 0, obj, 0.0)), jnp.sum(valid))
    metrics = {"loss": loss}
    metrics.update(_clip_metrics(s, adv, valid, clip_low, clip_high))
    metrics.update(_ratio_metrics(s, log_s, valid, prefix="seq_ratio"))
    metrics["approx_kl"] = masked_mean(sg(jnp.exp(log_ratio)) - 1.0 - sg(log_ratio), mask)
    return loss, metrics


def cispo_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float | None,
    clip_high: float,
    aggregation: str = "token_mean",
    max_len: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """CISPO (MiniMax-M1, 2025): clip the importance weight, stop its gradient, keep every token's.

    Per-token objective ``sg(clip(r_t, 1 - clip_low, 1 + clip_high)) * A_t * logp_t`` with
    ``r_t = exp(logp_t - sg(old_logp_t))``; ``clip_low=None`` means no lower bound (the paper's
    setting). Unlike PPO, a token whose weight is clipped still gets the gradient
    ``w A grad(logp)``: clipping bounds its size instead of dropping it. The loss *value* is a
    surrogate (it scales with ``logp``); only its gradient is meaningful.

    Args:
        logp, old_logp, advantages, mask, aggregation, max_len: as :func:`ppo_loss`.
        clip_low: lower clip epsilon, or None.
        clip_high: upper clip epsilon (required).

    Returns:
        ``(loss, metrics)``: ``loss``, ``clip_fraction`` (weights changed by clipping; + ``/high``,
        ``/low``), ``weight/mean``, ``ratio/mean``, ``ratio/max``, ``approx_kl``.
    """
    check_clip(clip_low, clip_high)
    logp, old_logp = _token_inputs(logp=logp, old_logp=old_logp)
    mask = _as_mask("mask", mask, logp)
    adv = _token_advantages(advantages, logp.shape)
    log_ratio = _log_ratio(logp, old_logp, mask)
    ratio = jnp.exp(log_ratio)
    low = None if clip_low is None else 1.0 - clip_low
    weight = sg(jnp.clip(ratio, low, 1.0 + clip_high))
    obj = weight * adv * jnp.where(mask != 0, logp, 0.0)
    loss = -aggregate(obj, mask, aggregation, max_len=max_len)
    hi = ratio > 1.0 + clip_high
    lo = jnp.zeros_like(hi) if low is None else ratio < low
    metrics = {
        "loss": loss,
        "clip_fraction": masked_mean((hi | lo).astype(ratio.dtype), mask),
        "clip_fraction/high": masked_mean(hi.astype(ratio.dtype), mask),
        "clip_fraction/low": masked_mean(lo.astype(ratio.dtype), mask),
        "weight/mean": masked_mean(weight, mask),
    }
    metrics.update(_ratio_metrics(ratio, log_ratio, mask))
    return loss, metrics
