"""Multi-turn episodes over the slot engine and the environment pool (the counterpart of Rollout).

    with EnvPool(workers=8) as pool:
        r = EngineRollout(Engine(sampler, slots=8, chunk=8), codec, caps, specs)
        trajs = r.run(params, version, rng, pool)     # same Trajectory records as Rollout

Episodes are admitted in order into free slots; every ``generate`` call advances each slot whose
episode is mid-action by one chunk. An episode whose action ends hands it to the pool and waits:
it keeps its slot (and KV cache) and is masked, and the others decode on while its environment
runs. When the pool returns the observation, it is prefilled into the slot (kept cache) and the
episode decodes again. If episodes are waiting for a slot (new ones, or returning evicted ones)
and none is free, the episode that has waited longest on its environment (under a long-tailed
step latency, the one likely to wait longest yet) is evicted: its slot goes to another episode,
and on return its whole context is re-prefilled (recorded: ``Turn.recomputed``). An episode that
ends frees its slot at once.

Sampling keys are those of :class:`Rollout` (``fold_in(fold_in(rng, seed), turn)`` per episode,
position folded in by the sampler), so in exact mode an episode's trajectory is bitwise the one
``Rollout`` records for it, whatever the slot, slot-mates, chunking, evictions or the order the
environments answered in. Scope: whole episodes under one policy version (no round budget).
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from agentjax.sampling.context import keep_all
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool
from agentjax.sampling.rollout import Rollout, _row_keys, env_call
from agentjax.sampling.sampler import Status
from agentjax.trajectory import StopReason, Trajectory


class EngineRollout(Rollout):
    """Episodes run to their end on ``engine`` slots, environments stepped on a pool."""

    def __init__(
        self, engine: Engine, codec, caps, specs, *, context=keep_all, evict_after: float | None = 0.0
    ):
        """``evict_after``: when episodes wait for a slot and none is free, evict an episode that
        has waited at least this many seconds on its environment (None: never evict)."""
        super().__init__(engine.sampler, codec, caps, specs, context=context)
        self.engine, self.evict_after = engine, evict_after
        self.metrics: dict[str, float] = {}

    def run(self, params, version: int, rng, pool: EnvPool) -> list[Trajectory]:
        """Runs every episode to its end; returns the trajectories in episode order."""
        e, n_slots, l = self.engine, self.engine.slots, self.engine.max_len
        self.state = e.init()
        owner = [-1] * n_slots  # slot -> row
        self._slot: dict[int, int] = {}  # row -> slot (absent: evicted, waiting or not admitted)
        self._stream: dict[int, np.ndarray] = {}  # row -> every token the model has seen
        self._routes: dict[int, np.ndarray | None] = {}
        new, back = deque(range(len(self.rows))), deque()  # to admit; returned evicted rows
        waiting: dict[int, float] = {}  # row -> when its environment step was submitted
        m = dict.fromkeys(
            (
                "chunks",
                "tokens",
                "active_slot_chunks",
                "held_slot_chunks",
                "evictions",
                "generate_s",
                "prefill_s",
                "env_block_s",
            ),
            0.0,
        )
        t_start = time.perf_counter()
        while new or back or waiting or any(o >= 0 for o in owner):
            can_admit = (new or back) and (-1 in owner or self._evictable(waiting))
            blocking = not any(o >= 0 and o not in waiting for o in owner) and not can_admit
            t0 = time.perf_counter()
            done = pool.collect(timeout=None if blocking else 0.0)
            m["env_block_s"] += time.perf_counter() - t0 if blocking else 0.0
            for d in done:
                i = d.key
                del waiting[i]
                env, res, err, wall = d.value if d.error is None else (None, None, d.error, 0.0)
                if env is not None:  # a process pool's step brings the stepped environment back
                    self.rows[i].spec.env = env
                obs = self._env_result(i, res, err, wall)
                t1 = time.perf_counter()
                self._observe(params, version, i, obs, back)
                m["prefill_s"] += time.perf_counter() - t1
            for s in range(n_slots):  # an ended episode frees its slot at once
                if owner[s] >= 0 and self.rows[owner[s]].done:
                    self._slot.pop(owner[s], None)
                    owner[s] = -1
            while owner.count(-1) < len(new) + len(back) and self._evictable(waiting):
                i = min(self._evictable(waiting), key=lambda j: waiting[j])  # waited longest
                owner[self._slot.pop(i)] = -1
                self.rows[i].evicted, m["evictions"] = True, m["evictions"] + 1
            t1 = time.perf_counter()
            for s in range(n_slots):
                if owner[s] < 0 and (back or new):
                    i = back.popleft() if back else self._admit(new.popleft())
                    if i is None:
                        continue
                    self.state = e.insert(e.prefill(params, self._stream[i], version=version), self.state, s)
                    owner[s], self._slot[i] = i, s
            m["prefill_s"] += time.perf_counter() - t1
            active = [o >= 0 and o not in waiting and not self.rows[o].done for o in owner]
            if not any(active):
                continue
            remaining = np.zeros(n_slots, np.int64)
            seeds, turns = np.zeros(n_slots, np.uint32), np.zeros(n_slots, np.uint32)
            for s, o in enumerate(owner):
                if active[s]:
                    r = self.rows[o]
                    room = l - self._stream[o].size
                    remaining[s] = max(min(self.caps.max_action_tokens - len(r.gen["tok"]), room), 0)
                    seeds[s], turns[s] = r.spec.seed, len(r.turns)
            t1 = time.perf_counter()
            self.state, span = e.generate(
                params, self.state, _row_keys(rng, seeds, turns), remaining, version=version
            )
            recs = e.records(self.state, span)
            dt = time.perf_counter() - t1
            n_tok = sum(rec.tokens.size for rec in recs)
            m["chunks"] += 1
            m["tokens"] += n_tok
            m["generate_s"] += dt
            m["active_slot_chunks"] += sum(active)
            m["held_slot_chunks"] += sum(o >= 0 and o in waiting for o in owner)
            for s, o in enumerate(owner):
                if not active[s] or recs[s].tokens.size == 0:
                    continue
                self._record(o, recs[s], dt * recs[s].tokens.size / max(n_tok, 1))
                r = self.rows[o]
                turn_full = len(r.gen["tok"]) >= self.caps.max_action_tokens
                if recs[s].status == Status.FULL:
                    self._close_turn(o, [])
                    r.done, r.stop = True, StopReason.TASK_CAP
                elif recs[s].status == Status.STOPPED or turn_full:
                    text = self._action_text(o)
                    if text is not None:
                        waiting[o] = time.perf_counter()
                        pool.submit(o, env_call, r.spec.env, text)
        wall = time.perf_counter() - t_start
        m["wall_s"] = wall
        m["slot_occupancy"] = m["active_slot_chunks"] / max(m["chunks"] * n_slots, 1)
        m["slot_held_waiting"] = m["held_slot_chunks"] / max(m["chunks"] * n_slots, 1)
        m["tokens_per_s"] = m["tokens"] / max(wall, 1e-9)
        m["trajectories_per_s"] = len(self.rows) / max(wall, 1e-9)
        self.metrics = m
        for r in self.rows:
            r.result = self._trajectory(r)
        return [r.result for r in self.rows]

    # -- internals ---------------------------------------------------------------------------
    def _evictable(self, waiting: dict[int, float]) -> list[int]:
        """Episodes holding a slot while their environment runs, evictable by ``evict_after``."""
        if self.evict_after is None:
            return []
        now = time.perf_counter()
        return [i for i, t in waiting.items() if i in self._slot and now - t >= self.evict_after]

    def _admit(self, i: int) -> int | None:
        """Resets row ``i``'s environment; its prompt becomes its stream (None: it cannot run)."""
        r = self.rows[i]
        t0 = time.perf_counter()
        obs = r.spec.env.reset(r.spec.task, r.spec.seed)
        r.timings["env_wall"] += time.perf_counter() - t0
        toks = self._cut(r, self.codec.prompt(obs))
        r.segments.append(("prompt", toks))
        self._set_context(i, np.asarray(toks, np.int32))
        return None if r.done else i

    def _set_context(self, i: int, toks: np.ndarray) -> None:
        l = self.engine.max_len
        self.rows[i].context = self._stream[i] = toks[:l]
        if toks.size >= l:  # no room to act: a per-task cap, as in Rollout
            self.rows[i].done, self.rows[i].stop = True, StopReason.TASK_CAP

    def _record(self, i: int, rec, seconds: float) -> None:
        r = self.rows[i]
        for k, x in (("tok", rec.tokens), ("lp", rec.logp), ("raw", rec.logp_raw), ("ver", rec.version)):
            r.gen[k].extend(x.tolist())
        r.timings["generation"] += seconds
        self._stream[i] = np.concatenate([self._stream[i], rec.tokens])
        self._routes[i] = self.engine.routes(self.state, self._slot[i], self._stream[i].size)

    def _routes_of(self, i: int, n: int):
        routes = self._routes.get(i)
        return None if routes is None else routes[:n]

    def _observe(self, params, version, i: int, obs: list[int], back: deque) -> None:
        """Appends the observation to row ``i``: into its kept slot, or queued for a slot."""
        r, e = self.rows[i], self.engine
        if r.done:
            return
        obs_arr = np.asarray(obs, np.int32)
        full = np.concatenate([self._stream[i], obs_arr])
        rewrite = self.ctx is not keep_all
        self._set_context(i, np.asarray(self.ctx(r.segments), np.int32) if rewrite else full)
        if r.done:
            return
        s = self._slot.get(i)
        if s is None:  # evicted: the whole context is prefilled when it gets a slot
            back.append(i)
        elif rewrite:  # a rewritten context is prefilled afresh, in place
            self.state = e.insert(e.prefill(params, self._stream[i], version=version), self.state, s)
        else:  # kept: only the observation is prefilled, onto the slot's own cache
            row = e.prefill(params, obs_arr, version=version, row=e.take(self.state, s))
            self.state = e.insert(row, self.state, s)
