"""Sampling transforms as small frozen dataclasses.

A transform maps float32 logits ``[N, V]`` to the logits of the distribution actually sampled
from; truncated tokens get ``-inf``. In exact mode a transform is called with ``exact`` set to
the model's batch-invariant kernels (``"pallas"``, ``"ordered"`` or ``"exact_sum"``; any truthy
value means ``"exact_sum"``) and takes any sum with them (top-p's softmax; its cumulative mass is
summed in integers on a fixed grid), so its result for a row does not depend on the other rows
and needs no float64 with the Pallas kernels. Transforms compose left to right::

    transform = compose(Temperature(0.7), TopK(20), TopP(0.95))

The sampler and the learner's scorer both turn logits into log-probs under a transform with
:func:`agentjax.policy.logprobs.token_logprobs_from_logits`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agentjax.policy import kernels


@dataclasses.dataclass(frozen=True)
class Greedy:
    """A point mass on the arg-max (the first one on ties): the sampled token's logp is 0."""

    def __call__(self, logits: jax.Array, exact: str | bool = False) -> jax.Array:
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

    def __call__(self, logits: jax.Array, exact: str | bool = False) -> jax.Array:
        return logits if self.t == 1.0 else logits / jnp.float32(self.t)


@dataclasses.dataclass(frozen=True)
class TopK:
    """Keeps the ``k`` largest logits (every token tied with the k-th is kept too)."""

    k: int

    def __post_init__(self):
        if not (isinstance(self.k, int) and self.k > 0):
            raise ValueError(f"TopK k={self.k!r} is invalid; must be a positive integer")

    def __call__(self, logits: jax.Array, exact: str | bool = False) -> jax.Array:
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

    def __call__(self, logits: jax.Array, exact: str | bool = False) -> jax.Array:
        if self.p >= 1.0:
            return logits
        desc = -jnp.sort(-logits, axis=-1)
        if exact:
            kind = exact if isinstance(exact, str) else "exact_sum"
            mass_before = kernels.exclusive_mass(kernels.softmax(desc, kind))
            p = max(1, round(self.p * 2**kernels.MASS_BITS))  # on the same grid
        else:
            probs = jax.nn.softmax(desc, axis=-1)
            mass_before, p = jnp.cumsum(probs, axis=-1) - probs, self.p
        n_keep = jnp.sum(mass_before < p, axis=-1, keepdims=True)  # >= 1
        threshold = jnp.take_along_axis(desc, n_keep - 1, axis=-1)
        return jnp.where(logits >= threshold, logits, -jnp.inf)


@dataclasses.dataclass(frozen=True)
class Chain:
    """Applies ``transforms`` in order (e.g. temperature, then top-k, then top-p)."""

    transforms: tuple = ()

    def __call__(self, logits: jax.Array, exact: str | bool = False) -> jax.Array:
        for t in self.transforms:
            logits = t(logits, exact=exact) if exact else t(logits)
        return logits


def compose(*transforms) -> Chain:
    """``compose(a, b)(z) == b(a(z))``; nested chains are flattened."""
    flat = []
    for t in transforms:
        flat.extend(t.transforms if isinstance(t, Chain) else [t])
    return Chain(tuple(flat))
