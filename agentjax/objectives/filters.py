"""Token filters for the train/inference mismatch: IcePop (ratio band) and KPop (binary KL).

A filter returns a keep-mask (1 = train on the token, 0 = drop it); multiply it into the loss mask.
Report what it removed with :func:`agentjax.objectives.masked_fractions`::

    keep = kpop_mask(train_logp, infer_logp, threshold=0.01)
    loss, metrics = cispo_loss(logp, old_logp, adv, mask * keep, clip_low=None, clip_high=0.28)
    metrics.update(masked_fractions(mask, kpop=keep))

Filters take no gradient: they compare numbers, they never sit on a differentiated path.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy

from agentjax.objectives.core import Array, _as_float, _in_log_bounds

sg = jax.lax.stop_gradient


def _pair(train_logp: Any, infer_logp: Any) -> tuple[Array, Array]:
    train = _as_float("train_logp", train_logp)
    infer = _as_float("infer_logp", infer_logp)
    if infer.shape != train.shape:
        raise ValueError(
            f"infer_logp must have the shape of train_logp {tuple(train.shape)}, "
            f"got shape {tuple(infer.shape)}"
        )
    return sg(train), sg(infer)


def icepop_mask(train_logp: Any, infer_logp: Any, *, low: float, high: float) -> Array:
    """IcePop (Ling team, 2025): keep tokens whose train/infer probability ratio is in a band.

    ``keep_t = 1[low <= exp(train_logp_t - infer_logp_t) <= high]`` (bounds inclusive, compared in
    log space). Tokens outside the band are dropped from the gradient entirely.

    Args:
        train_logp: log-probs of the sampled tokens from the training engine, any shape.
        infer_logp: the sampler's log-probs of the same tokens, same shape.
        low: lower bound on the ratio (e.g. 0.5).
        high: upper bound on the ratio (e.g. 2.0).

    Returns:
        A float32 keep-mask of the inputs' shape.
    """
    if isinstance(low, int | float) and isinstance(high, int | float) and not 0 <= low <= high:
        raise ValueError(f"need 0 <= low <= high, got low={low}, high={high}")
    train, infer = _pair(train_logp, infer_logp)
    return _in_log_bounds(train - infer, (low, high)).astype(jnp.float32)


def binary_kl(p: Any, q: Any) -> Array:
    """KL divergence of two Bernoulli distributions: ``p log(p/q) + (1-p) log((1-p)/(1-q))``.

    Numerically safe at 0 and 1: ``0 log 0 = 0`` (so ``binary_kl(0, 0) = binary_kl(1, 1) = 0`` and
    ``binary_kl(0, q) = -log(1 - q)``), never NaN; the result is ``+inf`` exactly where the true KL
    is infinite (``q`` in {0, 1} and ``p != q``). Inputs are clipped to ``[0, 1]``.

    Args:
        p: probabilities, any shape.
        q: probabilities, broadcastable with ``p``.

    Returns:
        ``D_B(p || q)``, the broadcast shape.
    """
    p = jnp.clip(_as_float("p", p), 0.0, 1.0)
    q = jnp.clip(_as_float("q", q), 0.0, 1.0)
    return (xlogy(p, p) - xlogy(p, q)) + (xlogy(1.0 - p, 1.0 - p) - xlogy(1.0 - p, 1.0 - q))


def _log1mexp(logp: Array) -> Array:
    """``log(1 - exp(logp))`` for ``logp <= 0``, accurate near 0 and near -inf."""
    return jnp.where(logp > -0.6931472, jnp.log(-jnp.expm1(logp)), jnp.log1p(-jnp.exp(logp)))


def _binary_kl_from_logs(logp: Array, logq: Array) -> Array:
    """``D_B(p || q)`` from log-probabilities, without the precision loss of ``1 - exp(logp)``."""
    logp = jnp.minimum(logp, 0.0)
    logq = jnp.minimum(logq, 0.0)
    p = jnp.exp(logp)
    one_m_p = -jnp.expm1(logp)
    first = jnp.where(p > 0, p * (logp - logq), 0.0)
    second = jnp.where(one_m_p > 0, one_m_p * (_log1mexp(logp) - _log1mexp(logq)), 0.0)
    return first + second


def kpop_mask(train_logp: Any, infer_logp: Any, *, threshold: float) -> Array:
    """KPop: keep a token when the two engines' *binary* distributions agree in both KL directions.

    With ``p = exp(train_logp_t)`` and ``q = exp(infer_logp_t)`` the probabilities of the sampled
    token (the binary distribution "this token vs all others"),
    ``keep_t = 1[D_B(p || q) <= threshold and D_B(q || p) <= threshold]``. Unlike a fixed ratio
    band, the acceptance region depends on the probability: a ratio of 2 between 0.001 and 0.002
    is harmless, between 0.4 and 0.8 it is not. Computed from log-probs, so ``1 - p`` keeps its
    precision for confident tokens.

    Args:
        train_logp: log-probs of the sampled tokens from the training engine, any shape.
        infer_logp: the sampler's log-probs, same shape.
        threshold: the largest binary KL kept, in nats (>= 0).

    Returns:
        A float32 keep-mask of the inputs' shape.
    """
    if isinstance(threshold, int | float) and threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    train, infer = _pair(train_logp, infer_logp)
    forward = _binary_kl_from_logs(train, infer)
    backward = _binary_kl_from_logs(infer, train)
    return ((forward <= threshold) & (backward <= threshold)).astype(jnp.float32)
