"""Sampling transforms as small frozen dataclasses, and the one float32 log-prob function.

A transform maps float32 logits ``[N, V]`` to the logits of the distribution actually sampled
from; truncated tokens get ``-inf``. Transforms compose left to right::

    transform = compose(Temperature(0.7), TopK(20), TopP(0.95))

:func:`token_logprobs_from_logits` is the single function that turns logits into log-probs. The
sampler and the learner's scorer (``agentjax.policy.scoring``) both call it, over fixed tiles of
rows in exact mode, so the two sides compute each token's log-prob with the same kernel:

    logp_t     = log_softmax(transform(z_t))[y_t]     (the behaviour distribution mu)
    logp_raw_t = log_softmax(z_t)[y_t]                 (temperature 1, no truncation)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agentjax.policy.layers import rowwise


@dataclasses.dataclass(frozen=True)
class Greedy:
    """A point mass on the arg-max (the first one on ties): the sampled token's logp is 0."""

    def __call__(self, logits: jax.Array) -> jax.Array:
        top = jnp.argmax(logits, axis=-1)
        keep = jnp.arange(logits.shape[-1]) == top[..., None]
        return jnp.where(keep, logits, -jnp.inf)


@dataclasses.dataclass(frozen=True)
class Temperature:
    """``z / t``; t = 1 is the identity."""

    t: float = 1.0

    def __post_init__(self):
        if not self.t > 0:
            raise ValueError(f"Temperature t={self.t!r} is invalid; must be > 0 (use Greedy)")

    def __call__(self, logits: jax.Array) -> jax.Array:
        return logits if self.t == 1.0 else logits / jnp.float32(self.t)


@dataclasses.dataclass(frozen=True)
class TopK:
    """Keeps the ``k`` largest logits (every token tied with the k-th is kept too)."""

    k: int

    def __post_init__(self):
        if not (isinstance(self.k, int) and self.k > 0):
            raise ValueError(f"TopK k={self.k!r} is invalid; must be a positive integer")

    def __call__(self, logits: jax.Array) -> jax.Array:
        if self.k >= logits.shape[-1]:
            return logits
        kth = jax.lax.top_k(logits, self.k)[0][..., -1:]
        return jnp.where(logits >= kth, logits, -jnp.inf)


@dataclasses.dataclass(frozen=True)
class TopP:
    """Nucleus sampling (Holtzman et al., 2020): the smallest set of most likely tokens whose
    probability reaches ``p`` (ties with its least likely member are kept)."""

    p: float

    def __post_init__(self):
        if not 0.0 < self.p <= 1.0:
            raise ValueError(f"TopP p={self.p!r} is invalid; must be in (0, 1]")

    def __call__(self, logits: jax.Array) -> jax.Array:
        if self.p >= 1.0:
            return logits
        desc = -jnp.sort(-logits, axis=-1)
        probs = jax.nn.softmax(desc, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        n_keep = jnp.sum(mass_before < self.p, axis=-1, keepdims=True)  # >= 1
        threshold = jnp.take_along_axis(desc, n_keep - 1, axis=-1)
        return jnp.where(logits >= threshold, logits, -jnp.inf)


@dataclasses.dataclass(frozen=True)
class Chain:
    """Applies ``transforms`` in order (e.g. temperature, then top-k, then top-p)."""

    transforms: tuple = ()

    def __call__(self, logits: jax.Array) -> jax.Array:
        for t in self.transforms:
            logits = t(logits)
        return logits


def compose(*transforms) -> Chain:
    """``compose(a, b)(z) == b(a(z))``; nested chains are flattened."""
    flat = []
    for t in transforms:
        flat.extend(t.transforms if isinstance(t, Chain) else [t])
    return Chain(tuple(flat))


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
