"""The scheduler's configuration and its account of a run: per-submission records and the log.

``SchedulerConfig.mode`` is one of ``("sync", "async", "windowed_fifo")`` (``window`` for the
latter); invalid values raise ``ValueError`` naming the field and the allowed values. A
:class:`Record` is one submission's life: versions (behaviour, completion, consumption, hence the
generation-time and queue-time version gaps), times, rounds and pauses, slot time, and its one
terminal state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from agentjax.sampling import staleness as stl
from agentjax.sampling.queue import MODES, RESUME, TaskCaps
from agentjax.sampling.staleness import Admission, Terminal
from agentjax.trajectory import Trajectory


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    mode: str = "async"  # one of MODES
    batch_size: int = 32  # trajectories per learner step
    num_slots: int = 32  # concurrent rollout rounds ("devices")
    window: int | None = None  # windowed_fifo only
    round_budget: int | None = None  # action tokens per rollout per round (partial rollout)
    resume: str = "recompute"  # one of RESUME
    caps: TaskCaps = TaskCaps()
    learner_step_time: float = 0.0  # seconds per learner step on the virtual clock

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.resume not in RESUME:
            raise ValueError(f"resume must be one of {RESUME}, got {self.resume!r}")
        if self.mode == "windowed_fifo" and (self.window is None or self.window < 1):
            raise ValueError(f"window must be an int >= 1 for windowed_fifo, got {self.window!r}")
        if self.mode != "windowed_fifo" and self.window is not None:
            raise ValueError(f"window is only valid with mode='windowed_fifo', got {self.mode!r}")
        for name in ("batch_size", "num_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.round_budget is not None and self.round_budget < 1:
            raise ValueError(f"round_budget must be >= 1 or None, got {self.round_budget}")


@dataclasses.dataclass
class Record:
    """The scheduler's account of one submission (its ``index`` is the submission order)."""

    index: int
    task_id: str
    task_class: str
    submit_time: float
    submit_version: int
    behaviour_version: int = -1  # oldest per-token behaviour version
    complete_time: float = math.nan
    complete_version: int = -1
    resolve_time: float = math.nan
    consume_version: int = -1
    terminal: Terminal | None = None
    reason: str = ""  # why rejected / cancelled / failed
    admission: Admission | None = None
    weight: float = 1.0
    stop_reason: str | None = None
    resume: str = ""
    rounds: int = 0
    pauses: int = 0
    busy_time: float = 0.0  # slot-seconds used, over all rounds
    generation_time: float = 0.0
    env_time: float = 0.0
    recompute_time: float = 0.0
    env_intervals: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    @property
    def gen_gap(self) -> int:
        return self.complete_version - self.behaviour_version

    @property
    def queue_gap(self) -> int:
        return self.consume_version - self.complete_version

    @property
    def version_gap(self) -> int:
        return self.consume_version - self.behaviour_version


class Consumed(NamedTuple):
    index: int
    trajectory: Trajectory
    weight: float
    admission: Admission


@dataclasses.dataclass
class RunLog:
    config: SchedulerConfig
    staleness_config: stl.StalenessConfig
    records: list[Record]
    batches: list[list[Consumed]]
    params: Any
    staleness: stl.StalenessState
    step_end_times: list[float]
    events: list[tuple[float, str, int, int]]  # (time, kind, submission index, version)

    @property
    def elapsed(self) -> float:
        return self.step_end_times[-1] if self.step_end_times else 0.0

    def terminal_counts(self) -> dict[str, int]:
        counts = {t.value: 0 for t in Terminal}
        for r in self.records:
            counts[r.terminal.value] += 1
        return counts
