"""Importance-sampling corrections, the HisPO ratio decomposition, ESS, KL estimators, label noise.

Importance sampling: ``E_{a~pi}[f(a)] = E_{a~mu}[(pi(a)/mu(a)) f(a)]``, which needs the support of
pi inside that of mu. Products of per-token ratios explode with length (``1.02^100 ~ 7.24``,
``1.02^500 ~ 19956``), hence truncation, masking, and the effective sample size to see the cost
(PROBLEMS.md s3). Weights here carry gradients w.r.t. their target log-probs: apply
``jax.lax.stop_gradient`` where your formula has ``sg``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from agentjax.objectives.core import (
    Array,
    _as_float,
    _as_mask,
    _token_inputs,
    masked_mean,
)

IS_LEVELS = ("token", "sequence", "geometric")
KL_KINDS = ("k1", "k2", "k3")


def importance_weights(logp_target: Any, logp_behavior: Any, mask: Any, *, level: str) -> Array:
    """Importance weights ``pi_target / mu_behavior`` of the sampled tokens, per token or sequence.

    With ``d_it = m_it (logp_target_it - logp_behavior_it)`` (0 on masked-out tokens):

    * ``level="token"``: ``w_it = exp(d_it)``, ``[B, T]`` (1 on masked-out tokens);
    * ``level="sequence"``: ``w_i = exp(sum_t d_it)``, ``[B]``: the full-trajectory weight
      ``prod_t pi/mu``, summed in log space so it only overflows where the weight itself does;
    * ``level="geometric"``: ``w_i = exp(sum_t d_it / sum_t m_it)``, ``[B]``: the length-normalised
      (per-token geometric mean) weight of GSPO / geometric sequence masking; 1 for empty rows.

    Args:
        logp_target: ``[B, T]`` log-probs under the target (training) policy.
        logp_behavior: ``[B, T]`` log-probs under the policy that sampled the tokens.
        mask: ``[B, T]`` loss mask.
        level: ``"token"``, ``"sequence"`` or ``"geometric"``.

    Returns:
        ``[B, T]`` or ``[B]`` weights.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"unknown level {level!r}; valid: {IS_LEVELS}")
    target, behavior = _token_inputs(logp_target=logp_target, logp_behavior=logp_behavior)
    mask = _as_mask("mask", mask, target)
    d = jnp.where(mask != 0, target - behavior, 0.0)
    if level == "token":
        return jnp.exp(d)
    if level == "sequence":
        return jnp.exp(jnp.sum(d * mask, axis=-1))
    return jnp.exp(masked_mean(d, mask, axis=-1))


def truncate(w: Any, cap: Any) -> Array:
    """Truncated importance sampling: ``min(w, cap)`` (trades bias for bounded variance)."""
    w = _as_float("w", w)
    if isinstance(cap, int | float) and cap <= 0:
        raise ValueError(f"cap must be positive, got {cap}")
    return jnp.minimum(w, cap)


def decompose_ratio(
    logp_current: Any, logp_train_at_behavior_version: Any, logp_infer: Any
) -> tuple[Array, Array, Array]:
    """HisPO's decomposition (LongCat-Flash-Prover, s3.3) of the full off-policy ratio.

    ``pi_train,v+k / mu_infer,v = [pi_train,v+k / pi_train,v] * [pi_train,v / mu_infer,v]``:
    the *update* (staleness) ratio, from parameter updates since version v, times the *mismatch*
    ratio, from the training and inference engines disagreeing at the same version v.

    Args:
        logp_current: log-probs under the learner's current parameters (version v + k).
        logp_train_at_behavior_version: the learner's recompute with the behaviour version's
            parameters (version v).
        logp_infer: the sampler's recorded log-probs (version v).

    Returns:
        ``(update_ratio, mismatch_ratio, total_ratio)``, each of the inputs' (common) shape, with
        ``total_ratio = update_ratio * mismatch_ratio``.
    """
    cur = _as_float("logp_current", logp_current)
    train_v = _as_float("logp_train_at_behavior_version", logp_train_at_behavior_version)
    infer = _as_float("logp_infer", logp_infer)
    for name, x in (("logp_train_at_behavior_version", train_v), ("logp_infer", infer)):
        if x.shape != cur.shape:
            raise ValueError(
                f"{name} must have the shape of logp_current {tuple(cur.shape)}, got shape {tuple(x.shape)}"
            )
    update = jnp.exp(cur - train_v)
    mismatch = jnp.exp(train_v - infer)
    return update, mismatch, update * mismatch


def ess(weights: Any, mask: Any | None = None) -> Array:
    """Effective sample size ``(sum_i w_i)^2 / sum_i w_i^2`` over the masked-in entries.

    Equals N for N equal weights and tends to 1 when one weight dominates; 0 for an empty mask.
    Divide by the number of entries for the normalised ESS in ``(0, 1]``.

    Args:
        weights: importance weights, any shape (reduced over all entries).
        mask: optional weights' shape mask.

    Returns:
        A scalar.
    """
    w = _as_float("weights", weights)
    m = jnp.ones(w.shape, w.dtype) if mask is None else _as_mask("mask", mask, w)
    w = jnp.where(m != 0, w, 0.0)
    sq = jnp.sum(w * w)
    ok = sq > 0
    return jnp.where(ok, jnp.sum(w) ** 2 / jnp.where(ok, sq, 1.0), 0.0)


def kl_penalty(logp: Any, ref_logp: Any, kind: str) -> Array:
    """Per-token estimators of ``KL(pi || pi_ref)`` from tokens sampled from pi (Schulman, 2020).

    With ``lr = logp - ref_logp``: ``"k1"`` = ``lr`` (unbiased, high variance, can be negative);
    ``"k2"`` = ``lr^2 / 2`` (biased, low variance); ``"k3"`` = ``exp(-lr) - 1 + lr`` (unbiased,
    always >= 0; GRPO's choice). No stop-gradient is applied to either argument.

    Args:
        logp: log-probs of the sampled tokens under pi, any shape.
        ref_logp: log-probs under the reference, same shape.
        kind: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        Per-token estimates of ``logp``'s shape.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; valid: {KL_KINDS}")
    logp = _as_float("logp", logp)
    ref = _as_float("ref_logp", ref_logp)
    if ref.shape != logp.shape:
        raise ValueError(f"ref_logp must have the shape of logp {tuple(logp.shape)}, got {tuple(ref.shape)}")
    lr = logp - ref
    if kind == "k1":
        return lr
    if kind == "k2":
        return 0.5 * lr * lr
    return jnp.expm1(-lr) + lr


def label_noise_success(p: Any, eta: Any) -> Array:
    """Observed success rate under symmetric label noise: ``eta + (1 - 2 eta) p``.

    Each verdict is flipped with probability ``eta``. The gap between two policies shrinks by the
    factor ``1 - 2 eta`` (to 60% at ``eta = 0.2``), PROBLEMS.md s8.
    """
    p = jnp.asarray(p, jnp.float32)
    eta = jnp.asarray(eta, jnp.float32)
    return eta + (1.0 - 2.0 * eta) * p
