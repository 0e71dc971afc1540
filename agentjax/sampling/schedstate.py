"""The scheduler state machine's values: modes, events, commands, the state and the spec.

The machine itself (``make``, ``step``) is :mod:`agentjax.sampling.machine`.

Every value here is immutable (frozen dataclasses and NamedTuples), so a state can be kept,
compared, encoded (the scheduler snapshot) and sent to another process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

from agentjax.sampling import staleness as stl
from agentjax.sampling.clock import Failure
from agentjax.sampling.groups import GroupGate, PassGate
from agentjax.sampling.queue import RoundResult, SchedulerMode, WorkItem
from agentjax.sampling.runlog import Consumed, Record, SchedulerConfig


# -- the mode: a value ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Sync:
    """A barrier: a round of ``batch_size`` units, then one learner step on it."""


@dataclasses.dataclass(frozen=True)
class Async:
    """Free slots take work while the staleness bound admits it; greedy consumption."""


@dataclasses.dataclass(frozen=True)
class WindowedFifo:
    """As :class:`Async`, consuming only submissions in ``[head, head + window)``."""

    window: int


Mode = Sync | Async | WindowedFifo


def mode_of(config: SchedulerConfig) -> Mode:
    """The mode value of the run config's ``scheduler.mode`` (and ``window``)."""
    if config.mode == SchedulerMode.SYNC:
        return Sync()
    if config.mode == SchedulerMode.ASYNC:
        return Async()
    return WindowedFifo(config.window)


def consumable(mode: Mode, completed, head: int) -> list[int]:
    """Submission indices the learner may take now, in the order it takes them: ``async`` in
    completion order, ``windowed_fifo(W)`` those in ``[head, head + W)`` in submission order
    (``head``: the oldest unresolved submission; W = 1 is strict FIFO), ``sync`` all, in
    submission order."""
    match mode:
        case Async():
            return list(completed)
        case WindowedFifo(window=w):
            return sorted(i for i in completed if i < head + w)
        case Sync():
            return sorted(completed)
    raise TypeError(f"not a scheduler mode: {mode!r}")


def advance_window(head: int, resolved: frozenset[int], index: int) -> tuple[int, frozenset[int]]:
    """The window after submission ``index`` resolves: ``resolved`` holds the resolved indices
    above ``head`` (the oldest unresolved one), which moves past every resolved index."""
    if index < head or index in resolved:
        raise ValueError(f"submission {index} resolved twice")
    rest = set(resolved) | {index}
    while head in rest:
        rest.remove(head)
        head += 1
    return head, frozenset(rest)


# -- events --------------------------------------------------------------------------------------
class Tick(NamedTuple):
    now: float
    target: int  # learner steps to run to (the machine acts only while steps < target)


class Drawn(NamedTuple):
    now: float
    tasks: tuple
    exhausted: bool  # the source gave fewer than asked: it is dry


class RoundDone(NamedTuple):
    now: float
    index: int
    result: RoundResult | Failure


class LearnerDone(NamedTuple):
    now: float


class Published(NamedTuple):
    now: float
    version: int


class Shutdown(NamedTuple):
    now: float


EVENTS = (Tick, Drawn, RoundDone, LearnerDone, Published, Shutdown)


# -- commands and the account --------------------------------------------------------------------
class Draw(NamedTuple):
    count: int


class StartRound(NamedTuple):
    index: int
    item: WorkItem


class Cancel(NamedTuple):
    index: int


class Train(NamedTuple):
    """One learner step: the batch (whole groups under dynamic sampling), the time it was formed
    and dynamic sampling's account at that time (empty without it)."""

    batch: tuple[Consumed, ...]
    time: float
    sampling: dict


class Publish(NamedTuple):
    version: int


class Note(NamedTuple):
    """One entry of the run's event log: (time, kind, submission index, version)."""

    time: float
    kind: str
    index: int
    version: int


class Resolved(NamedTuple):
    record: Record  # a submission's final record (it has left the state)
    task: Any


class Finished(NamedTuple):
    index: int
    trajectory: Any  # a round's trajectory so far (paused or complete)


# -- the state -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SchedulerState:
    """Everything later decisions read; immutable (``step`` returns a new one).

    ``records``, ``task``, ``traj`` hold live (unresolved) submissions only; ``running`` maps a
    submission to the (time, version) its round started at; ``paused`` to the version of the
    round that paused; ``completed`` lists completed, untaken ones in completion order;
    ``resumable`` holds the worker's state of paused rollouts. ``offered``: tasks drawn from the
    source, not yet submitted; ``drawn`` counts every task drawn."""

    version: int = 0
    steps: int = 0
    target: int = 0
    st: stl.StalenessState | None = None
    gate: GroupGate | PassGate = PassGate()
    head: int = 0
    resolved: frozenset = frozenset()
    submitted: int = 0
    records: dict = dataclasses.field(default_factory=dict)
    task: dict = dataclasses.field(default_factory=dict)
    traj: dict = dataclasses.field(default_factory=dict)
    resumable: dict = dataclasses.field(default_factory=dict)
    running: dict = dataclasses.field(default_factory=dict)
    paused: dict = dataclasses.field(default_factory=dict)
    completed: tuple = ()
    batch: tuple = ()
    training: bool = False
    round_open: bool = False
    round_queue: tuple = ()
    retry_queue: tuple = ()
    retry_of: dict = dataclasses.field(default_factory=dict)
    retry_states: dict = dataclasses.field(default_factory=dict)
    offered: tuple = ()
    exhausted: bool = False
    drawn: int = 0


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the machine is built with (fixed for a run): configs, sizes, the mode value, the
    gate kind and the pure policies (admission, drift, retry)."""

    config: SchedulerConfig
    staleness: stl.StalenessConfig
    batch_size: int
    group_size: int
    mode: Mode
    drop: bool
    admission: Callable[[stl.SampleInfo, stl.StalenessConfig], stl.Decision]
    drift: Callable | None
    retry: Callable | None
