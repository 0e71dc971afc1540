"""Multi-turn episodes over the slot engine and the environment pool (the counterpart of Rollout).

    with EnvPool(workers=8) as pool:
        r = EngineRollout(Engine(sampler, slots=8, chunk=8), codec, caps, specs)
        trajs = r.run(params, version, rng, pool)     # same Trajectory records as Rollout

The call's slot map and per-row state live in :class:`~agentjax.sampling.slots.Slots`; this
module is the driver: what each engine step does with them.

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

Continuous admission (``run(..., feed=, on_done=)``, the real-time sampler's call): ``feed`` is
polled at every engine step for more episodes (:class:`Admission`: each with its own weights,
version, budget and resume mode), and ``on_done`` hears of each row as it ends or pauses. Rows of
several versions share the slots; each step prefills and decodes once per version present, the
other slots masked, so every token is made by its own episode's version.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from agentjax.envs.protocol import InfraError
from agentjax.sampling.context import keep_all
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool
from agentjax.sampling.episode import Episode, EpisodeSpec, Turns, env_call, row_keys
from agentjax.sampling.queue import Caps, ResumeMode
from agentjax.sampling.sampler import Status
from agentjax.sampling.slots import Admission, Paused, Slots
from agentjax.trajectory import StopReason, Trajectory

__all__ = ["Admission", "EngineRollout", "Paused"]

METRICS = (
    "chunks",
    "generate_calls",
    "tokens",
    "active_slot_chunks",
    "held_slot_chunks",
    "evictions",
    "joined_running",
    "generate_s",
    "prefill_s",
    "env_block_s",
)


def _pool_error(e: BaseException) -> InfraError:
    """The pool itself failed (a worker process died, a result did not pickle), not the step:
    ``env_call`` catches the step's own exceptions. That is the host's fault."""
    return InfraError(f"environment pool: {e!r}", {"pool_error": type(e).__name__})


class EngineRollout:
    """Episodes run on ``engine`` slots, environments stepped on a pool; each episode's record is
    kept by :class:`~agentjax.sampling.episode.Turns`, as lock-step :class:`Rollout` keeps it."""

    poll_s = 0.02  # with a feed: how often a step blocked on environments polls it

    def __init__(
        self,
        engine: Engine,
        codec,
        caps: Caps,
        episodes: list[EpisodeSpec | Paused],
        *,
        context=keep_all,
        evict_after: float | None = 0.0,
    ):
        """``episodes``: new episodes, or paused ones to resume. ``evict_after``: when episodes
        wait for a slot and none is free, evict an episode that has waited at least this many
        seconds on its environment (None: never evict)."""
        self.engine, self.evict_after, self.caps, self.ctx = engine, evict_after, caps, context
        self.turns = Turns(codec, caps, engine.sampler.config.max_seq_len)
        self._episodes = list(episodes)
        self.rows = [p.row if isinstance(p, Paused) else Episode(p) for p in episodes]
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
        feed: Callable[[], list[Admission]] | None = None,
        on_done: Callable[[int, Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Runs every episode to its end, or until it spends ``round_budget`` action tokens in this
        call (then it pauses: :attr:`paused`); returns the trajectories in episode order (a
        paused one holds its turns so far, the unfinished action last).

        Continuous admission: ``feed`` is polled at every engine step and returns more episodes
        for this call (:class:`Admission`: each with its own weights, version, budget and resume
        mode); they take slots as slots free up, and the call ends when no episode is left and
        ``feed`` returns none. ``on_done(row, trajectory)`` is called the moment a row ends or
        pauses. Episodes of different versions share the slots: each engine step decodes (and
        prefills) once per version present, the other slots masked, so every token is made by
        its episode's own version and an episode's record is the one it gets alone.
        """
        self._call = object()  # keys this call's environment steps on a shared pool
        self.state = self.engine.init()
        self.sl = sl = Slots.empty(self.engine.slots)
        first = Admission(None, params, version, round_budget, ResumeMode.parse("resume", resume))
        for i, ep in enumerate(self._episodes):
            self._enqueue(i, dataclasses.replace(first, episode=ep))
        m = dict.fromkeys(METRICS, 0.0)
        t_start = time.perf_counter()
        while True:
            for adm in feed() if feed is not None else ():
                m["joined_running"] += bool(sl.open)  # a round joining episodes in flight
                self.rows.append(adm.episode.row if isinstance(adm.episode, Paused) else Episode(adm.episode))
                self._enqueue(len(self.rows) - 1, adm)
            if not (sl.queued() or sl.waiting or sl.held()) and (feed is None or not sl.open):
                break
            self._pause_spent()
            self._collect(pool, feed is not None, m)
            self._free_ended()
            self._evict(m)
            self._prefill(m)
            self._deliver(on_done)
            active = sl.decoding(lambda o: self.rows[o].done)
            if not any(active):
                continue
            m["chunks"] += 1
            m["active_slot_chunks"] += sum(active)
            m["held_slot_chunks"] += sum(o >= 0 and o in sl.waiting for o in sl.owner)
            for run, slots in sl.by_version([s for s, a in enumerate(active) if a]):
                self._generate(run, slots, rng, pool, m)
            self._deliver(on_done)
        self.metrics = self._summary(m, time.perf_counter() - t_start)
        self._deliver(on_done)
        return [r.result for r in self.rows]

    # -- one engine step's phases -------------------------------------------------------------
    def _pause_spent(self) -> None:
        """A row that spent its round budget pauses, freeing its slot."""
        sl = self.sl
        for s, o in enumerate(sl.owner):
            if o >= 0 and o not in sl.waiting and not self.rows[o].done and sl.spent_all(o):
                self._pause(o, self.engine.take(self.state, s) if sl.run_of[o].keep else None)
                sl.release(o)

    def _collect(self, pool: EnvPool, polling: bool, m: dict) -> None:
        """Takes the environment results that are in; blocks for one when no slot can decode and
        no row can be admitted (with a feed, it wakes every ``poll_s`` to poll it)."""
        sl = self.sl
        can_admit = sl.queued() and (-1 in sl.owner or self._evictable())
        blocking = not any(o >= 0 and o not in sl.waiting for o in sl.owner) and not can_admit
        t0 = time.perf_counter()
        done = pool.collect(timeout=(self.poll_s if polling else None) if blocking else 0.0)
        m["env_block_s"] += time.perf_counter() - t0 if blocking else 0.0
        for d in done:
            call, i = d.key
            if call is not self._call:  # a step of an earlier call that failed: stale
                continue
            del sl.waiting[i]
            env, res, err, wall = d.value if d.error is None else (None, None, _pool_error(d.error), 0.0)
            if env is not None:  # a process pool's step brings the stepped environment back
                self.rows[i].set_env(env)
            obs = self.turns.env_result(self.rows[i], res, err, wall, self._routes(i))
            self._observe(i, obs)

    def _free_ended(self) -> None:
        """An ended episode frees its slot at once."""
        sl = self.sl
        for s, o in enumerate(sl.owner):
            if o >= 0 and self.rows[o].done:
                sl.slot.pop(o, None)
                sl.owner[s] = -1

    def _evict(self, m: dict) -> None:
        """Rows wait for a slot and none is free: the row that has waited longest on its
        environment gives up its slot (its whole context is prefilled again on its return)."""
        sl = self.sl
        while sl.owner.count(-1) < len(sl.new) + len(sl.back) and self._evictable():
            i = min(self._evictable(), key=lambda j: sl.waiting[j])
            sl.release(i)
            self.rows[i].evict()
            m["evictions"] += 1

    def _prefill(self, m: dict) -> None:
        """Admits rows into free slots, then prefills every prompt, re-prefill and observation of
        this step, once per version present."""
        t1 = time.perf_counter()
        self._admit_free_slots()
        pending, fresh = self.sl.take_prefill()
        if fresh:
            self.state = self.engine.clear(self.state, fresh)
        for run, slots in self.sl.by_version(pending):
            inputs = {s: pending[s] for s in slots}
            self.state = self.engine.extend(run.params, self.state, inputs, version=run.version)
        m["prefill_s"] += time.perf_counter() - t1

    def _summary(self, m: dict, wall: float) -> dict:
        n = self.engine.slots
        return {
            **m,
            "wall_s": wall,
            "slot_occupancy": m["active_slot_chunks"] / max(m["chunks"] * n, 1),
            "slot_held_waiting": m["held_slot_chunks"] / max(m["chunks"] * n, 1),
            "tokens_per_s": m["tokens"] / max(wall, 1e-9),
            "trajectories_per_s": len(self.rows) / max(wall, 1e-9),
            "paused": len(self.paused),
        }

    # -- internals ---------------------------------------------------------------------------
    def _enqueue(self, i: int, adm: Admission) -> None:
        """Row ``i`` joins this call: new (admitted into a slot when one frees), or a paused one
        (its kept slot row, or its whole stream re-prefilled under ``adm``'s weights)."""
        sl, p = self.sl, adm.episode
        sl.run_of[i], sl.spent[i] = adm, 0
        sl.open.add(i)
        if not isinstance(p, Paused):
            sl.new.append(i)
            return
        sl.stream[i], sl.routes[i] = p.stream, p.routes
        if adm.keep and p.slot_row is not None:
            sl.kept[i] = p.slot_row
        else:  # recompute: the context and the action so far, under the weights of this call
            self.rows[i].evict()
        sl.back.append(i)

    def _admit_free_slots(self) -> None:
        sl = self.sl
        for s in range(self.engine.slots):
            if sl.owner[s] >= 0 or not sl.queued():
                continue
            i = sl.back.popleft() if sl.back else self._admit(sl.new.popleft())
            if i is None:
                continue
            if sl.spent_all(i):  # back from its environment with its budget spent
                self._pause(i, sl.kept.pop(i, None))
                continue
            if i in sl.kept:
                self.state = self.engine.insert(sl.kept.pop(i), self.state, s)
            else:
                sl.fresh.append(s)
                sl.pending[s] = sl.stream[i]
            sl.assign(i, s)

    def _generate(self, run: Admission, slots: list[int], rng, pool: EnvPool, m: dict) -> None:
        """One chunk for ``slots`` (one version's episodes; the other slots masked)."""
        e, sl, owner = self.engine, self.sl, self.sl.owner
        remaining = np.zeros(e.slots, np.int64)
        seeds, turns = np.zeros(e.slots, np.uint32), np.zeros(e.slots, np.uint32)
        budget = run.round_budget or np.inf
        for s in slots:
            r = self.rows[owner[s]]
            room = e.max_len - sl.stream[owner[s]].size
            left = min(
                self.caps.max_action_tokens - len(r.gen["tok"]),
                room,
                budget - sl.spent[owner[s]],
                self.turns.tokens_left(r),
            )
            remaining[s] = max(left, 0)
            seeds[s], turns[s] = r.spec.seed, len(r.turns)
        t1 = time.perf_counter()
        self.state, span = e.generate(
            run.params, self.state, row_keys(rng, seeds, turns), remaining, version=run.version
        )
        recs = e.records(self.state, span)
        dt = time.perf_counter() - t1
        n_tok = sum(recs[s].tokens.size for s in slots)
        m["generate_calls"] += 1
        m["tokens"] += n_tok
        m["generate_s"] += dt
        for s in slots:
            o = owner[s]
            if recs[s].tokens.size == 0:
                continue
            self._record(o, recs[s], dt * recs[s].tokens.size / max(n_tok, 1))
            sl.spent[o] += recs[s].tokens.size
            r = self.rows[o]
            turn_full = len(r.gen["tok"]) >= self.caps.max_action_tokens
            if recs[s].status == Status.FULL:
                self.turns.close(r, [], self._routes(o))
                r.end(StopReason.CONTEXT_FULL)
            elif recs[s].status == Status.STOPPED or turn_full:
                text = self.turns.action_text(r, self._routes(o))
                if text is not None:
                    sl.waiting[o] = time.perf_counter()
                    pool.submit((self._call, o), env_call, r.spec.env, text)
            elif self.turns.capped(r):  # the episode's token cap (wins a tie with the budget)
                self.turns.close(r, [], self._routes(o))
                r.end(StopReason.TASK_CAP)

    def _deliver(self, on_done) -> None:
        """Rows that ended or paused get their record (and ``on_done`` is told) at once."""
        for i in sorted(self.sl.open):
            r = self.rows[i]
            if i in self.paused or (r.done and i not in self.sl.waiting):
                self.sl.open.discard(i)
                result = r.deliver(
                    self._paused_trajectory(i) if i in self.paused else self.turns.trajectory(r)
                )
                if on_done is not None:
                    on_done(i, result)

    def _pause(self, i: int, slot_row) -> None:
        """Row ``i`` spent its round budget: it stops here, resumable."""
        r = self.rows[i]
        r.pause()
        self.paused[i] = Paused(r, self.sl.stream[i], self.sl.routes.get(i), slot_row)

    def _paused_trajectory(self, i: int) -> Trajectory:
        """The record so far: the finished turns and the unfinished action (no observation)."""
        r = self.rows[i]
        t = self.turns.trajectory(r)
        turns = [*r.turns, self.turns.turn(r, [], self._routes(i))] if r.gen["tok"] else t.turns
        return dataclasses.replace(t, turns=turns, final_reward=0.0, label=None)

    def _evictable(self) -> list[int]:
        """Episodes holding a slot while their environment runs, evictable by ``evict_after``."""
        return self.sl.evictable(self.evict_after)

    def _admit(self, i: int) -> int | None:
        """Resets row ``i``'s environment; its prompt becomes its stream (None: it cannot run)."""
        r = self.rows[i]
        toks = self.turns.reset(r)
        if r.done:  # the reset raised: an infra fault, delivered without a slot
            return None
        self._set_context(i, np.asarray(toks, np.int32))
        return None if r.done else i

    def _set_context(self, i: int, toks: np.ndarray) -> None:
        l = self.engine.max_len
        self.sl.stream[i] = toks[:l]
        self.rows[i].set_context(self.sl.stream[i])
        if toks.size >= l:  # no room to act: the context is full, as in Rollout
            self.rows[i].end(StopReason.CONTEXT_FULL)

    def _record(self, i: int, rec, seconds: float) -> None:
        self.rows[i].record(rec.tokens, rec.logp, rec.logp_raw, rec.version, seconds)
        self.sl.stream[i] = np.concatenate([self.sl.stream[i], rec.tokens])
        self.sl.routes[i] = self.engine.routes(self.state, self.sl.slot[i], self.sl.stream[i].size)

    def _routes(self, i: int):
        """Row ``i``'s MoE experts at its first ``n`` positions, ``n -> array`` (None: dense)."""
        return lambda n: None if self.sl.routes.get(i) is None else self.sl.routes[i][:n]

    def _observe(self, i: int, obs: list[int]) -> None:
        """Appends the observation to row ``i``: into its kept slot (prefilled with the step's
        other inputs), or queued for a slot."""
        r = self.rows[i]
        if r.done:
            return
        if self.turns.capped(r):  # no action token left under caps.max_tokens
            r.end(StopReason.TASK_CAP)
            return
        obs_arr = np.asarray(obs, np.int32)
        full = np.concatenate([self.sl.stream[i], obs_arr])
        rewrite = self.ctx is not keep_all
        self._set_context(i, np.asarray(self.ctx(r.segments), np.int32) if rewrite else full)
        if r.done:
            return
        s = self.sl.slot.get(i)
        if s is None:  # evicted: the whole context is prefilled when it gets a slot
            self.sl.back.append(i)
        elif rewrite:  # a rewritten context is prefilled afresh, in place
            self.sl.fresh.append(s)
            self.sl.pending[s] = self.sl.stream[i]
        else:  # kept: only the observation is prefilled, onto the slot's own cache
            self.sl.pending[s] = obs_arr
