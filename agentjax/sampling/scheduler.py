"""One scheduler for every mode: ``sync``, ``async`` and ``windowed_fifo(window)``.

The decisions are a pure state machine (:mod:`agentjax.sampling.machine`); :class:`Scheduler`
is its driver: it owns the executor, applies the machine's commands and feeds it the events.
It drives rollout workers through :class:`~agentjax.sampling.queue.RolloutWorker` (one call per
round of one rollout) and a learner ``learner(params, train) -> params`` (``train``: the
machine's :class:`~agentjax.sampling.schedstate.Train` command; ``train.batch`` the trajectories);
both run as jobs on an executor from :mod:`agentjax.sampling.clock`: the virtual clock makes a run
a pure function of its inputs (same seed -> same trajectories in the same order, same
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
cache (``keep``). Per-task caps (``Caps``) end the episode with ``StopReason.TASK_CAP``.
After each learner step, rollouts whose version gap already exceeds the hard bound are cancelled
and queued ones rejected, so no trained sample ever exceeds the configured gap.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from agentjax.sampling import machine as mc
from agentjax.sampling import snapshot as snap
from agentjax.sampling import staleness as stl
from agentjax.sampling.clock import Failure, SimulatedExecutor
from agentjax.sampling.queue import RolloutWorker
from agentjax.sampling.runlog import Consumed, Record, RunLog, SchedulerConfig
from agentjax.sampling.schedstate import (
    Cancel,
    Draw,
    Drawn,
    Finished,
    LearnerDone,
    Note,
    Publish,
    Published,
    Resolved,
    RoundDone,
    SchedulerState,
    Shutdown,
    StartRound,
    Tick,
    Train,
)
from agentjax.trajectory import Trajectory

__all__ = ["Consumed", "Record", "RunLog", "Scheduler", "SchedulerConfig", "Train", "run"]

Learner = Callable[[Any, Train], Any]


class LearnerResult(NamedTuple):
    params: Any
    duration: float


@dataclasses.dataclass
class Account:
    """What the machine reports and never reads back: resolved records (and their tasks), the
    trajectories of finished rounds, the trained batches, the event log and step end times."""

    records: dict[int, Record] = dataclasses.field(default_factory=dict)
    tasks: dict[int, Any] = dataclasses.field(default_factory=dict)
    traj: dict[int, Trajectory] = dataclasses.field(default_factory=dict)
    batches: list[list[Consumed]] = dataclasses.field(default_factory=list)
    events: list[tuple[float, str, int, int]] = dataclasses.field(default_factory=list)
    step_end_times: list[float] = dataclasses.field(default_factory=list)


class Scheduler:
    """The machine's driver: a resumable run. ``run(num_steps)`` continues to a total step count,
    ``finish()`` cancels whatever is left and returns the :class:`RunLog`. On the virtual clock
    the whole run (machine state, clock heap with its in-flight results, tickets, account)
    round-trips through :meth:`snapshot` / :meth:`restore`, and a restored run continues exactly
    as the uninterrupted one would have.

    ``retry``, ``admission``, ``drift_fn`` and ``group_size``: see :func:`machine.make`.
    ``version``: the learner version the run starts at (a real-time resume continues its
    checkpoint's; ``params`` is then that version's)."""

    def __init__(
        self,
        tasks: Iterable[Any],
        worker: RolloutWorker,
        learner: Learner,
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
        version: int = 0,
        _state: SchedulerState | None = None,
        _account: Account | None = None,
        _tickets: Mapping[int, int] | None = None,
        _learner_ticket: int | None = None,
    ) -> None:
        self.machine = mc.make(
            config,
            staleness_config,
            batch_size=batch_size,
            group_size=group_size,
            admission=admission,
            drift=drift_fn,
            retry=retry,
        )
        self.state = self.machine.init(version) if _state is None else _state
        self.tasks, self.worker, self.learner, self.params = iter(tasks), worker, learner, params
        self.ex = SimulatedExecutor() if executor is None else executor
        self.account = Account(traj=dict(self.state.traj)) if _account is None else _account
        self.ticket_of: dict[int, int] = dict(_tickets or {})  # running submission -> its ticket
        self.index_of = {t: i for i, t in self.ticket_of.items()}
        self.learner_ticket = _learner_ticket

    # -- what the run reads ------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.state.steps

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def records(self) -> list[Record]:
        """Every submission's record so far, in submission order (live ones as they stand)."""
        done, live = self.account.records, self.state.records
        return [done[i] if i in done else live[i] for i in range(self.state.submitted)]

    @property
    def traj(self) -> dict[int, Trajectory]:
        return self.account.traj

    @property
    def batches(self) -> list[list[Consumed]]:
        return self.account.batches

    @property
    def step_end_times(self) -> list[float]:
        return self.account.step_end_times

    def finished_trajectories(self, *, include_paused: bool = False) -> list[tuple[int, Any]]:
        """``(submit index, trajectory)`` of the episodes this scheduler holds, in submission order:
        those that finished, or with ``include_paused`` also those paused mid-round."""
        paused = self.state.paused
        return [(i, t) for i, t in sorted(self.traj.items()) if include_paused or i not in paused]

    def redo_tasks(self) -> list[Any]:
        """The tasks a real-time resume samples again, in order: every drawn, unresolved one (under
        dynamic sampling every original member of a group with an unresolved member, since its
        gate decides on whole groups), then those drawn and not yet submitted."""
        s, tasks = self.state, {**self.account.tasks, **self.state.task}
        if not self.machine.spec.drop:
            redo = [tasks[i] for i in sorted(s.records)]
        else:
            open_groups = {rec.task_id for rec in s.records.values()}
            redo = [
                tasks[i]
                for i, rec in enumerate(self.records)
                if rec.task_id in open_groups and i not in s.retry_of
            ]
        return redo + list(s.offered)

    # -- driving -----------------------------------------------------------------------------
    def _feed(self, event) -> None:
        """Steps the machine on ``event`` and applies its outputs, until none asks for more."""
        while event is not None:
            self.state, outputs = self.machine.step(self.state, event)
            event = None
            for out in outputs:
                event = self._apply(out) or event

    def _apply(self, out):
        """Applies one output; returns the event that answers it (Draw, Publish), else None."""
        a = self.account
        match out:
            case Note():
                a.events.append(tuple(out))
                if out.kind == "step":
                    a.step_end_times.append(out.time)
            case StartRound(index=index, item=item):
                ticket = self.ex.submit_round(self.worker, item)
                self.ticket_of[index], self.index_of[ticket] = ticket, index
            case Cancel(index=index):
                ticket = self.ticket_of.pop(index)
                del self.index_of[ticket]
                self.ex.cancel(ticket)
            case Finished(index=index, trajectory=traj):
                a.traj[index] = traj
            case Resolved(record=rec, task=task):
                a.records[rec.index], a.tasks[rec.index] = rec, task
            case Train(batch=batch):
                a.batches.append(list(batch))
                a.traj.update((c.index, c.trajectory) for c in batch)  # with its queue time
                self.learner_ticket = self.ex.submit(self._learn, self.params, out)
            case Publish(version=version):  # the learner's job has synced the weights
                return Published(self.ex.now(), version)
            case Draw(count=count):
                drawn = tuple(itertools.islice(self.tasks, count))
                return Drawn(self.ex.now(), drawn, len(drawn) < count)
            case _:
                raise TypeError(f"not a scheduler output: {out!r}")
        return None

    def _learn(self, params: Any, train: Train) -> LearnerResult:
        return LearnerResult(self.learner(params, train), self.machine.spec.config.learner_step_time)

    def run(self, num_steps: int) -> Scheduler:
        """Advances until ``num_steps`` learner steps in total (or the task source runs dry)."""
        self._feed(Tick(self.ex.now(), num_steps))
        while self.state.steps < num_steps and self.ex.pending():
            ticket, result = self.ex.next()
            if ticket == self.learner_ticket:
                if isinstance(result, Failure):
                    raise result.error
                self.params, self.learner_ticket = result.params, None
                self._feed(LearnerDone(self.ex.now()))
            elif ticket in self.index_of:
                index = self.index_of.pop(ticket)
                del self.ticket_of[index]
                self._feed(RoundDone(self.ex.now(), index, result))
        return self

    def finish(self) -> RunLog:
        """Cancels everything in flight or queued ("shutdown") and returns the log."""
        self._feed(Shutdown(self.ex.now()))
        spec = self.machine.spec
        return RunLog(
            spec.config,
            spec.staleness,
            self.records,
            self.batches,
            self.params,
            self.state.st,
            self.step_end_times,
            self.account.events,
        )

    # -- snapshot ----------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The run as a versioned snapshot file (:mod:`agentjax.sampling.snapshot`; virtual clock
        only: real threads cannot be serialised): the machine state, the driver's tickets and
        parameters, the account without trajectories (the journal holds those) and the clock."""
        if not isinstance(self.ex, SimulatedExecutor):
            raise TypeError("only a virtual-clock run (SimulatedExecutor) can be snapshotted")
        executor = self.ex.snapshot_state()  # first: a batching executor runs deferred rounds
        spec, a = self.machine.spec, self.account
        return snap.dumps({
            "config": spec.config, "staleness": spec.staleness, "batch_size": spec.batch_size,
            "group_size": spec.group_size, "machine": self.state, "params": self.params,
            "tickets": self.ticket_of, "learner_ticket": self.learner_ticket,
            "records": a.records, "events": a.events, "step_end_times": a.step_end_times,
            "batches": [[c._replace(trajectory=None) for c in b] for b in a.batches],
            "executor": executor,
        })  # fmt: skip

    @classmethod
    def restore(
        cls,
        blob: bytes,
        tasks: Iterable[Any],
        worker: RolloutWorker,
        learner: Learner,
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
        d = snap.loads(blob, source=source, fields=snap.FIELDS)
        ex = SimulatedExecutor() if executor is None else executor
        if d["executor"].get("kind") != type(ex).__name__:
            raise snap.SnapshotError(
                f"{source} was taken with a {d['executor'].get('kind')}; "
                f"pass executor= of that kind (got {type(ex).__name__})"
            )
        ex.load_snapshot_state(d["executor"])
        state, have = d["machine"], trajectories or {}
        account = Account(
            records=d["records"],
            traj=dict(state.traj),
            batches=[[c._replace(trajectory=have.get(c.index)) for c in b] for b in d["batches"]],
            events=d["events"],
            step_end_times=d["step_end_times"],
        )
        tasks = iter(tasks)
        if skip_drawn:  # a deterministic source replays the tasks already drawn: skip them
            for _ in range(state.drawn):
                next(tasks)
        return cls(
            tasks,
            worker,
            learner,
            d["params"],
            config=d["config"],
            staleness_config=d["staleness"],
            batch_size=d["batch_size"],
            group_size=d["group_size"],
            executor=ex,
            admission=admission,
            drift_fn=drift_fn,
            retry=retry,
            _state=state,
            _account=account,
            _tickets=d["tickets"],
            _learner_ticket=d["learner_ticket"],
        )


def run(
    tasks: Iterable[Any],
    worker: RolloutWorker,
    learner: Learner,
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
      learner: ``learner(params, train) -> params``; ``train.batch`` is a tuple of :class:`Consumed`.
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
    sch = Scheduler(
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
    return sch.run(num_steps).finish()
