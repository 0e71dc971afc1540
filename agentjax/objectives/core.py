"""Shared pieces of every objective: input checks, masked means, loss aggregation, filter reports.

Conventions used across ``agentjax.objectives``:

* token-level arrays are ``[B, T]`` (batch, tokens); sequence-level arrays are ``[B]``;
* ``mask`` is a float array (bool/int are accepted and cast), 1 on action tokens that are trained
  on and 0 on padding, prompt and observation tokens;
* a *valid* sequence is one with at least one masked-in token: sequence-level means run over valid
  sequences only, so padding rows (whole row masked out) never change a result;
* everything is computed in at least float32.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

Array = jnp.ndarray

AGGREGATION_MODES = (
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
)


# ----------------------------------------------------------------------------- input checks


def _as_float(name: str, x: Any) -> Array:
    """Converts ``x`` to a jax array with a floating dtype of at least 32 bits.

    Raises:
        ValueError: if ``x`` is not a floating array (log-probs, advantages and rewards must be).
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}")
    if jnp.finfo(x.dtype).bits < 32:
        x = x.astype(jnp.float32)
    return x


def _as_mask(name: str, mask: Any, like: Array) -> Array:
    """Casts a bool/int/float mask to ``like``'s float dtype; checks it has ``like``'s shape."""
    mask = jnp.asarray(mask)
    if jnp.issubdtype(mask.dtype, jnp.complexfloating):
        raise ValueError(f"{name} must be a real (float/bool/int) mask, got {mask.dtype}")
    _check_shape(name, mask, like.shape)
    return mask.astype(like.dtype)


def _check_ndim(name: str, x: Array, ndim: int, expected: str) -> None:
    """Raises ValueError naming ``name`` unless ``x`` has ``ndim`` dimensions."""
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {expected}, got shape {tuple(x.shape)}")


def _check_shape(name: str, x: Array, shape: tuple[int, ...], expected: str | None = None) -> None:
    """Raises ValueError naming ``name`` unless ``x.shape == shape``."""
    if tuple(x.shape) != tuple(shape):
        want = expected or str(tuple(shape))
        raise ValueError(f"{name} must have shape {want}, got shape {tuple(x.shape)}")


def _token_inputs(**arrays: Any) -> list[Array]:
    """Checks that every named array is a floating ``[B, T]`` array of the first one's shape."""
    out = []
    ref_shape = None
    for name, x in arrays.items():
        x = _as_float(name, x)
        if ref_shape is None:
            _check_ndim(name, x, 2, "[B, T]")
            ref_shape = x.shape
        else:
            _check_shape(name, x, ref_shape, f"[B, T] = {tuple(ref_shape)}")
        out.append(x)
    return out


def _token_advantages(advantages: Any, shape: tuple[int, int]) -> Array:
    """Returns advantages as ``[B, T]``: accepts ``[B]`` (broadcast over tokens) or ``[B, T]``."""
    adv = _as_float("advantages", advantages)
    if adv.ndim == 1 and adv.shape[0] == shape[0]:
        return jnp.broadcast_to(adv[:, None], shape)
    if tuple(adv.shape) == tuple(shape):
        return adv
    raise ValueError(
        f"advantages must have shape [B] = ({shape[0]},) or [B, T] = {tuple(shape)}, "
        f"got shape {tuple(adv.shape)}"
    )


def check_clip(clip_low: Any, clip_high: Any, *, prefix: str = "") -> None:
    """Clip epsilons of the ratio interval ``[1 - clip_low, 1 + clip_high]``: ``0 <= clip_low < 1``
    (``None``: no lower bound, CISPO) and ``clip_high >= 0``, finite. Traced values are not checked."""

    def bad(x, ok):
        return isinstance(x, int | float) and not isinstance(x, bool) and not ok(x)

    if bad(clip_low, lambda x: 0 <= x < 1):
        raise ValueError(
            f"{prefix}clip_low={clip_low} is invalid; must be in [0, 1) (the lower "
            "ratio bound 1 - clip_low must stay in (0, 1])"
        )
    if bad(clip_high, lambda x: 0 <= x < float("inf")):
        raise ValueError(f"{prefix}clip_high={clip_high} is invalid; must be a finite number >= 0")


def _check_bounds(name: str, bounds: Any) -> tuple[float, float] | None:
    """Validates an optional ``(low, high)`` acceptance interval on a ratio."""
    if bounds is None:
        return None
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be None or a (low, high) pair, got {bounds!r}") from None
    if isinstance(low, int | float) and isinstance(high, int | float):
        if not 0 <= low <= high:
            raise ValueError(f"{name} must satisfy 0 <= low <= high, got {bounds!r}")
    return low, high


def _in_log_bounds(log_ratio: Array, bounds: tuple[float, float] | None) -> Array:
    """Bool array: ``low <= exp(log_ratio) <= high``, compared in log space (inclusive)."""
    if bounds is None:
        return jnp.ones(log_ratio.shape, bool)
    low, high = bounds
    with_low = log_ratio >= jnp.log(jnp.asarray(low, log_ratio.dtype))
    return with_low & (log_ratio <= jnp.log(jnp.asarray(high, log_ratio.dtype)))


# ----------------------------------------------------------------------------- means


def _safe_divide(num: Array, den: Array) -> Array:
    """``num / den`` where ``den > 0``, else 0 (an empty mask contributes nothing, never NaN)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def masked_mean(x: Any, mask: Any, axis: int | tuple[int, ...] | None = None) -> Array:
    """Mean of ``x`` over the entries where ``mask`` is non-zero (``mask`` acts as a weight).

    ``sum(where(mask, x, 0) * mask, axis) / sum(mask, axis)``; 0 where the mask is empty. Masked-out
    entries may hold anything, including inf/NaN: they never reach the result or its gradient.

    Args:
        x: values, any shape.
        mask: weights of ``x``'s shape (1 = include, 0 = exclude).
        axis: axes to reduce; None reduces over all.

    Returns:
        The masked mean, with ``axis`` reduced.
    """
    x = _as_float("x", x)
    mask = _as_mask("mask", mask, x)
    total = jnp.sum(jnp.where(mask != 0, x, 0.0) * mask, axis=axis)
    return _safe_divide(total, jnp.sum(mask, axis=axis))


def _valid_rows(mask: Array) -> Array:
    """Float ``[B]``: 1 for sequences with at least one masked-in token."""
    return (jnp.sum(mask, axis=-1) > 0).astype(mask.dtype)


def aggregate(per_token: Any, mask: Any, mode: str, *, max_len: int | None = None) -> Array:
    """Reduces a per-token ``[B, T]`` quantity to a scalar, the way a loss is normalised.

    Modes (``m`` = mask, ``V`` = valid sequences, those with ``sum_t m_it > 0``):

    * ``"token_mean"``: ``sum_it m_it x_it / sum_it m_it`` (DAPO, CISPO);
    * ``"seq_mean_token_mean"``: ``mean_{i in V} (sum_t m_it x_it / sum_t m_it)`` (GRPO paper);
    * ``"seq_mean_token_sum"``: ``mean_{i in V} sum_t m_it x_it``;
    * ``"seq_mean_token_sum_norm"``: ``mean_{i in V} sum_t m_it x_it / max_len`` (Dr.GRPO, Liu et
      al. 2025: a constant instead of each sequence's own length removes the length bias).

    Args:
        per_token: ``[B, T]`` values.
        mask: ``[B, T]`` weights.
        mode: one of the modes above.
        max_len: the constant of ``"seq_mean_token_sum_norm"`` (e.g. the generation budget). It is
            required there, because defaulting to the padded ``T`` would make the loss depend on
            padding; it is ignored by the other modes.

    Returns:
        A scalar.

    Raises:
        ValueError: unknown ``mode``, missing ``max_len``, or bad shapes.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; valid modes: {AGGREGATION_MODES}")
    x = _as_float("per_token", per_token)
    _check_ndim("per_token", x, 2, "[B, T]")
    mask = _as_mask("mask", mask, x)
    if mode == "token_mean":
        return masked_mean(x, mask)
    valid = _valid_rows(mask)
    if mode == "seq_mean_token_mean":
        per_seq = masked_mean(x, mask, axis=-1)
    else:
        per_seq = jnp.sum(jnp.where(mask != 0, x, 0.0) * mask, axis=-1)
        if mode == "seq_mean_token_sum_norm":
            if max_len is None:
                raise ValueError(
                    "aggregation 'seq_mean_token_sum_norm' needs max_len (Dr.GRPO's constant, "
                    "e.g. the generation budget); the padded length would make results depend "
                    "on padding"
                )
            if max_len <= 0:
                raise ValueError(f"max_len must be positive, got {max_len}")
            per_seq = per_seq / max_len
    return _safe_divide(jnp.sum(per_seq * valid), jnp.sum(valid))


# ----------------------------------------------------------------------------- reports


def masked_fractions(mask: Any, **keeps: Any) -> dict[str, Array]:
    """What a set of filters removed, as metrics: ``masked/<reason>`` and ``masked/any``.

    ``masked/<reason>`` is the fraction of masked-in tokens that filter ``<reason>`` rejects
    (filters may overlap); ``masked/any`` is the fraction rejected by at least one;
    ``kept_fraction`` is ``1 - masked/any`` over the valid tokens. Example::

        keep = icepop_mask(train_logp, infer_logp, low=0.5, high=2.0)
        metrics = masked_fractions(mask, icepop=keep)   # {"masked/icepop": ..., ...}

    Args:
        mask: ``[B, T]`` (or any shape) loss mask before filtering.
        **keeps: keep-masks of ``mask``'s shape, 1 = kept, 0 = removed, one per reason.

    Returns:
        A dict of scalar arrays.
    """
    mask = jnp.asarray(mask).astype(jnp.float32)
    kept_all = jnp.ones(mask.shape, jnp.float32)
    out = {}
    for reason, keep in keeps.items():
        keep = _as_mask(f"keeps[{reason!r}]", keep, mask)
        kept_all = kept_all * (keep != 0)
        out[f"masked/{reason}"] = masked_mean((keep == 0).astype(jnp.float32), mask)
    out["masked/any"] = masked_mean(1.0 - kept_all, mask)
    out["kept_fraction"] = masked_mean(kept_all, mask)
    return out
