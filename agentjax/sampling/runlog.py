"""The scheduler's configuration and its account of a run: per-submission records and the log.

``SchedulerConfig.mode`` is a :class:`~agentjax.sampling.queue.SchedulerMode` (``window`` for
``windowed_fifo``); invalid values raise ``ValueError`` naming the field and the allowed values. A
:class:`Record` is one submission's life: versions (behaviour, completion, consumption, hence the
generation-time and queue-time version gaps), times, rounds and pauses, slot time, and its one
terminal state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from agentjax.choice import coerce
from agentjax.sampling import staleness as stl
from agentjax.sampling.envpool import EnvPoolKind
from agentjax.sampling.groups import UniformGroups
from agentjax.sampling.queue import Caps, Clock, ResumeMode, SchedulerMode
from agentjax.sampling.staleness import Admission, Terminal
from agentjax.trajectory import Trajectory


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    """Every scheduler setting, defined once: it is the run config's ``scheduler`` section itself.

    The batch size is not here: it is ``rl.batch_size``, passed to the :class:`Scheduler`. The
    staleness bounds are :class:`~agentjax.sampling.staleness.StalenessConfig` (the ``admission``
    section).
    """

    mode: SchedulerMode = SchedulerMode.ASYNC
    clock: Clock = Clock.VIRTUAL  # the training loop's executor (agentjax.sampling.realtime)
    num_slots: int = 32  # concurrent rollout rounds ("devices")
    window: int = 64  # windowed_fifo: the consumption window W (ignored by the other modes)
    round_budget: int = 0  # action tokens per rollout per round (partial rollout); 0: no budget
    resume: ResumeMode = ResumeMode.RECOMPUTE
    caps: Caps | None = None  # a simulated workload's per-task caps (the training loop: the caps section)
    learner_step_time: float = 0.0  # seconds per learner step on the virtual clock
    gen_seconds_per_token: float = 0.02  # virtual clock: seconds per sampled token
    engine_slots: int = 0  # > 0: sample on the slot engine (EngineRollout) with this many slots
    engine_chunk: int = 8  # decode tokens per slot-engine generate call
    env_workers: int = 8  # slot engine: environment pool size
    env_pool: EnvPoolKind = EnvPoolKind.THREAD  # slot engine: thread or process workers
    # real time: each environment step also waits its simulated tool latency x this (seconds of
    # waiting per simulated second; minirepo's long tail as real waiting, as a sandbox would); 0: off
    env_latency_scale: float = 0.0
    # dynamic sampling (agentjax.sampling.groups): "drop" keeps groups whose rewards are all equal
    # out of the batch and samples more in their place, at most drop_budget x batch_size
    # trajectories per learner step
    uniform_groups: UniformGroups = UniformGroups.KEEP
    drop_budget: int = 4

    def __post_init__(self) -> None:
        coerce(
            self,
            mode=SchedulerMode,
            clock=Clock,
            resume=ResumeMode,
            env_pool=EnvPoolKind,
            uniform_groups=UniformGroups,
        )
        if self.round_budget is None:  # the library's spelling of "no budget"
            object.__setattr__(self, "round_budget", 0)
        if self.window is None and self.mode != SchedulerMode.WINDOWED_FIFO:  # unused there
            object.__setattr__(self, "window", SchedulerConfig.window)
        for name in ("num_slots", "window", "engine_chunk", "env_workers"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid; must be an integer >= 1")
        if not self.env_latency_scale >= 0:
            raise ValueError(
                f"env_latency_scale={self.env_latency_scale!r} is invalid; must be >= 0 (0: off)"
            )
        for name in ("round_budget", "engine_slots", "drop_budget"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid; must be >= 0 (0: off)")

    def check(self) -> None:
        """What a training run requires of its ``scheduler`` section (``agentjax.run.config``
        calls it; the scheduler itself also serves other uses, e.g. per-task caps here)."""
        if self.caps is not None:
            raise ValueError(
                f"scheduler.caps={self.caps}: the training loop takes its per-task caps from the caps "
                "section; leave scheduler.caps unset (None)"
            )
        if self.round_budget and not self.engine_slots:
            raise ValueError(
                f"scheduler.round_budget={self.round_budget} (partial rollout) needs the slot engine: set "
                "scheduler.engine_slots > 0, or round_budget to 0 (whole episodes)"
            )
        if self.env_latency_scale and self.clock != Clock.REAL:
            raise ValueError(
                f"scheduler.env_latency_scale={self.env_latency_scale} makes environment steps wait in "
                "real time: it needs scheduler.clock='real' (the virtual clock already charges the "
                "simulated latency)"
            )


@dataclasses.dataclass(frozen=True)
class Record:
    """The scheduler's account of one submission (its ``index`` is the submission order): an
    immutable value (the scheduler machine replaces it as the submission's life goes on)."""

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
