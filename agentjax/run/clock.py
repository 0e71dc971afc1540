"""The run's clock, chosen once: what is clock-specific in a run besides its executor.

``scheduler.clock`` (and ``--replay``) select one of three values; the composition root
(:mod:`agentjax.run.loop`) asks it, never the config, how to build the scheduler's executor, what a
checkpoint stores for the scheduler, how a resume rebuilds it, and what the summary records:

* :class:`VirtualClock`: a :class:`BatchingExecutor`; a checkpoint stores the scheduler
  snapshot and a resume restores it exactly.
* :class:`RealClock`: a :class:`RealtimeExecutor` (sampler and learner threads); threads hold
  the work in flight, so a checkpoint stores a *redo record* (the tasks drawn and unresolved, as
  whole GRPO groups under dynamic sampling, and how many submissions there were) and a resume
  builds a fresh scheduler at the checkpoint's version that samples those tasks again first
  (:class:`Redo`), then the task stream from its checkpointed position. Nothing drawn is lost;
  the episodes in flight are sampled anew. The summary records how much sampling and learning
  overlapped, and ``schedule.json`` the order of the deliveries (for ``--replay``).
* :class:`ReplayClock`: a recorded real-time run again (:class:`ReplayExecutor`).

With several processes (``channel``: the run's control plane) the real clock's executor is a
:class:`~agentjax.sampling.spread.SpreadExecutor`: process 0 decides the order of deliveries,
every process runs the same scheduler on it, and each samples only its own rounds; a replay
makes every process follow the recorded order.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from agentjax.sampling import snapshot
from agentjax.sampling.queue import Clock
from agentjax.sampling.realtime import RealtimeExecutor
from agentjax.sampling.replay import ReplayExecutor, write_schedule
from agentjax.sampling.scheduler import Scheduler
from agentjax.sampling.spread import SpreadExecutor
from agentjax.sampling.worker import BatchingExecutor


class Redo:
    """A task source: the ``pending`` tasks first, then ``rest``'s (whose state checkpoints)."""

    def __init__(self, rest, pending):
        self.rest, self.pending = rest, list(pending)

    def __iter__(self):
        return self

    def __next__(self):
        return self.pending.pop(0) if self.pending else next(self.rest)

    def get_state(self):
        return self.rest.get_state()


def redo_record(scheduler: Scheduler, tasks, base: int) -> dict:
    """A real-time checkpoint's resume record: the tasks to sample again
    (:meth:`Scheduler.redo_tasks`, then those a previous resume left to redo) and the
    submissions so far (``base``: before a resume)."""
    return {
        "kind": "realtime",
        "redo": scheduler.redo_tasks() + list(getattr(tasks, "pending", [])),
        "submitted": base + len(scheduler.records),
    }


@dataclasses.dataclass(frozen=True)
class Resumed:
    """A resumed scheduler, the task source it draws from and the submissions before it."""

    scheduler: Scheduler
    tasks: Any
    index_base: int = 0


@dataclasses.dataclass(frozen=True)
class VirtualClock:
    def executor(self):
        return BatchingExecutor()

    def checkpoint_blob(self, scheduler: Scheduler, tasks, base: int) -> bytes:
        return scheduler.snapshot()

    def resume(self, blob: bytes, path: str, step: int, tasks, build: Callable, restore: Callable) -> Resumed:
        """``restore(blob, tasks, executor, source)``: the snapshot's scheduler, continued exactly."""
        return Resumed(restore(blob, tasks, self.executor(), path), tasks)

    def finish(self, scheduler: Scheduler, workdir: str, config: dict, resumed_at: int | None) -> dict:
        return {}


@dataclasses.dataclass(frozen=True)
class RealClock:
    channel: Any = None  # sharding.exchange.Channel: several processes

    def executor(self):
        return RealtimeExecutor() if self.channel is None else SpreadExecutor(self.channel)

    def checkpoint_blob(self, scheduler: Scheduler, tasks, base: int) -> bytes:
        return snapshot.dumps(redo_record(scheduler, tasks, base))

    def resume(self, blob: bytes, path: str, step: int, tasks, build: Callable, restore: Callable) -> Resumed:
        """``build(tasks, version, executor)``: a fresh scheduler at the checkpoint's version
        that samples the redo record's tasks first."""
        rec = snapshot.loads(blob, source=path, fields=("kind", "redo", "submitted"))
        if rec["kind"] != "realtime":
            raise snapshot.SnapshotError(f"{path} is a virtual-clock snapshot, not a redo record")
        tasks = Redo(tasks, rec["redo"])
        return Resumed(build(tasks, step, self.executor()), tasks, rec["submitted"])

    def finish(self, scheduler: Scheduler, workdir: str, config: dict, resumed_at: int | None) -> dict:
        """Stops the threads; the overlap report, and the schedule ``--replay`` re-executes."""
        ex = scheduler.ex
        ex.close()
        if self.channel is None or self.channel.process == 0:  # the run's files: process 0's
            write_schedule(workdir, config, ex.delivered, scheduler.step_end_times, resumed_at)
        return {"realtime": ex.report()}


@dataclasses.dataclass(frozen=True)
class ReplayClock(RealClock):
    schedule: tuple = ()  # the recorded deliveries
    source: str = ""  # the recorded run's workdir

    def executor(self):
        if self.channel is not None:
            return SpreadExecutor(self.channel, recorded=self.schedule)
        return ReplayExecutor(list(self.schedule))

    def finish(self, scheduler: Scheduler, workdir: str, config: dict, resumed_at: int | None) -> dict:
        return {"replayed": os.path.abspath(self.source)}


def choose(
    clock: Clock, schedule=None, source: str = "", channel=None
) -> VirtualClock | RealClock | ReplayClock:
    """The run's clock value: ``schedule`` (the deliveries of ``source``) replays a real-time run;
    ``channel``: the control plane of a multi-process real-time run."""
    if schedule is not None:
        return ReplayClock(channel, tuple(schedule), source)
    return RealClock(channel) if clock == Clock.REAL else VirtualClock()
