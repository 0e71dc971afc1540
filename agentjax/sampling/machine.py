"""The scheduler's decisions as a pure state machine: ``step(state, event) -> (state, outputs)``.

One machine for every mode, a value chosen once (:class:`~agentjax.sampling.schedstate.Sync`,
``Async``, ``WindowedFifo(W)``): :func:`make` picks the mode's fill and consumption rules and the
gate's take rule, and returns ``Machine(spec, init, step)`` (optax style). The machine decides
admission, version assignment, which completed trajectories form each learner batch,
cancellation over the version-gap bound and dynamic sampling's drops; it runs nothing. The
driver (:class:`~agentjax.sampling.scheduler.Scheduler`) owns the executor, the worker, the
learner and the task source, turns what they report into events and applies the commands:

    events:   Tick(target)          run until ``target`` learner steps
              Drawn(tasks)          the task source's answer to Draw
              RoundDone(i, result)  a rollout round of submission i finished (or failed)
              LearnerDone()         the learner step finished
              Published(v)          weights of version v reach the samplers
              Shutdown()            cancel everything left (the run's end)
    commands: Draw(n)               draw up to n tasks from the source
              StartRound(i, item)   sample one round of submission i
              Cancel(i)             drop submission i's running round
              Train(batch, ...)     one learner step on these trajectories (whole groups)
              Publish(v)            make version v the sampling version
    account:  Note, Resolved, Finished: the run log's entries (event log, final records,
              trajectories), which the machine never reads back

``step`` is pure: it never changes its input state (every container it changes is copied
first), and the same state and event give the same outputs. The state holds only what later
decisions read: live submissions (a resolved one leaves it), so a step costs O(live), not
O(run). After an event the machine acts (fills slots, forms a batch, fills again) only while
``steps < target``; when it needs tasks it has not drawn, it asks (``Draw``) and acts again on
``Drawn``, from the point it stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

from agentjax.sampling import rules as rules_
from agentjax.sampling import staleness as stl
from agentjax.sampling.clock import Failure
from agentjax.sampling.groups import GroupGate, PassGate, UniformGroups
from agentjax.sampling.queue import WorkItem
from agentjax.sampling.runlog import Record, SchedulerConfig
from agentjax.sampling.schedstate import (
    EVENTS,
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
    Spec,
    StartRound,
    Sync,
    Tick,
    advance_window,
    mode_of,
)
from agentjax.sampling.staleness import Event, Kind, Terminal


class Machine(NamedTuple):
    """``init(version=0) -> state`` and the pure ``step(state, event) -> (state, outputs)``."""

    spec: Spec
    init: Callable[..., SchedulerState]
    step: Callable[[SchedulerState, Any], tuple[SchedulerState, tuple]]


def make(
    config: SchedulerConfig,
    staleness: stl.StalenessConfig,
    *,
    batch_size: int,
    group_size: int = 1,
    admission: Callable[[stl.SampleInfo, stl.StalenessConfig], stl.Decision] = stl.admit,
    drift: Callable | None = None,
    retry: Callable | None = None,
) -> Machine:
    """Checks the sizes and builds the machine. ``retry(state, task, trajectory) -> (state,
    task_or_None)``: called for every infra fault (masked); a returned task is submitted again
    before any new one (:mod:`agentjax.sampling.retry`). ``drift(trajectory, version)``: a
    measured log-prob drift for admission. With ``config.uniform_groups='drop'``, groups of
    ``group_size`` members (consecutive tasks with one ``task_id``) whose rewards are all equal
    are dropped (:mod:`agentjax.sampling.groups`)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is invalid; must be an integer >= 1")
    drop = config.uniform_groups == UniformGroups.DROP
    if drop and (not isinstance(group_size, int) or group_size < 2):
        raise ValueError(f"uniform_groups='drop' needs groups: group_size={group_size!r} must be >= 2")
    staleness = staleness.resolved(batch_size, config.num_slots)
    if staleness.queue_capacity < batch_size:
        raise ValueError("queue_capacity must be >= batch_size (else the learner starves)")
    spec = Spec(config, staleness, batch_size, group_size, mode_of(config), drop, admission, drift, retry)
    barrier = isinstance(spec.mode, Sync)
    rules = _Rules(
        fill=rules_.Consumption.fill_sync if barrier else rules_.Consumption.fill_async,
        next_take=rules_.Consumption.next_take_groups if drop else rules_.Consumption.next_take,
        barrier=barrier,
    )

    def init(version: int = 0) -> SchedulerState:
        """A fresh run at ``version`` (a real-time resume continues the checkpoint's)."""
        gate = GroupGate(group_size, config.drop_budget * batch_size) if drop else PassGate()
        return SchedulerState(version=version, steps=version, st=stl.init(staleness), gate=gate)

    def step(state: SchedulerState, event) -> tuple[SchedulerState, tuple]:
        if not isinstance(event, EVENTS):
            raise TypeError(f"not a scheduler event: {event!r} (one of {[e.__name__ for e in EVENTS]})")
        return _Work(spec, rules, state, event.now).apply(event)

    return Machine(spec, init, step)


class _Rules(NamedTuple):
    fill: Callable  # the mode's slot filling
    next_take: Callable  # plain, or whole groups (dynamic sampling)
    barrier: bool  # sync: train only once the round is complete


class _Work(rules_.Consumption):
    """One step's working copy of the state (its containers copied, records copied on first
    change); :meth:`freeze` makes the new state. Never outlives the step."""

    def __init__(self, spec: Spec, rules: _Rules, s: SchedulerState, now: float):
        self.spec, self.rules, self.cfg, self.now = spec, rules, spec.config, now
        self.version, self.steps, self.target, self.st = s.version, s.steps, s.target, s.st
        self.gate, self.head, self.resolved = s.gate.copy(), s.head, s.resolved
        self.records, self.task, self.traj = dict(s.records), dict(s.task), dict(s.traj)
        self.resumable, self.running, self.paused = dict(s.resumable), dict(s.running), dict(s.paused)
        self.completed = dict.fromkeys(s.completed)  # insertion order: completion order
        self.batch, self.training = list(s.batch), s.training
        self.round_open, self.round_queue = s.round_open, list(s.round_queue)
        self.retry_queue, self.retry_of = list(s.retry_queue), dict(s.retry_of)
        self.retry_states, self.submitted = dict(s.retry_states), s.submitted
        self.offered, self.exhausted, self.drawn = list(s.offered), s.exhausted, s.drawn
        self.dead: list[int] = []  # resolved in this step: they leave the state
        self.out: list = []

    # -- the step ----------------------------------------------------------------------------
    def apply(self, event) -> tuple[SchedulerState, tuple]:
        match event:
            case Tick(target=target):
                self.target = target
            case Drawn(tasks=tasks, exhausted=exhausted):
                self.offered += tasks
                self.exhausted, self.drawn = exhausted, self.drawn + len(tasks)
            case RoundDone(index=index, result=result):
                if index not in self.running:
                    return self.freeze()  # a round cancelled meanwhile
                self.on_round(index, result)
            case LearnerDone():
                self.out.append(Publish(self.version + 1))
                return self.freeze()  # acts again once the version is published
            case Published(version=version):
                self.on_published(version)
            case Shutdown():
                self.shutdown()
                return self.freeze()
        if self.steps < self.target:
            try:
                self.rules.fill(self)
                self.maybe_train()
                self.rules.fill(self)
            except rules_.NeedTasks as need:
                self.out.append(Draw(need.count))
        return self.freeze()

    def freeze(self) -> tuple[SchedulerState, tuple]:
        for i in self.dead:
            self.out.append(Resolved(self.records[i], self.task[i]))
        dead = set(self.dead)
        live = lambda d: {k: v for k, v in d.items() if k not in dead}  # noqa: E731
        state = SchedulerState(
            version=self.version, steps=self.steps, target=self.target, st=self.st,
            gate=self.gate, head=self.head, resolved=self.resolved,
            submitted=self.submitted, records=live(self.records), task=live(self.task),
            traj=live(self.traj), resumable=live(self.resumable), running=self.running,
            paused=self.paused, completed=tuple(self.completed), batch=tuple(self.batch),
            training=self.training, round_open=self.round_open,
            round_queue=tuple(self.round_queue), retry_queue=tuple(self.retry_queue),
            retry_of=self.retry_of, retry_states=self.retry_states, offered=tuple(self.offered),
            exhausted=self.exhausted, drawn=self.drawn,
        )  # fmt: skip
        return state, tuple(self.out)

    # -- bookkeeping -------------------------------------------------------------------------
    def update(self, index: int, **changes) -> Record:
        """Submission ``index``'s record with ``changes`` (records are immutable values)."""
        rec = self.records[index] = dataclasses.replace(self.records[index], **changes)
        return rec

    def log(self, kind: str, index: int) -> None:
        self.out.append(Note(self.now, kind, index, self.version))

    def event(self, kind: Kind, **kw) -> None:
        self.st = stl.update(self.st, Event(kind, **kw))

    def resolve(self, index: int, terminal: Terminal, reason: str = "", taken: bool = False) -> None:
        self.update(index, terminal=terminal, reason=reason, resolve_time=self.now)
        if not taken:  # a taken sample already left the window
            self.resolve_window(index)
        self.log(terminal.value, index)
        self.dead.append(index)

    def resolve_window(self, index: int) -> None:
        self.head, self.resolved = advance_window(self.head, self.resolved, index)

    def submit_new(self, want: int) -> int | None:
        """The next submission (a retry first, then a drawn task); None when the source is dry.
        Asks for ``want`` tasks (ending the step's actions) when none is drawn."""
        origin = None
        if self.retry_queue:
            origin, task = self.retry_queue.pop(0)
        elif self.offered:
            task = self.offered.pop(0)
        elif self.exhausted:
            return None
        else:
            raise rules_.NeedTasks(want)
        index, self.submitted = self.submitted, self.submitted + 1
        if origin is not None:
            self.retry_of[index] = origin
        self.records[index] = Record(
            index, str(task.task_id), str(task.task_class), self.now, self.version, resume=self.cfg.resume
        )
        self.task[index] = task
        self.event(Kind.SUBMIT)
        self.log("submit", index)
        return index

    def start_round(self, index: int) -> None:
        rec = self.records[index]
        item = WorkItem(
            self.task[index],
            self.version,
            self.cfg.round_budget or None,
            self.cfg.caps,
            self.cfg.resume,
            self.resumable.pop(index, None),
        )
        self.out.append(StartRound(index, item))
        self.running[index] = (self.now, self.version)
        if rec.behaviour_version < 0:
            self.update(index, behaviour_version=self.version)
        self.log("resume" if rec.rounds else "start", index)

    # -- events ------------------------------------------------------------------------------
    def on_published(self, version: int) -> None:
        if not self.training or version != self.version + 1:
            raise ValueError(f"Published({version}) without a learner step to version {self.version + 1}")
        self.training = False
        self.version += 1
        self.steps += 1
        self.event(Kind.VERSION)
        self.log("step", -1)
        self.gate.on_step()
        self.enforce_bound()

    def over(self, index: int) -> bool:
        rec = self.records[index]
        return self.version - rec.behaviour_version > stl.max_gap_for(self.spec.staleness, rec.task_class)

    def enforce_bound(self) -> None:
        for index in [i for i in self.running if self.over(i)]:
            self.out.append(Cancel(index))
            self.account_busy(index)
            self.event(Kind.CANCEL)
            self.resolve(index, Terminal.CANCELLED, "over_gap")
            self.group_outcome(index)
        for index in [i for i in self.paused if self.over(i)]:
            del self.paused[index]
            self.event(Kind.CANCEL)
            self.resolve(index, Terminal.CANCELLED, "over_gap")
            self.group_outcome(index)
        for index in [i for i in self.completed if self.over(i)]:
            del self.completed[index]
            self.event(Kind.REJECT)
            self.resolve(index, Terminal.REJECTED_STALE, "over_gap")
            if self.traj[index].final_reward is None:  # a masked member not yet counted
                self.group_outcome(index)
        for index in [i for i in self.gate.holding() if self.over(i)]:
            self.gate.leave(index)  # its outcome already counted
            self.event(Kind.REJECT)
            self.resolve(index, Terminal.REJECTED_STALE, "over_gap")

    def group_outcome(self, index: int, reward: float | None = None) -> None:
        """One member's outcome; the gate releases a decided group or drops it."""
        task_id = self.records[index].task_id
        release, drop = self.gate.outcome(task_id, None if reward is None else index, reward)
        for i in release:
            self.completed[i] = None
        for i in drop:
            self.event(Kind.FILTER)
            self.resolve(i, Terminal.FILTERED, "uniform_group")

    def account_busy(self, index: int) -> tuple[float, int]:
        start, version = self.running.pop(index)
        self.update(index, busy_time=self.records[index].busy_time + self.now - start)
        return start, version

    def on_round(self, index: int, result) -> None:
        start, version = self.account_busy(index)
        rec = self.update(index, rounds=self.records[index].rounds + 1)
        if isinstance(result, Failure):
            self.event(Kind.FAIL)
            self.resolve(index, Terminal.FAILED, repr(result.error))
            return self.group_outcome(index)
        rec = self.update(
            index,
            generation_time=rec.generation_time + result.generation_time,
            env_time=rec.env_time + result.env_time,
            recompute_time=rec.recompute_time + result.recompute_time,
            env_intervals=rec.env_intervals + [(start + a, start + b) for a, b in result.env_intervals],
        )
        traj = dataclasses.replace(result.trajectory, submit_index=index)
        self.traj[index] = traj
        self.out.append(Finished(index, traj))
        if result.paused:
            self.update(index, pauses=rec.pauses + 1)
            self.resumable[index] = result.state
            self.paused[index] = version
            return self.log("pause", index)
        self.update(
            index, stop_reason=traj.stop_reason.value, complete_time=self.now, complete_version=self.version
        )
        self.event(Kind.COMPLETE)
        self.log("complete", index)
        if traj.final_reward is None:  # masked in take (its group outcome counts there)
            self.completed[index] = None
        else:
            self.group_outcome(index, float(traj.final_reward))

    def shutdown(self) -> None:
        for index in list(self.running):
            self.out.append(Cancel(index))
            self.account_busy(index)
            self.event(Kind.CANCEL)
            self.resolve(index, Terminal.CANCELLED, "shutdown")
        for index in list(self.paused) + self.round_queue:
            self.event(Kind.CANCEL)
            self.resolve(index, Terminal.CANCELLED, "shutdown")
        for c in self.batch:
            self.event(Kind.CANCEL, from_queue=True)
            self.resolve(c.index, Terminal.CANCELLED, "shutdown", taken=True)
        for index in [*self.completed, *self.gate.holding()]:
            self.event(Kind.CANCEL, from_queue=True)
            self.resolve(index, Terminal.CANCELLED, "shutdown")
        self.gate.clear()
        self.paused, self.round_queue, self.batch, self.completed = {}, [], [], {}
        if not stl.is_conserved(self.st) or self.st.in_flight or self.st.queued:
            raise AssertionError(f"conservation violated: {self.st}")
