"""The real rollout worker for the scheduler, and an executor that batches its rounds.

The scheduler hands out one :class:`~agentjax.sampling.queue.WorkItem` per task. Sampling one
task at a time would waste the accelerator, so :class:`BatchingExecutor` (a virtual-clock
executor) defers rollout rounds and, before the clock next advances, runs every deferred round
in one batched :class:`~agentjax.sampling.rollout.Rollout` per policy version. Each row draws
its samples from its own episode seed, and with exact kernels a row's values do not depend on
its batch-mates, so batching changes no trajectory: the run equals the one-at-a-time run.

A round's virtual duration is ``generation tokens x gen_seconds_per_token`` plus the
environment's reported tool latencies (long-tailed in minirepo), so stragglers are real and the
whole run stays deterministic.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import jax

from agentjax.policy.codec import Codec
from agentjax.sampling.clock import Failure, SimulatedExecutor
from agentjax.sampling.engine import Engine
from agentjax.sampling.engine_rollout import Admission, EngineRollout
from agentjax.sampling.envpool import EnvPool
from agentjax.sampling.episode import Driver, EpisodeSpec
from agentjax.sampling.queue import Caps, ResumeMode, RoundResult, WorkItem
from agentjax.sampling.rollout import Rollout, bucket
from agentjax.sampling.sampler import Sampler


@dataclasses.dataclass
class SamplerWorker:
    """Runs rollout rounds with the real sampler; ``params[v]`` holds the weights (and their true
    behaviour version) that the sampler uses at scheduler version ``v``. ``make_env(rates)``
    makes an episode's environment with the fault rates in force (``env_rates``: the latest
    published, a value each environment copies)."""

    sampler: Sampler
    codec: Codec
    caps: Caps
    make_env: Callable[[dict], Any]
    rng: jax.Array
    gen_seconds_per_token: float = 0.01
    context: Any = None
    params: dict = dataclasses.field(default_factory=dict)
    engine: Engine | None = None  # set: episodes run on the slot engine, envs on ``pool``
    pool: EnvPool | None = None
    engine_totals: dict = dataclasses.field(default_factory=dict)  # EngineRollout.metrics, summed
    exchange: Any = None  # sharding.exchange.Exchange: this process runs its share of each call
    env_rates: dict = dataclasses.field(default_factory=dict)  # fault rates new episodes get

    def engine_report(self) -> dict:
        """The slot engine's totals over every round: tokens, chunks, slot occupancy, evictions,
        wall seconds and throughput, and the environment pool's measured statistics."""
        t = self.engine_totals
        slot_chunks = max(t.get("chunks", 0.0) * self.engine.slots, 1.0)
        wall = max(t.get("wall_s", 0.0), 1e-9)
        return {
            "slots": self.engine.slots,
            "chunk": self.engine.chunk,
            **t,
            "slot_occupancy": t.get("active_slot_chunks", 0.0) / slot_chunks,
            "slot_held_waiting": t.get("held_slot_chunks", 0.0) / slot_chunks,
            "tokens_per_s": t.get("tokens", 0.0) / wall,
            "env_pool": self.pool.stats(),
        }

    def publish(
        self,
        version: int,
        params,
        keep_from: int | None = None,
        behaviour_version: int | None = None,
        env_rates: dict | None = None,
    ) -> None:
        """Makes ``params`` the sampler's weights for scheduler ``version``; drops older versions.

        ``behaviour_version``: the learner version those weights really are (older than
        ``version`` when a disaggregated sampler syncs only every k steps); tokens record it.
        ``env_rates``: the fault rates episodes started from now on get (None: unchanged).
        """
        self.params[version] = (params, version if behaviour_version is None else behaviour_version)
        if env_rates is not None:
            self.env_rates = dict(env_rates)
        if keep_from is not None:
            for v in [v for v in self.params if v < keep_from]:
                del self.params[v]

    def run_round(self, item: WorkItem) -> RoundResult:
        return self.run_rounds([item])[0]

    def run_rounds(self, items: Sequence[WorkItem]) -> list[RoundResult]:
        """Runs the rounds, one batched call per policy version. A round budget (partial
        rollout) needs the slot engine: a paused round's ``state`` is the engine's
        :class:`~agentjax.sampling.engine_rollout.Paused` episode, which the next round resumes.
        With ``exchange`` (several processes) this process runs its share and every process
        gets every result."""
        if self.exchange is not None:
            return self.exchange.split(items, self._run_rounds)
        return self._run_rounds(items)

    def _run_rounds(self, items: Sequence[WorkItem]) -> list[RoundResult]:
        out: list[RoundResult | None] = [None] * len(items)
        by_version: dict[tuple, list[int]] = defaultdict(list)
        for i, it in enumerate(items):
            by_version[(it.version, it.round_budget or 0, it.resume)].append(i)
        before = {i: _progress(it.state) for i, it in enumerate(items)}
        for (version, budget, resume), idx in sorted(by_version.items()):
            episodes = [items[i].state or self._spec(items[i]) for i in idx]
            params, behaviour = self.params[version]
            ro = self._driver(episodes)
            ro.run(params, behaviour, self.rng, self.pool, round_budget=budget, resume=resume)
            self._add_totals(ro.metrics)
            for j, (i, row) in enumerate(zip(idx, ro.rows, strict=True)):
                out[i] = self._result(row.result, before[i], ro.paused.get(j))
        return out  # type: ignore[return-value]

    @property
    def streams(self) -> bool:
        """Whether :meth:`stream_rounds` can run this worker's rounds (the slot engine, one
        process; several processes split each call's rounds instead)."""
        return self.engine is not None and self.exchange is None

    def stream_rounds(
        self,
        take: Callable[[], list[tuple[int, WorkItem]]],
        deliver: Callable[[int, RoundResult], None],
    ) -> None:
        """Runs rounds on one continuous slot-engine call as they are submitted: ``take()`` is
        polled at every engine step for newly submitted ``(ticket, round)`` pairs, which take
        slots as slots free up (at their own versions: see :meth:`EngineRollout.run`), and
        ``deliver(ticket, result)`` gets each round's result the moment its episode ends or
        pauses. Returns when no round is running and ``take`` gives none."""
        ro = EngineRollout(self.engine, self.codec, self.caps, [], **self._context_kw())
        tickets: dict[int, tuple[int, tuple[int, float]]] = {}  # row -> (ticket, progress before)

        def feed() -> list[Admission]:
            out = []
            for ticket, it in take():
                params, behaviour = self.params[it.version]
                # run() appends fed episodes as rows in feed order: this one's row index
                tickets[len(ro.rows) + len(out)] = (ticket, _progress(it.state))
                episode = it.state or self._spec(it)
                out.append(
                    Admission(
                        episode, params, behaviour, it.round_budget, ResumeMode.parse("resume", it.resume)
                    )
                )
            return out

        def done(i: int, t) -> None:
            ticket, before = tickets.pop(i)
            deliver(ticket, self._result(t, before, ro.paused.get(i)))

        try:
            ro.run(None, 0, self.rng, self.pool, feed=feed, on_done=done)
        finally:
            self._add_totals(ro.metrics)

    def _driver(self, episodes: list) -> Driver:
        """The rollout driver of this worker's rounds: the slot engine when it has one, else
        lock-step Rollout padded to a bucket (one compiled shape per bucket)."""
        if self.engine is not None:
            return EngineRollout(self.engine, self.codec, self.caps, episodes, **self._context_kw())
        pad = bucket(len(episodes))
        return Rollout(self.sampler, self.codec, self.caps, episodes, pad_to=pad, **self._context_kw())

    def _context_kw(self) -> dict:
        return {} if self.context is None else {"context": self.context}

    def _add_totals(self, metrics: dict) -> None:
        for k, v in metrics.items():
            if k not in ("slot_occupancy", "slot_held_waiting", "tokens_per_s", "trajectories_per_s"):
                self.engine_totals[k] = self.engine_totals.get(k, 0.0) + v

    def _result(self, t, before: tuple[int, float], state) -> RoundResult:
        """A round's result: its trajectory, and its duration on the virtual clock (this round's
        tokens x ``gen_seconds_per_token`` + its environment seconds; a resumed round counts its
        own share only)."""
        tok0, env0 = before
        gen = (t.num_action_tokens - tok0) * self.gen_seconds_per_token
        env = float(t.timings.get("env", 0.0)) - env0
        t.timings["generation_virtual"] = gen
        return RoundResult(state=state, trajectory=t, duration=gen + env, generation_time=gen, env_time=env)

    def _spec(self, item: WorkItem) -> EpisodeSpec:
        t = item.task
        return EpisodeSpec(self.make_env(self.env_rates), t.task, t.seed, t.task_id, t.task_class)


def _progress(paused) -> tuple[int, float]:
    """Action tokens and environment seconds a paused episode had spent (0s: a new one)."""
    if paused is None:
        return 0, 0.0
    r = paused.row
    return sum(t.action.size for t in r.turns) + len(r.gen["tok"]), float(r.timings["env"])


@dataclasses.dataclass(frozen=True)
class GroupTask:
    """One episode of a GRPO group: the same task, its own seed."""

    task: Any
    seed: int
    task_id: str
    task_class: str


class BatchingExecutor(SimulatedExecutor):
    """A virtual-clock executor that runs deferred rollout rounds together (see module doc)."""

    max_consecutive_failures = 3

    def __init__(self):
        super().__init__()
        self._deferred: list[tuple[int, float, Any, WorkItem]] = []  # (ticket, at, worker, item)
        self._ticket_of: dict[int, int] = {}  # clock seq of a flushed result -> submit ticket
        self._seq_of: dict[int, int] = {}  # submit ticket -> clock seq of its flushed result

    def snapshot_state(self) -> dict:
        """The clock and ticket maps (never the worker: params, envs); deferred rounds run first."""
        self.flush()
        return {
            **super().snapshot_state(),
            "ticket_of": dict(self._ticket_of),
            "seq_of": dict(self._seq_of),
            "failures": getattr(self, "_failures", 0),
        }

    def load_snapshot_state(self, d: dict) -> None:
        super().load_snapshot_state(d)
        self._deferred = []
        self._ticket_of, self._seq_of = dict(d["ticket_of"]), dict(d["seq_of"])
        self._failures = int(d["failures"])

    def submit_round(self, worker, item: WorkItem) -> int:
        """Defers ``worker``'s round until the clock next advances (see :meth:`flush`)."""
        ticket = self.clock.schedule(self.clock.now, None)  # a placeholder until flushed
        self._deferred.append((ticket, self.clock.now, worker, item))
        return ticket

    def flush(self) -> None:
        """Runs every deferred round (skipping cancelled ones) as one batch per worker."""
        live = [d for d in self._deferred if not self.clock.is_cancelled(d[0])]
        self._deferred = []
        by_worker: dict[int, list] = defaultdict(list)
        for d in live:
            by_worker[id(d[2])].append(d)
        for group in by_worker.values():
            self._flush(group[0][2], group)

    def _flush(self, worker, live) -> None:
        try:
            results = worker.run_rounds([item for _, _, _, item in live])
            self._failures = 0
        except Exception as e:  # noqa: BLE001 - a failed batch fails its rounds, not the run
            self._failures = getattr(self, "_failures", 0) + 1
            if self._failures >= self.max_consecutive_failures:  # a bug, not bad luck: be loud
                raise RuntimeError(f"{self._failures} rollout batches failed in a row") from e
            results = [Failure(e)] * len(live)
        for (ticket, at, _, _), res in zip(live, results, strict=True):
            self.clock.cancel(ticket)  # the placeholder
            seq = self.clock.schedule(at + getattr(res, "duration", 0.0), res)
            self._ticket_of[seq], self._seq_of[ticket] = ticket, seq

    def cancel(self, ticket: int) -> None:
        """Cancels a deferred round's placeholder or a flushed round's pending result (once)."""
        seq = self._seq_of.pop(ticket, ticket)
        self._ticket_of.pop(seq, None)
        self.clock.cancel(seq)

    def next(self):
        self.flush()
        seq, result = super().next()
        ticket = self._ticket_of.pop(seq, seq)
        self._seq_of.pop(ticket, None)
        return ticket, result
