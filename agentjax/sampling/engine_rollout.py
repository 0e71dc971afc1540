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
environments answered in.

Partial rollout (``run(..., round_budget=N)``): an episode that has generated ``N`` action tokens in
this call pauses (``round_budget_paused``) when it next needs to decode. It gives up its slot and
comes back as a :class:`Paused` episode: its host row and stream, and under ``keep`` its slot's
row (KV cache built by the old weights; the next call's weights forward its pending token, so
those tokens are mixed-version). Under ``recompute`` the next call re-prefills its whole stream
(context and the action so far) with the weights then current, recorded as ``Turn.recomputed``.
Every token keeps the version that produced it. With unchanged weights a paused and resumed
episode is bitwise the one that never paused (``tests/sampling/test_engine_rollout.py``).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import Any

import numpy as np

from agentjax.sampling.context import keep_all
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool
from agentjax.sampling.queue import ResumeMode
from agentjax.sampling.rollout import EpisodeSpec, Rollout, _Row, _row_keys, env_call
from agentjax.sampling.sampler import Status
from agentjax.trajectory import StopReason, Trajectory


@dataclasses.dataclass
class Paused:
    """An episode paused by the round budget: what the next ``run`` resumes it from."""

    row: _Row  # host state: environment, turns so far, the current action's tokens
    stream: np.ndarray  # every token the model has seen
    routes: np.ndarray | None  # MoE experts of ``stream`` (None: dense)
    slot_row: Any = None  # ``keep``: the slot's one-row state (KV cache); ``recompute``: None


class EngineRollout(Rollout):
    """Episodes run on ``engine`` slots, environments stepped on a pool."""

    def __init__(
        self,
        engine: Engine,
        codec,
        caps,
        episodes: list[EpisodeSpec | Paused],
        *,
        context=keep_all,
        evict_after: float | None = 0.0,
    ):
        """``episodes``: new episodes, or paused ones to resume. ``evict_after``: when episodes
        wait for a slot and none is free, evict an episode that has waited at least this many
        seconds on its environment (None: never evict)."""
        specs = [p.row.spec if isinstance(p, Paused) else p for p in episodes]
        super().__init__(engine.sampler, codec, caps, specs, context=context)
        self.engine, self.evict_after = engine, evict_after
        self._resumed = {i: p for i, p in enumerate(episodes) if isinstance(p, Paused)}
        for i, p in self._resumed.items():
            self.rows[i] = p.row
        self.paused: dict[int, Paused] = {}  # row -> its state, for rows this run paused
        self.metrics: dict[str, float] = {}

    def run(
        self,
        params,
        version: int,
        rng,
        pool: EnvPool,
        *,
        round_budget: int | None = None,
        resume: ResumeMode | str = ResumeMode.RECOMPUTE,
    ) -> list[Trajectory]:
        """Runs every episode to its end, or until it spends ``round_budget`` action tokens in this
        call (then it pauses: :attr:`paused`); returns the trajectories in episode order (a
        paused one holds its turns so far, the unfinished action last)."""
        e, n_slots, l = self.engine, self.engine.slots, self.engine.max_len
        keep = ResumeMode.parse("resume", resume) == ResumeMode.KEEP
        self.state = e.init()
        owner = [-1] * n_slots  # slot -> row
        self._slot: dict[int, int] = {}  # row -> slot (absent: evicted, waiting or not admitted)
        self._stream: dict[int, np.ndarray] = {}  # row -> every token the model has seen
        self._routes: dict[int, np.ndarray | None] = {}
        new = deque(i for i in range(len(self.rows)) if i not in self._resumed)  # to admit
        back = deque()  # rows whose whole stream is prefilled when they get a slot
        kept: dict[int, Any] = {}  # resumed rows under keep: their slot row
        for i, p in self._resumed.items():
            self._stream[i], self._routes[i] = p.stream, p.routes
            if keep and p.slot_row is not None:
                kept[i] = p.slot_row
            else:  # recompute: the context and the action so far, under the weights of this call
                self.rows[i].evicted = True
            back.append(i)
        spent = dict.fromkeys(range(len(self.rows)), 0)  # action tokens this call
        budget = np.inf if not round_budget else round_budget
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
        self._pending: dict[int, np.ndarray] = {}  # slot -> tokens to prefill at this step
        self._fresh: list[int] = []  # slots to empty first (a new or rewritten context)
        t_start = time.perf_counter()
        while new or back or waiting or any(o >= 0 for o in owner):
            for s in range(n_slots):  # a row that spent its round budget pauses, freeing its slot
                o = owner[s]
                if o >= 0 and o not in waiting and not self.rows[o].done and spent[o] >= budget:
                    self._pause(o, e.take(self.state, s) if keep else None)
                    self._slot.pop(o)
                    owner[s] = -1
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
                self._observe(i, obs, back)
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
                    if spent[i] >= budget:  # back from its environment with its budget spent
                        self._pause(i, kept.pop(i, None))
                        continue
                    if i in kept:
                        self.state = e.insert(kept.pop(i), self.state, s)
                    else:
                        self._fresh.append(s)
                        self._pending[s] = self._stream[i]
                    owner[s], self._slot[i] = i, s
            if self._pending:  # every prompt, re-prefill and observation of this step: one call
                if self._fresh:
                    self.state = e.clear(self.state, self._fresh)
                self.state = e.extend(params, self.state, self._pending, version=version)
                self._pending, self._fresh = {}, []
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
                    left = min(self.caps.max_action_tokens - len(r.gen["tok"]), room, budget - spent[o])
                    remaining[s] = max(left, 0)
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
                spent[o] += recs[s].tokens.size
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
        m["paused"] = len(self.paused)
        self.metrics = m
        for i, r in enumerate(self.rows):
            r.result = self._paused_trajectory(i) if i in self.paused else self._trajectory(r)
        return [r.result for r in self.rows]

    # -- internals ---------------------------------------------------------------------------
    def _pause(self, i: int, slot_row) -> None:
        """Row ``i`` spent its round budget: it stops here, resumable."""
        r = self.rows[i]
        if r.gen["tok"]:
            r.pauses.append(len(r.gen["tok"]))
        r.stop = StopReason.ROUND_BUDGET_PAUSED
        self.paused[i] = Paused(r, self._stream[i], self._routes.get(i), slot_row)

    def _paused_trajectory(self, i: int) -> Trajectory:
        """The record so far: the finished turns and the unfinished action (no observation)."""
        r = self.rows[i]
        t = self._trajectory(r)
        if r.gen["tok"]:
            t.turns = [*r.turns, self._turn_of(i, [])]
        t.final_reward, t.label = 0.0, None
        return t

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

    def _observe(self, i: int, obs: list[int], back: deque) -> None:
        """Appends the observation to row ``i``: into its kept slot (prefilled with the step's
        other inputs), or queued for a slot."""
        r = self.rows[i]
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
            self._fresh.append(s)
            self._pending[s] = self._stream[i]
        else:  # kept: only the observation is prefilled, onto the slot's own cache
            self._pending[s] = obs_arr
