"""Partial rollout: pause at a token budget, resume under new parameters (recompute or keep).

A pause is ``Sampler.generate`` with a budget: rows that hit it end with ``Status.BUDGET`` and
the returned :class:`~agentjax.sampling.sampler.SamplerState` is the resumable state (a pytree:
it can be kept on device, moved to host with ``jax.device_get`` or checkpointed). Resuming under
a new policy version ``v'`` chooses what happens to the KV cache built by the old parameters:

* ``RECOMPUTE``: re-prefill the whole prefix with the new parameters into a fresh cache. Every
  token generated afterwards is exactly a token of policy ``v'`` given the same prefix
  (``kv_version == version == v'``), at the cost of one prefill of the prefix.
* ``KEEP``: reuse the old cache. The next token's logits are computed by ``v'`` (the pending
  token is forwarded by the new parameters) but attend to keys/values computed by the old
  version: a *mixed-version* token, recorded as ``kv_version < version``. Free, but the
  behaviour distribution is then neither policy's.

In both cases every token keeps the version that produced it (``state.version``); tokens
generated before the pause keep the old version.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from agentjax.policy.model import init_cache, stack_cache, unstack_cache, unstack_layers
from agentjax.sampling.queue import ResumeMode
from agentjax.sampling.sampler import NO_VERSION, Sampler, SamplerState, _forward_window


@functools.partial(jax.jit, static_argnums=0)
def _recompute(s: Sampler, params, state: SamplerState, version):
    b, l = state.tokens.shape
    fresh = state._replace(
        cache=unstack_cache(init_cache(s.config, b, l)),
        cached=jnp.zeros_like(state.cached),
        cache_version=jnp.full_like(state.cache_version, NO_VERSION),
    )
    count = jnp.maximum(state.length - 1, 0)
    out = _forward_window(s, unstack_layers(params), fresh, fresh.cached, count, l, version, logits=False)[0]
    return out._replace(cache=stack_cache(out.cache))


def resume(sampler: Sampler, params, state: SamplerState, *, version, mode: ResumeMode | str) -> SamplerState:
    """Prepares ``state`` for ``sampler.generate(params, ..., version=version)``.

    Args:
      sampler: the sampler that produced ``state``.
      params: the new parameters.
      state: a state returned by ``generate`` (typically with rows at ``Status.BUDGET``).
      version: the version of ``params``.
      mode: ``"recompute"`` (fresh cache from ``params``) or ``"keep"`` (reuse the cache).
    Returns:
      The state to continue from. With ``recompute`` the MoE routes of the prefix are replaced by
      the new parameters' choices (the ones later tokens attend through).
    """
    mode = ResumeMode.parse("mode", mode)
    if mode == ResumeMode.KEEP:
        return state
    return _recompute(sampler, params, state, jnp.asarray(version, jnp.int32))


def mixed_version(state: SamplerState) -> np.ndarray:
    """bool ``[B, L]``: generated tokens whose context K/V came (partly) from another version."""
    version, kv = np.asarray(state.version), np.asarray(state.kv_version)
    return (version >= 0) & (kv != version)


def version_segments(versions: np.ndarray) -> list[tuple[int, int, int]]:
    """Runs ``(start, stop, version)`` of equal versions in a row's generated-token versions."""
    versions = np.asarray(versions)
    if versions.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(versions)) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [versions.size]])
    return [(int(a), int(b), int(versions[a])) for a, b in zip(starts, stops, strict=True)]
