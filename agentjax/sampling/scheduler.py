"""One scheduler for every mode: ``sync``, ``async`` and ``windowed_fifo(window)``.

(One module, over 300 lines: the three modes share one state machine of admission, commit,
cancellation, the version-gap bound and dynamic sampling's hooks (the group gate itself is
``groups.py``); what its snapshot holds and how a run is rebuilt from one is ``snapshot.py``.)

The scheduler drives rollout workers through :class:`~agentjax.sampling.queue.RolloutWorker`
(one call per round of one rollout) and a learner through a pure ``learner(params, batch) ->
params``; both run as jobs on an executor from :mod:`agentjax.sampling.clock`: the virtual clock
makes a run a pure function of its inputs (same seed -> same trajectories in the same order, same
parameters), a thread pool gives real latency (order may vary, nothing is lost).

* ``sync``: submit ``batch_size`` units (paused rollouts first), wait for all of them (the
  barrier), train on the completed ones, repeat. Rollout slots idle while the batch's slowest task
  runs and while the learner steps.
* ``async``: every free slot takes work while the staleness manager admits it; the learner takes
  completed trajectories in completion order and trains as soon as it holds ``batch_size``.
* ``windowed_fifo``: as ``async``, but the learner may only take completed trajectories inside
  the window ``[head, head + window)`` over submission order.

Partial rollout: with ``round_budget`` a rollout pauses after that many action tokens in a round
(``StopReason.ROUND_BUDGET_PAUSED``) and resumes once the learner has published a newer version
(``sync``: in the next round), re-prefilling its prefix (``recompute``) or keeping the old
cache (``keep``). Per-task caps (``TaskCaps``) end the episode with ``StopReason.TASK_CAP``.
After each learner step, rollouts whose version gap already exceeds the hard bound are cancelled
and queued ones rejected, so no trained sample ever exceeds the configured gap.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from agentjax.sampling import snapshot as snap
from agentjax.sampling import staleness as stl
from agentjax.sampling.clock import Failure, SimulatedExecutor
from agentjax.sampling.groups import GroupGate, UniformGroups
from agentjax.sampling.queue import RolloutWorker, RoundResult, SubmissionWindow, WorkItem, consumable
from agentjax.sampling.runlog import Consumed, Record, RunLog, SchedulerConfig
from agentjax.sampling.snapshot import SNAPSHOT_FIELDS  # noqa: F401 - the snapshot's named fields
from agentjax.sampling.staleness import Admission, Event, Kind, Terminal
from agentjax.trajectory import Trajectory

__all__ = ["Consumed", "Record", "RunLog", "Scheduler", "SchedulerConfig", "run"]


class LearnerResult(NamedTuple):
    params: Any
    duration: float


class Scheduler:
    """A resumable scheduler run: ``run(num_steps)`` continues to a total step count, ``finish()``
    cancels whatever is left and returns the :class:`RunLog`. On the virtual clock the whole run
    state (clock heap, in-flight and paused rollouts, queue, records, staleness state, params)
    round-trips through :meth:`snapshot` / :meth:`restore`, and a restored run continues exactly
    as the uninterrupted one would have."""

    def __init__(
        self,
        tasks: Iterable[Any],
        worker: RolloutWorker,
        learner: Callable[[Any, list[Consumed]], Any],
        params: Any,
        *,
        config: SchedulerConfig,
        staleness_config: stl.StalenessConfig,
        batch_size: int,
        group_size: int = 1,
        executor: Any = None,
        admission: Callable[[stl.SampleInfo, stl.StalenessConfig], stl.Decision] = stl.admit,
        drift_fn: Callable[[Trajectory, int], float | None] | None = None,
        retry: Callable[[Any, Any, Trajectory], tuple[Any, Any]] | None = None,
    ) -> None:
        """``retry(state, task, trajectory) -> (state, task_or_None)``: called for every infra
        fault (masked); a returned task is submitted again before any new one. ``state`` starts as
        None per original task and is kept in the snapshot (see :mod:`agentjax.sampling.retry`).
        ``group_size``: members per GRPO group (consecutive tasks with one ``task_id``); with
        ``config.uniform_groups='drop'`` the scheduler drops groups of equal rewards
        (:mod:`agentjax.sampling.groups`)."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} is invalid; must be an integer >= 1")
        self.gate = None
        if config.uniform_groups == UniformGroups.DROP:
            if not isinstance(group_size, int) or group_size < 2:
                raise ValueError(
                    f"uniform_groups='drop' needs groups: group_size={group_size!r} must be >= 2"
                )
            self.gate = GroupGate(group_size, config.drop_budget * batch_size)
        staleness_config = staleness_config.resolved(batch_size, config.num_slots)
        if staleness_config.queue_capacity < batch_size:
            raise ValueError("queue_capacity must be >= batch_size (else the learner starves)")
        self.tasks, self.worker, self.learner = iter(tasks), worker, learner
        self.admission, self.drift_fn, self.retry = admission, drift_fn, retry
        self.retry_queue: list[tuple[int, Any]] = []  # (original index, task) to submit first
        self.retry_of: dict[int, int] = {}  # index of a retried submission -> original index
        self.retry_states: dict[int, Any] = {}
        self.cfg, self.scfg, self.params = config, staleness_config, params
        self.batch_size = batch_size
        self.ex = SimulatedExecutor() if executor is None else executor
        self.st = stl.init(staleness_config)
        self.version = self.steps = 0
        self.records: list[Record] = []
        self.task: dict[int, Any] = {}
        self.traj: dict[int, Trajectory] = {}
        self.state: dict[int, Any] = {}
        self.running: dict[int, int] = {}  # ticket -> index
        self.round_start: dict[int, tuple[float, int]] = {}  # index -> (time, version)
        self.paused: dict[int, int] = {}  # index -> version of the round that paused
        self.completed: dict[int, None] = {}  # completion order
        self.window = SubmissionWindow()
        self.batch: list[Consumed] = []
        self.batches: list[list[Consumed]] = []
        self.learner_ticket: int | None = None
        self.step_end_times: list[float] = []
        self.events: list[tuple[float, str, int, int]] = []
        self.round_open, self.round_queue = False, []  # sync only

    # -- bookkeeping -------------------------------------------------------------------------
    def _log(self, kind: str, index: int) -> None:
        self.events.append((self.ex.now(), kind, index, self.version))

    def _event(self, kind: Kind, **kw) -> None:
        self.st = stl.update(self.st, Event(kind, **kw))

    def _resolve(self, index: int, terminal: Terminal, reason: str = "", taken=False) -> None:
        rec = self.records[index]
        rec.terminal, rec.reason, rec.resolve_time = terminal, reason, self.ex.now()
        if not taken:  # a taken sample already left the window
            self.window.resolve(index)
        self._log(terminal.value, index)

    def _submit_new(self) -> int | None:
        origin = None
        if self.retry_queue:
            origin, task = self.retry_queue.pop(0)
        else:
            task = next(self.tasks, None)
        if task is None:
            return None
        index = len(self.records)
        if origin is not None:
            self.retry_of[index] = origin
        self.records.append(
            Record(
                index,
                str(task.task_id),
                str(task.task_class),
                self.ex.now(),
                self.version,
                resume=self.cfg.resume,
            )
        )
        self.task[index] = task
        self._event(Kind.SUBMIT)
        self._log("submit", index)
        return index

    def _start_round(self, index: int) -> None:
        rec = self.records[index]
        item = WorkItem(
            self.task[index],
            self.version,
            self.cfg.round_budget or None,
            self.cfg.caps,
            self.cfg.resume,
            self.state.pop(index, None),
        )
        ticket = self.ex.submit_round(self.worker, item)
        self.running[ticket] = index
        self.round_start[index] = (self.ex.now(), self.version)
        if rec.behaviour_version < 0:
            rec.behaviour_version = self.version
        self._log("resume" if rec.rounds else "start", index)

    # -- filling slots -----------------------------------------------------------------------
    def _fill(self) -> None:
        if self.cfg.mode == "sync":
            return self._fill_sync()
        while len(self.running) < self.cfg.num_slots:
            # A paused rollout waits for a newer version, unless nothing else can produce one.
            stalled = not self.running and self.learner_ticket is None
            ready = next((i for i, v in self.paused.items() if v < self.version or stalled), None)
            if ready is not None:
                del self.paused[ready]
                self._start_round(ready)
                continue
            if stl.capacity(self.st, self.scfg, self.batch_size) <= 0:
                return
            index = self._submit_new()
            if index is None:
                return
            self._start_round(index)

    def _fill_sync(self) -> None:
        if not self.round_open and self.learner_ticket is None:
            size = self.batch_size - len(self.batch)  # dynamic sampling: what its drops left
            if self.gate is not None:
                size = -(-size // self.gate.group_size) * self.gate.group_size  # whole groups
            units = list(self.paused)[:size]
            for i in units:
                del self.paused[i]
            while len(units) < size:
                index = self._submit_new()
                if index is None:
                    break
                units.append(index)
            self.round_queue, self.round_open = units, bool(units)
        while self.round_queue and len(self.running) < self.cfg.num_slots:
            self._start_round(self.round_queue.pop(0))

    # -- consuming ---------------------------------------------------------------------------
    def _take(self, index: int) -> None:
        del self.completed[index]
        rec, traj = self.records[index], self.traj[index]
        if traj.final_reward is None:  # infra fault: masked, never a silent zero
            self._event(Kind.MASK)
            again = None
            if self.retry is not None:
                origin = self.retry_of.get(index, index)
                st, again = self.retry(self.retry_states.get(origin), self.task[index], traj)
                self.retry_states[origin] = st
                if again is not None:
                    self.retry_queue.append((origin, again))
            self._resolve(index, Terminal.MASKED, traj.label or "no reward")
            if again is None:  # the member's last outcome (a retry would bring another)
                self._group_outcome(index)
            return None
        rec.consume_version = self.version
        info = stl.SampleInfo(
            version_gap=rec.version_gap,
            task_class=rec.task_class,
            drift=None if self.drift_fn is None else self.drift_fn(traj, self.version),
            queue_pressure=stl.queue_pressure(self.st, self.scfg),
        )
        decision = self.admission(info, self.scfg)
        rec.admission, rec.weight = decision.admission, decision.weight
        if decision.admission == Admission.REJECT:
            self._event(Kind.REJECT)
            return self._resolve(index, Terminal.REJECTED_STALE, decision.reason)
        self.batch.append(Consumed(index, traj, decision.weight, decision.admission))
        self.window.resolve(index)  # the window advances as its head is taken

    def _maybe_train(self) -> None:
        if self.learner_ticket is not None:
            return
        if self.cfg.mode == "sync":
            if not self.round_open or self.running or self.round_queue:
                return
            self.round_open = False
        full = self._fill_batch()
        if len(self.batch) < self.batch_size and not full:
            # sync trains the round it has (short when episodes were masked), unless dynamic
            # sampling dropped groups from it: then another round samples the missing ones
            if self.cfg.mode != "sync" or (self.gate is not None and self.gate.dropped):
                return
        if self.batch:
            self._start_step()

    def _fill_batch(self) -> bool:
        """Takes completed trajectories into the batch; True when the next would not fit."""
        while len(self.batch) < self.batch_size:
            index = self._next_take()
            if index is None:
                return False
            if index < 0:
                return True
            self._take(index)
        return False

    def _next_take(self) -> int | None:
        """The next completed trajectory to take; None: none is ready; -1: the batch is full.

        With dynamic sampling a group is trained whole, in one batch (its advantages are computed
        over the members in the batch): the rest of a group the batch has started comes first,
        window or not, and a group that would not fit waits for the next batch."""
        cands = consumable(self.cfg.mode, self.completed, self.window.head, self.cfg.consume_window)
        if self.gate is None:
            return cands[0] if cands else None
        started = {self.records[c.index].task_id for c in self.batch}
        rest = next((i for i in self.completed if self.records[i].task_id in started), None)
        if rest is not None:
            return rest
        members = collections.Counter(
            self.records[j].task_id for j in self.completed if self.traj[j].final_reward is not None
        )
        room = self.batch_size - len(self.batch)
        fits = next((i for i in cands if members[self.records[i].task_id] <= room), None)
        return fits if fits is not None else (-1 if cands else None)

    def _start_step(self) -> None:
        batch, self.batch = self.batch, []
        now = self.ex.now()
        for c in batch:
            rec = self.records[c.index]
            self._event(Kind.TRAIN, gen_gap=rec.gen_gap, queue_gap=rec.queue_gap)
            rec.terminal, rec.resolve_time = Terminal.TRAINED, now
            c.trajectory.timings["queue"] = now - rec.complete_time
            self._log("trained", c.index)
        self.batches.append(batch)
        self.learner_ticket = self.ex.submit(self._learn, self.params, batch)

    def _learn(self, params: Any, batch: list[Consumed]) -> LearnerResult:
        return LearnerResult(self.learner(params, batch), self.cfg.learner_step_time)

    # -- events ------------------------------------------------------------------------------
    def _on_learner(self, result: Any) -> None:
        if isinstance(result, Failure):
            raise result.error
        self.params, self.learner_ticket = result.params, None
        self.version += 1
        self.steps += 1
        self._event(Kind.VERSION)
        self.step_end_times.append(self.ex.now())
        self._log("step", -1)
        if self.gate is not None:
            self.gate.on_step()
        self._enforce_bound()

    def _over(self, index: int) -> bool:
        rec = self.records[index]
        return self.version - rec.behaviour_version > stl.max_gap_for(self.scfg, rec.task_class)

    def _enforce_bound(self) -> None:
        for ticket, index in list(self.running.items()):
            if self._over(index):
                self.ex.cancel(ticket)
                del self.running[ticket]
                self._account_busy(index, self.records[index])
                self._event(Kind.CANCEL)
                self._resolve(index, Terminal.CANCELLED, "over_gap")
                self._group_outcome(index)
        for index in [i for i in self.paused if self._over(i)]:
            del self.paused[index]
            self._event(Kind.CANCEL)
            self._resolve(index, Terminal.CANCELLED, "over_gap")
            self._group_outcome(index)
        for index in [i for i in self.completed if self._over(i)]:
            del self.completed[index]
            self._event(Kind.REJECT)
            self._resolve(index, Terminal.REJECTED_STALE, "over_gap")
            if self.traj[index].final_reward is None:  # a masked member not yet counted
                self._group_outcome(index)
        for index in [i for i in (self.gate.holding() if self.gate else []) if self._over(i)]:
            self.gate.leave(index)  # its outcome already counted
            self._event(Kind.REJECT)
            self._resolve(index, Terminal.REJECTED_STALE, "over_gap")

    def _group_outcome(self, index: int, reward: float | None = None) -> None:
        """Dynamic sampling: one member's outcome; a decided group is released or dropped."""
        if self.gate is None:
            if reward is not None:
                self.completed[index] = None
            return
        task_id = self.records[index].task_id
        release, drop = self.gate.outcome(task_id, None if reward is None else index, reward)
        for i in release:
            self.completed[i] = None
        for i in drop:
            self._event(Kind.FILTER)
            self._resolve(i, Terminal.FILTERED, "uniform_group")

    def _account_busy(self, index: int, rec: Record) -> tuple[float, int]:
        start, version = self.round_start.pop(index)
        rec.busy_time += self.ex.now() - start
        return start, version

    def _on_round(self, index: int, result: RoundResult | Failure) -> None:
        rec = self.records[index]
        start, version = self._account_busy(index, rec)
        rec.rounds += 1
        if isinstance(result, Failure):
            self._event(Kind.FAIL)
            self._resolve(index, Terminal.FAILED, repr(result.error))
            return self._group_outcome(index)
        rec.generation_time += result.generation_time
        rec.env_time += result.env_time
        rec.recompute_time += result.recompute_time
        rec.env_intervals += [(start + a, start + b) for a, b in result.env_intervals]
        traj = result.trajectory
        traj.submit_index = index
        self.traj[index] = traj
        if result.paused:
            rec.pauses += 1
            self.state[index] = result.state
            self.paused[index] = version
            return self._log("pause", index)
        rec.stop_reason = traj.stop_reason.value
        rec.complete_time, rec.complete_version = self.ex.now(), self.version
        self._event(Kind.COMPLETE)
        self._log("complete", index)
        if traj.final_reward is None:  # masked in _take (its group outcome counts there)
            self.completed[index] = None
        else:
            self._group_outcome(index, float(traj.final_reward))

    def _shutdown(self) -> None:
        for ticket, index in list(self.running.items()):
            self.ex.cancel(ticket)
            self._account_busy(index, self.records[index])
            self._event(Kind.CANCEL)
            self._resolve(index, Terminal.CANCELLED, "shutdown")
        for index in list(self.paused) + self.round_queue:
            self._event(Kind.CANCEL)
            self._resolve(index, Terminal.CANCELLED, "shutdown")
        for c in self.batch:
            self._event(Kind.CANCEL, from_queue=True)
            self._resolve(c.index, Terminal.CANCELLED, "shutdown", taken=True)
        for index in [*self.completed, *(self.gate.holding() if self.gate else [])]:
            self._event(Kind.CANCEL, from_queue=True)
            self._resolve(index, Terminal.CANCELLED, "shutdown")
        if self.gate is not None:
            self.gate.held, self.gate.seen = {}, {}
        self.running, self.paused, self.round_queue, self.batch, self.completed = {}, {}, [], [], {}
        if not stl.is_conserved(self.st) or self.st.in_flight or self.st.queued:
            raise AssertionError(f"conservation violated: {self.st}")

    def run(self, num_steps: int) -> Scheduler:
        """Advances until ``num_steps`` learner steps in total (or the task source runs dry)."""
        while self.steps < num_steps:
            self._fill()
            self._maybe_train()
            self._fill()
            if self.ex.pending() == 0:
                break  # no task left and nothing in flight
            ticket, result = self.ex.next()
            if ticket == self.learner_ticket:
                self._on_learner(result)
            elif ticket in self.running:
                self._on_round(self.running.pop(ticket), result)
        return self

    def finished_trajectories(self, *, include_paused: bool = False) -> list[tuple[int, Any]]:
        """``(submit index, trajectory)`` of the episodes this scheduler holds, in submission order:
        those that finished, or with ``include_paused`` also those paused mid-round."""
        return [(i, t) for i, t in sorted(self.traj.items()) if include_paused or i not in self.paused]

    def finish(self) -> RunLog:
        """Cancels everything in flight or queued ("shutdown") and returns the log."""
        self._shutdown()
        return RunLog(
            self.cfg,
            self.scfg,
            self.records,
            self.batches,
            self.params,
            self.st,
            self.step_end_times,
            self.events,
        )

    def snapshot(self) -> bytes:
        """The run state as a versioned snapshot file (:mod:`agentjax.sampling.snapshot`; virtual
        clock only: real threads cannot be serialised). Trajectories already resolved (trained,
        rejected, ...) are left out: restore them from the journal (``trajectories``)."""
        return snap.dump_scheduler(self)

    @classmethod
    def restore(
        cls,
        blob: bytes,
        tasks: Iterable[Any],
        worker: RolloutWorker,
        learner: Callable[[Any, list[Consumed]], Any],
        *,
        admission: Callable[[stl.SampleInfo, stl.StalenessConfig], stl.Decision] = stl.admit,
        drift_fn: Callable[[Trajectory, int], float | None] | None = None,
        retry: Callable[[Any, Any, Trajectory], tuple[Any, Any]] | None = None,
        skip_drawn: bool = True,
        executor: SimulatedExecutor | None = None,
        trajectories: Mapping[int, Trajectory] | None = None,
        source: str = "snapshot",
    ) -> Scheduler:
        """Rebuilds a run from :meth:`snapshot`. ``tasks`` is a fresh task source: with
        ``skip_drawn`` the tasks already drawn are skipped (a deterministic source replays
        them); pass ``skip_drawn=False`` for an iterator restored from its own state.
        ``executor``: a fresh executor of the snapshot's kind (default: a SimulatedExecutor).
        ``trajectories`` (submission index -> trajectory, e.g. from the journal) fills in the
        trajectories of the batches trained before the snapshot (else they are None in the log).
        Raises :class:`~agentjax.sampling.snapshot.SnapshotError` naming ``source`` when the
        snapshot is not readable (truncated, corrupted, another format or version)."""
        obj = cls.__new__(cls)
        snap.load_scheduler(obj, blob, source=source, executor=executor, trajectories=trajectories)
        obj.tasks, obj.worker, obj.learner = iter(tasks), worker, learner
        obj.admission, obj.drift_fn, obj.retry = admission, drift_fn, retry
        if skip_drawn:  # a retried submission was not drawn from the source
            for _ in range(len(obj.records) - len(obj.retry_of)):
                next(obj.tasks)
        return obj


def run(
    tasks: Iterable[Any],
    worker: RolloutWorker,
    learner: Callable[[Any, list[Consumed]], Any],
    params: Any,
    *,
    config: SchedulerConfig,
    staleness_config: stl.StalenessConfig,
    batch_size: int,
    num_steps: int,
    executor: Any = None,
    admission: Callable[[stl.SampleInfo, stl.StalenessConfig], stl.Decision] = stl.admit,
    drift_fn: Callable[[Trajectory, int], float | None] | None = None,
) -> RunLog:
    """Runs ``num_steps`` learner steps (fewer if the task source runs dry) and accounts for all.

    Args:
      tasks: task objects with ``task_id`` and ``task_class``, in submission order.
      worker: runs one round of one rollout (see :class:`RolloutWorker`).
      learner: pure ``learner(params, batch) -> params``; ``batch`` is a list of :class:`Consumed`.
      params: initial parameters (version 0).
      config: mode, slots, window, partial-rollout budget, caps.
      staleness_config: bounds and admission policy (see :mod:`agentjax.sampling.staleness`).
      batch_size: trajectories per learner step.
      num_steps: learner steps to run.
      executor: :class:`SimulatedExecutor` (default, deterministic) or :class:`ThreadedExecutor`.
      admission: the per-sample admission policy.
      drift_fn: measured log-prob drift of a trajectory at the given learner version (optional).

    Returns:
      The run log. Everything still in flight or queued at the end is cancelled ("shutdown"), so
      every submission has exactly one terminal state.
    """
    return (
        Scheduler(
            tasks,
            worker,
            learner,
            params,
            config=config,
            staleness_config=staleness_config,
            batch_size=batch_size,
            executor=executor,
            admission=admission,
            drift_fn=drift_fn,
        )
        .run(num_steps)
        .finish()
    )
