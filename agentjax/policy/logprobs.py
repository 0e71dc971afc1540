"""The one float32 log-prob function, shared by the sampler and the learner's scorer.

The sampler (``agentjax.sampling.sampler``) and the learner's scorer (``agentjax.policy.scoring``)
both call :func:`token_logprobs_from_logits`, with the exact-summation kernels in exact mode
(``policy/kernels.py``; or over fixed tiles of rows with the tiled reference kernels), so the
two sides compute each token's log-prob with the same kernel:

    logp_t     = log_softmax(transform(z_t))[y_t]     (the behaviour distribution mu)
    logp_raw_t = log_softmax(z_t)[y_t]                 (temperature 1, no truncation)

``transform`` is any logits -> logits callable (``agentjax.sampling.transforms``); it lives here,
below both callers, so that ``policy/`` never imports ``sampling/``. In exact mode it is called
as ``transform(z, exact=kind)``, ``kind`` the model's batch-invariant kernels (a non-empty
string: the built-in transforms then take any sum with those kernels).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentjax.policy import kernels
from agentjax.policy.layers import rowwise


def _apply(transform, z, exact):
    return transform(z, exact=exact) if exact else transform(z)


def _rows_logprobs(transform, logits, targets, exact=""):
    z = logits.astype(jnp.float32)
    if exact:
        log_softmax = lambda a: kernels.log_softmax(a, exact)
    else:
        log_softmax = lambda a: jax.nn.log_softmax(a, axis=-1)
    raw = log_softmax(z)
    lp = raw if transform is None else log_softmax(_apply(transform, z, exact))
    pick = lambda a: jnp.take_along_axis(a, targets[:, None], axis=-1)[:, 0]
    return pick(lp), pick(raw)


def token_logprobs_from_logits(
    logits: jax.Array, targets: jax.Array, transform=None, *, tile: int = 0, exact: str = ""
) -> tuple[jax.Array, jax.Array]:
    """Log-probs of ``targets`` under the transformed and the raw distribution, in float32.

    Args:
      logits: ``[..., V]`` logits (any float dtype; computed in float32).
      targets: ``[...]`` token ids.
      transform: a transform (None = temperature 1, no truncation).
      tile: the model's ``row_tile``; > 0 runs the rows in fixed tiles (batch-invariant).
      exact: the model's ``invariant``: which batch-invariant kernels (``""``: none).
    Returns:
      ``(logp, logp_raw)``, each float32 of shape ``targets.shape``.
    """
    lead = targets.shape
    v = logits.shape[-1]
    fn = lambda z, y: _rows_logprobs(transform, z, y, exact)
    lp, raw = rowwise(fn, tile, logits.reshape(-1, v), targets.reshape(-1).astype(jnp.int32))
    return lp.reshape(lead), raw.reshape(lead)


def sampling_logits(logits: jax.Array, transform=None, *, tile: int = 0, exact: str = "") -> jax.Array:
    """float32 logits of the distribution sampled from (``transform(z)``), computed with the
    same kernels as the log-probs."""
    v = logits.shape[-1]
    fn = lambda z: (
        z.astype(jnp.float32) if transform is None else _apply(transform, z.astype(jnp.float32), exact)
    )
    return rowwise(fn, tile, logits.reshape(-1, v)).reshape(logits.shape)
