"""Whole episodes inside one jitted program: the environment is stepped from a host callback.

:class:`Rollout` returns to Python between decode chunks: right for environments that take
milliseconds to seconds (a sandbox, a verifier), and for partial rollout. When an environment step
is cheap and the device round trip is not (an accelerator far from its host, many short turns),
:class:`DeviceRollout` keeps the turn loop on the device: a ``lax.while_loop`` over turns runs the
sampler's decode, hands each turn's action to the host through ``jax.experimental.io_callback``,
and appends the returned observation tokens with the sampler's own prefill, all in one call::

    r = DeviceRollout(sampler, codec, caps, specs)
    trajs = r.run(params, version, rng)

The host side is the very same bookkeeping as :class:`Rollout` (caps, stop reasons, faults of a
broken environment, per-token versions and routes), and the sampling keys are the same
(``fold_in(fold_in(rng, episode seed), generate call)`` per row), so a trajectory is the one the
host-stepped loop produces (tested bitwise in exact mode). Scope: the ``keep_all`` context and
whole episodes (no round budget: use :class:`Rollout` for partial rollout and context rewrites).
"""

from __future__ import annotations

import functools
import itertools
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler, Status, _extend, _generate
from agentjax.trajectory import StopReason, Trajectory

_ACTIVE: dict[int, DeviceRollout] = {}  # handle -> rollout, for the one static host callback
_LOCK = threading.Lock()
_HANDLES = itertools.count(1)


def _host_turn(handle, start, stop, tokens, logp, raw, version, status, length, routes):
    return _ACTIVE[int(handle)]._turn(start, stop, tokens, logp, raw, version, status, length, routes)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _episodes(s: Sampler, width: int, max_action_tokens: int, params, state, rng, seeds, n, version, handle):
    b, l = state.tokens.shape
    out_shape = (
        jax.ShapeDtypeStruct((b, width), jnp.int32),
        jax.ShapeDtypeStruct((b,), jnp.int32),
        jax.ShapeDtypeStruct((b,), jnp.bool_),
    )
    routes0 = state.routes if state.routes is not None else jnp.zeros((b, 1), jnp.int32)

    def body(carry):
        st, calls, active = carry
        keys = jax.vmap(lambda sd, c: jax.random.fold_in(jax.random.fold_in(rng, sd), c))(seeds, calls)
        budget = jnp.where(active, jnp.minimum(max_action_tokens, l - st.length), 0).astype(jnp.int32)
        st, span = _generate(s, params, st, keys, budget, version)
        routes = st.routes if st.routes is not None else routes0
        obs, lens, active = io_callback(
            _host_turn,
            out_shape,
            handle,
            span.start,
            span.stop,
            st.tokens,
            st.logp,
            st.logp_raw,
            st.version,
            st.status,
            st.length,
            routes,
            ordered=True,
        )
        st = _extend(s, params, st, obs, lens, version)
        return st, calls + (budget > 0).astype(jnp.uint32), active & (budget > 0)

    active0 = jnp.arange(b) < n  # rows beyond the episodes pad the batch to a compiled size
    carry = (state, jnp.zeros((b,), jnp.uint32), active0)
    state, _, _ = jax.lax.while_loop(lambda c: jnp.any(c[2]), body, carry)
    return state


class DeviceRollout(Rollout):
    """A batch of whole episodes run by one jitted call (see the module docstring)."""

    def run(self, params, version: int, rng) -> list[Trajectory]:
        """Resets the environments, runs every episode to its end, returns the trajectories."""
        self.start(params, version)
        t0 = time.perf_counter()
        seeds = np.zeros(self.capacity, np.uint32)
        seeds[: len(self.rows)] = [r.spec.seed for r in self.rows]
        with _LOCK:
            handle = next(_HANDLES)
            _ACTIVE[handle] = self
        try:
            state = _episodes(
                self.sampler,
                self.width,
                self.caps.max_action_tokens,
                params,
                self.state,
                rng,
                jnp.asarray(seeds),
                jnp.asarray(len(self.rows), jnp.int32),
                jnp.asarray(version, jnp.int32),
                jnp.asarray(handle, jnp.int32),
            )
            self.state = jax.block_until_ready(state)
        finally:
            with _LOCK:
                _ACTIVE.pop(handle, None)
        wall = time.perf_counter() - t0
        for r in self.rows:
            r.timings["generation"] = max(wall - r.timings["env_wall"], 0.0) / len(self.rows)
            if not r.done:  # the loop only ends when every episode did; guard the contract
                raise RuntimeError(f"episode {r.spec.task_id} did not end in the device loop")
            r.result = self._trajectory(r)
        return [r.result for r in self.rows]

    def _turn(self, start, stop, tokens, logp, raw, version, status, length, routes):
        """Host side of one turn (the callback): record the generated tokens, step environments."""
        b, l = tokens.shape
        obs_arr = np.zeros((b, self.width), np.int32)
        lens = np.zeros(b, np.int32)
        self._routes = routes if self.state.routes is not None else None
        for i, r in enumerate(self.rows):
            lo, hi = int(start[i]), int(stop[i])
            if r.done or hi == lo:
                continue
            r.gen["tok"].extend(tokens[i, lo:hi].tolist())
            r.gen["lp"].extend(logp[i, lo:hi].tolist())
            r.gen["raw"].extend(raw[i, lo:hi].tolist())
            r.gen["ver"].extend(version[i, lo:hi].tolist())
            if status[i] == Status.FULL:
                self._close_turn(i, [])
                r.done, r.stop = True, StopReason.CONTEXT_FULL
                continue
            obs = self._env_step(i)
            obs_arr[i, : len(obs)], lens[i] = obs, len(obs)
            if obs:  # the context of the next turn: everything the model will have seen
                r.context = np.concatenate([tokens[i, :hi], np.asarray(obs, np.int32)])[:l]
                if int(length[i]) + len(obs) >= l:  # the buffer is full: the system's limit
                    r.done, r.stop = True, StopReason.CONTEXT_FULL
        active = np.zeros(b, bool)
        active[: len(self.rows)] = [not r.done for r in self.rows]
        return obs_arr, lens, active

    def _close_turn(self, i: int, obs: list[int]):
        if self._routes is not None:  # the callback's copy: self.state is stale inside the loop
            self.state = self.state._replace(routes=self._routes)
        super()._close_turn(i, obs)
