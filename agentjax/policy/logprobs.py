"""The one float32 log-prob function, shared by the sampler and the learner's scorer.

The sampler (``agentjax.sampling.sampler``) and the learner's scorer (``agentjax.policy.scoring``)
both call :func:`token_logprobs_from_logits`, over fixed tiles of rows in exact mode, so the two
sides compute each token's log-prob with the same kernel:

    logp_t     = log_softmax(transform(z_t))[y_t]     (the behaviour distribution mu)
    logp_raw_t = log_softmax(z_t)[y_t]                 (temperature 1, no truncation)

``transform`` is any logits -> logits callable (``agentjax.sampling.transforms``); it lives here,
below both callers, so that ``policy/`` never imports ``sampling/``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentjax.policy.layers import rowwise


def _rows_logprobs(transform, logits, targets):
    z = logits.astype(jnp.float32)
    raw = jax.nn.log_softmax(z, axis=-1)
    lp = raw if transform is None else jax.nn.log_softmax(transform(z), axis=-1)
    pick = lambda a: jnp.take_along_axis(a, targets[:, None], axis=-1)[:, 0]
    return pick(lp), pick(raw)


def token_logprobs_from_logits(logits: jax.Array, targets: jax.Array, transform=None, *,
                               tile: int = 0) -> tuple[jax.Array, jax.Array]:
    """Log-probs of ``targets`` under the transformed and the raw distribution, in float32.

    Args:
      logits: ``[..., V]`` logits (any float dtype; computed in float32).
      targets: ``[...]`` token ids.
      transform: a transform (None = temperature 1, no truncation).
      tile: the model's ``exact_tile``; > 0 runs the rows in fixed tiles (batch-invariant).
    Returns:
      ``(logp, logp_raw)``, each float32 of shape ``targets.shape``.
    """
    lead = targets.shape
    v = logits.shape[-1]
    fn = lambda z, y: _rows_logprobs(transform, z, y)
    lp, raw = rowwise(fn, tile, logits.reshape(-1, v), targets.reshape(-1).astype(jnp.int32))
    return lp.reshape(lead), raw.reshape(lead)


def sampling_logits(logits: jax.Array, transform=None, *, tile: int = 0) -> jax.Array:
    """float32 logits of the distribution sampled from (``transform(z)``), row-tiled like the
    log-probs."""
    v = logits.shape[-1]
    fn = lambda z: z.astype(jnp.float32) if transform is None else transform(z.astype(jnp.float32))
    return rowwise(fn, tile, logits.reshape(-1, v)).reshape(logits.shape)
