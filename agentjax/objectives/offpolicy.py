"""Off-policy losses that *reject* instead of reweighting: MIS-PO and HisPO.

Both turn ratios into binary accept/reject decisions at token and sequence level and train only on
what was accepted; both report what they rejected, by reason, as token fractions of the loss mask
(``masked/<reason>``: the share of masked-in tokens that the test rejects, tests may overlap;
``masked/any``: rejected by at least one), plus ``rejected_sequences`` (share of valid sequences
removed by a sequence-level test).

Choices shared by both where the papers are not explicit:

* Ratios are computed on masked-in tokens only; a sequence-level ratio is the geometric mean
  ``exp(masked mean of log-ratios)`` over the sequence's masked-in tokens (length-invariant).
* Bounds are ``(low, high)`` pairs on the ratio, inclusive, compared in log space; ``None``
  disables a test. They are keyword-only without defaults: no silent choice of acceptance region.
* Rejected tokens stay in the loss normaliser (their per-token term is zero), as in IcePop: a batch
  that loses half its tokens takes a smaller step, and a few surviving tokens never get the weight
  of a whole batch. Pass ``mask * accept`` to :func:`aggregate` yourself for the other choice.
* Accept/reject decisions use stop-gradient values; they are never differentiated.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from agentjax.objectives.core import (
    Array,
    _as_mask,
    _check_bounds,
    _in_log_bounds,
    _safe_divide,
    _token_advantages,
    _token_inputs,
    _valid_rows,
    aggregate,
    check_clip,
    masked_mean,
)

sg = jax.lax.stop_gradient


def _accept(log_ratio: Array, mask: Array, token_bounds: Any, seq_bounds: Any) -> tuple[Array, Array]:
    """Token-level and sequence-level (broadcast to ``[B, T]``) acceptance as float arrays."""
    tok = _in_log_bounds(log_ratio, token_bounds)
    seq = _in_log_bounds(masked_mean(log_ratio, mask, axis=-1), seq_bounds)
    return tok.astype(mask.dtype), jnp.broadcast_to(seq[:, None], mask.shape).astype(mask.dtype)


def _rejected(keep: Array, mask: Array) -> Array:
    return masked_mean(1.0 - keep, mask)


def _rejected_sequences(seq_keeps: list[Array], mask: Array) -> Array:
    valid = _valid_rows(mask)
    kept = jnp.prod(jnp.stack([k[:, 0] for k in seq_keeps]), axis=0)
    return _safe_divide(jnp.sum(valid * (1.0 - kept)), jnp.sum(valid))


def mis_po_loss(
    logp: Any,
    logp_behavior: Any,
    advantages: Any,
    mask: Any,
    *,
    token_bounds: tuple[float, float] | None,
    seq_bounds: tuple[float, float] | None,
    aggregation: str = "token_mean",
    max_len: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """MIS-PO (Step 3.5 Flash, s5.2.1): Metropolis-independence-sampling-style binary filtering.

    Instead of weighting each sample by a continuous importance ratio, MIS-PO accepts or rejects
    it, like the accept step of a Metropolis independence sampler whose proposal is the behaviour
    policy, and trains on accepted samples as if they were on-policy. With
    ``rho_t = exp(sg(logp_t) - logp_behavior_t)``:

    * token test: ``low <= rho_t <= high`` (``token_bounds``);
    * trajectory test: ``low <= exp(mean_t log rho_t) <= high`` over the masked-in tokens
      (``seq_bounds``; the geometric mean, so long trajectories are not rejected for length);
    * accepted tokens: the on-policy policy gradient, per-token objective
      ``exp(logp_t - sg(logp_t)) * A_t`` (value ``A_t``, gradient ``A_t grad logp_t``): no IS
      weight.

    ``loss = -aggregate(accept * obj, mask)``. ``logp`` is the learner's log-prob (the training
    engine); ``logp_behavior`` is what the sampler recorded. With one optimiser step per batch,
    ``logp`` is the training engine at the sampling version and ``rho`` is the paper's
    train/behaviour ratio. With several steps on one batch the test also rejects tokens that the
    updates moved out of bounds (a hard trust region); :func:`hispo_loss` separates the two causes.

    Args:
        logp: ``[B, T]`` learner log-probs of the sampled tokens (differentiated).
        logp_behavior: ``[B, T]`` the sampler's log-probs.
        advantages: ``[B]`` or ``[B, T]``.
        mask: ``[B, T]`` loss mask.
        token_bounds: ``(low, high)`` on ``rho_t``, or None.
        seq_bounds: ``(low, high)`` on the geometric-mean sequence ratio, or None.
        aggregation, max_len: see :func:`aggregate`.

    Returns:
        ``(loss, metrics)``: ``loss``, ``masked/token_ratio``, ``masked/seq_ratio``,
        ``masked/any``, ``accepted_fraction``, ``rejected_sequences``, ``ratio/mean``.
    """
    token_bounds = _check_bounds("token_bounds", token_bounds)
    seq_bounds = _check_bounds("seq_bounds", seq_bounds)
    logp, behavior = _token_inputs(logp=logp, logp_behavior=logp_behavior)
    mask = _as_mask("mask", mask, logp)
    adv = _token_advantages(advantages, logp.shape)
    log_rho = jnp.where(mask != 0, sg(logp) - sg(behavior), 0.0)
    tok, seq = _accept(log_rho, mask, token_bounds, seq_bounds)
    accept = tok * seq
    lp = jnp.where(mask != 0, logp, 0.0)  # padding may hold -inf: keep it off the gradient path
    obj = accept * jnp.exp(lp - sg(lp)) * adv
    loss = -aggregate(jnp.where(mask != 0, obj, 0.0), mask, aggregation, max_len=max_len)
    metrics = {
        "loss": loss,
        "masked/token_ratio": _rejected(tok, mask),
        "masked/seq_ratio": _rejected(seq, mask),
        "masked/any": _rejected(accept, mask),
        "accepted_fraction": masked_mean(accept, mask),
        "rejected_sequences": _rejected_sequences([seq], mask),
        "ratio/mean": masked_mean(jnp.exp(log_rho), mask),
    }
    return loss, metrics


def hispo_loss(
    logp_current: Any,
    logp_train_at_behavior_version: Any,
    logp_infer: Any,
    advantages: Any,
    mask: Any,
    *,
    mismatch_token_bounds: tuple[float, float] | None,
    mismatch_seq_bounds: tuple[float, float] | None,
    staleness_token_bounds: tuple[float, float] | None,
    staleness_seq_bounds: tuple[float, float] | None,
    clip_low: float,
    clip_high: float,
    aggregation: str = "token_mean",
    max_len: int | None = None,
) -> tuple[Array, dict[str, Array]]:
    """HisPO (LongCat-Flash-Prover, s3.3): hierarchical masks for mismatch and staleness, plus clip.

    The full ratio ``pi_train,v+k / mu_infer,v`` is split (see :func:`decompose_ratio`) into the
    *mismatch* ratio ``m_t = exp(train_v_t - infer_t)`` (same parameters, different engines) and the
    *update* (staleness) ratio ``u_t = exp(logp_current_t - sg(train_v_t))`` (parameter updates
    since version v). Each gets its own token-level test and its own sequence-level test
    (geometric mean over the sequence's masked-in tokens), four gradient masks in all; the accepted
    tokens are trained with PPO clipping on the update ratio:
    ``obj_t = accept_t * min(u_t A_t, clip(u_t, 1 - clip_low, 1 + clip_high) A_t)``,
    ``loss = -aggregate(obj, mask)``.

    Choices where the paper is not explicit: the mismatch ratio only masks (it is not used as an
    importance weight: accepted tokens have ``m_t`` within its bounds, near 1); the staleness
    tests use ``sg(u_t)``, so on the first optimiser step after a fresh recompute (``u = 1``)
    they pass and later steps on the same batch are masked as the policy moves.

    Args:
        logp_current: ``[B, T]`` learner log-probs at the current version (differentiated).
        logp_train_at_behavior_version: ``[B, T]`` learner recompute at the behaviour version.
        logp_infer: ``[B, T]`` the sampler's recorded log-probs.
        advantages: ``[B]`` or ``[B, T]``.
        mask: ``[B, T]`` loss mask.
        mismatch_token_bounds, mismatch_seq_bounds: ``(low, high)`` on ``m_t`` / its sequence
            geometric mean, or None.
        staleness_token_bounds, staleness_seq_bounds: ``(low, high)`` on ``u_t`` / its sequence
            geometric mean, or None.
        clip_low, clip_high: PPO clip epsilons on ``u_t``.
        aggregation, max_len: see :func:`aggregate`.

    Returns:
        ``(loss, metrics)``: ``loss``, ``masked/token_mismatch``, ``masked/seq_mismatch``,
        ``masked/token_staleness``, ``masked/seq_staleness``, ``masked/any``,
        ``accepted_fraction``, ``rejected_sequences``, ``clip_fraction``, ``ratio/update_mean``,
        ``ratio/mismatch_mean``.
    """
    check_clip(clip_low, clip_high)
    bounds = {
        name: _check_bounds(name, b)
        for name, b in (
            ("mismatch_token_bounds", mismatch_token_bounds),
            ("mismatch_seq_bounds", mismatch_seq_bounds),
            ("staleness_token_bounds", staleness_token_bounds),
            ("staleness_seq_bounds", staleness_seq_bounds),
        )
    }
    cur, train_v, infer = _token_inputs(
        logp_current=logp_current,
        logp_train_at_behavior_version=logp_train_at_behavior_version,
        logp_infer=logp_infer,
    )
    mask = _as_mask("mask", mask, cur)
    adv = _token_advantages(advantages, cur.shape)
    log_update = jnp.where(mask != 0, cur - sg(train_v), 0.0)
    log_mismatch = jnp.where(mask != 0, sg(train_v) - sg(infer), 0.0)
    tok_mm, seq_mm = _accept(
        log_mismatch, mask, bounds["mismatch_token_bounds"], bounds["mismatch_seq_bounds"]
    )
    tok_st, seq_st = _accept(
        sg(log_update), mask, bounds["staleness_token_bounds"], bounds["staleness_seq_bounds"]
    )
    accept = tok_mm * seq_mm * tok_st * seq_st
    update = jnp.exp(log_update)
    obj = jnp.minimum(update * adv, jnp.clip(update, 1.0 - clip_low, 1.0 + clip_high) * adv)
    obj = jnp.where(accept * mask != 0, obj, 0.0)
    loss = -aggregate(obj, mask, aggregation, max_len=max_len)
    clipped = ((adv > 0) & (update > 1.0 + clip_high)) | ((adv < 0) & (update < 1.0 - clip_low))
    metrics = {
        "loss": loss,
        "masked/token_mismatch": _rejected(tok_mm, mask),
        "masked/seq_mismatch": _rejected(seq_mm, mask),
        "masked/token_staleness": _rejected(tok_st, mask),
        "masked/seq_staleness": _rejected(seq_st, mask),
        "masked/any": _rejected(accept, mask),
        "accepted_fraction": masked_mean(accept, mask),
        "rejected_sequences": _rejected_sequences([seq_mm, seq_st], mask),
        "clip_fraction": masked_mean(clipped.astype(cur.dtype), mask * accept),
        "ratio/update_mean": masked_mean(sg(update), mask),
        "ratio/mismatch_mean": masked_mean(jnp.exp(log_mismatch), mask),
    }
    return loss, metrics
