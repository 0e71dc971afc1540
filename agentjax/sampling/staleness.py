"""Staleness manager: an optax-style ``(init, update)`` pair over a checkpointable NamedTuple state.

Version gap of a sample consumed by learner version ``v_learner``: ``dv = v_learner - v_behavior``,
with ``v_behavior`` the *oldest* per-token behaviour version (a partial rollout spans versions).
It splits into two parts (PACE): generation-time staleness ``v_complete - v_behavior`` (the
rollout took long) and queue-time staleness ``v_learner - v_complete`` (it waited); both are
histogrammed separately.

Capacity couples concurrency with the off-policy bound (AReaL's StalenessManager):

    capacity = (max_version_gap + v + 1) * batch_size - (trained + masked + queued + in_flight)

further limited by ``max_in_flight`` and by backpressure: a new task is admitted only while
``queued + in_flight < queue_capacity``, so completed trajectories never overflow the queue
(production cannot outrun consumption by more than the queue holds).

Admission (:func:`admit`) decides per sample from its version gap, a measured log-prob drift,
its task class and the queue pressure: accept, reject, down-weight (weight ``w``), or pass to the
importance-sampling / filtering objective. Conservation: every submitted task ends in exactly one
terminal state, so ``submitted == in_flight + queued + sum(terminal counts)`` at all times.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import numpy as np


class Terminal(enum.StrEnum):
    """The one terminal state of every submitted task."""

    TRAINED = "trained"
    MASKED = "masked"
    REJECTED_STALE = "rejected_stale"
    CANCELLED = "cancelled"
    FAILED = "failed"
    FILTERED = "filtered"  # dropped by dynamic sampling: its group's rewards were all equal


class Admission(enum.StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"
    DOWNWEIGHT = "downweight"
    TO_OBJECTIVE = "to_objective"  # train, flagged for the IS / filter objective to judge


class Kind(enum.IntEnum):
    SUBMIT = 0  # a new task enters flight
    COMPLETE = 1  # in flight -> queued
    TRAIN = 2  # queued -> trained (carries the gaps)
    MASK = 3  # queued -> masked
    REJECT = 4  # queued -> rejected_stale
    CANCEL = 5  # in flight (or queued, with from_queue) -> cancelled
    FAIL = 6  # in flight -> failed
    VERSION = 7  # the learner published a new version
    FILTER = 8  # queued -> filtered (dynamic sampling dropped its uniform group)


class Event(NamedTuple):
    kind: Kind
    gen_gap: int = 0
    queue_gap: int = 0
    from_queue: bool = False


@dataclasses.dataclass(frozen=True)
class StalenessConfig:
    """Bounds and admission policy: the run config's ``admission`` section itself.

    ``class_max_gap`` overrides the gap bound per task class. The batch size is not here: it is
    the learner's (``rl.batch_size``), passed to :func:`capacity` by the scheduler.
    """

    max_version_gap: int = 4
    max_in_flight: int = 1 << 30
    queue_capacity: int = 1 << 30  # 0: 4 x the batch size, at least the slot count (the scheduler's)
    class_max_gap: dict[str, int] = dataclasses.field(default_factory=dict)
    downweight_from_gap: int = -1  # >= 0: gaps above it get weight decay**(gap - from); -1: off
    downweight_decay: float = 0.5
    max_drift: float | None = None  # measured drift above this: reject
    objective_drift: float | None = None  # drift above this (below max_drift): to the objective
    pressure_threshold: float = 1.0  # queue pressure at or above which the gap bound tightens
    pressure_tighten: int = 0  # ... by this many versions (fresh samples are plentiful then)

    def __post_init__(self) -> None:
        if self.downweight_from_gap is None:  # the library's older spelling of "off"
            object.__setattr__(self, "downweight_from_gap", -1)
        object.__setattr__(self, "class_max_gap", dict(self.class_max_gap))
        for k, v in self.class_max_gap.items():
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"class_max_gap.{k}={v!r} is invalid; must be an integer >= 0")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight={self.max_in_flight} is invalid; must be >= 1")
        if self.queue_capacity < 0:
            raise ValueError(f"queue_capacity={self.queue_capacity} is invalid; >= 1, or 0 (derived)")
        if self.max_version_gap < 0:
            raise ValueError(f"max_version_gap={self.max_version_gap} is invalid; must be >= 0")
        if self.downweight_from_gap < -1:
            raise ValueError(f"downweight_from_gap={self.downweight_from_gap} is invalid; >= 0, or -1 (off)")
        if not 0.0 < self.downweight_decay <= 1.0:
            raise ValueError(f"downweight_decay={self.downweight_decay} is invalid; must be in (0, 1]")
        if self.pressure_tighten < 0:
            raise ValueError(f"pressure_tighten={self.pressure_tighten} is invalid; must be >= 0")

    def check(self) -> None:
        """What a training run requires of its ``admission`` section (``agentjax.run.config``
        calls it): the drift bounds act only on a measurement the training loop does not make."""
        for f in ("max_drift", "objective_drift"):
            if getattr(self, f) is not None:
                raise ValueError(
                    f"admission.{f}={getattr(self, f)!r}: the training loop makes no "
                    "per-trajectory drift measurement for it to act on; leave it unset (None)"
                )

    def resolved(self, batch_size: int, num_slots: int) -> StalenessConfig:
        """With ``queue_capacity=0`` replaced by its derived value (what the scheduler runs on)."""
        if self.queue_capacity:
            return self
        return dataclasses.replace(self, queue_capacity=max(4 * batch_size, num_slots))

    @property
    def hist_bins(self) -> int:
        """Gap histogram length: gaps 0..bound and one overflow bin (must stay empty)."""
        return max([self.max_version_gap, *self.class_max_gap.values()]) + 2


class StalenessState(NamedTuple):
    """A pytree of scalars and arrays (checkpointable as is)."""

    version: int
    submitted: int
    in_flight: int  # started and not completed (running or paused between rounds)
    queued: int  # completed, waiting for the learner
    trained: int
    masked: int
    rejected_stale: int
    cancelled: int
    failed: int
    max_gap: int  # largest version gap among trained samples
    gap_hist: np.ndarray  # int64 [bins]: v_learner - v_behavior of trained samples
    gen_gap_hist: np.ndarray  # generation-time part
    queue_gap_hist: np.ndarray  # queue-time part
    filtered: int = 0  # dropped by dynamic sampling (agentjax.sampling.groups)


def init(config: StalenessConfig) -> StalenessState:
    z = lambda: np.zeros((config.hist_bins,), np.int64)
    return StalenessState(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, z(), z(), z())


def _bump(hist: np.ndarray, gap: int) -> np.ndarray:
    out = hist.copy()
    out[min(max(gap, 0), out.size - 1)] += 1
    return out


def update(state: StalenessState, event: Event) -> StalenessState:
    """Applies one event; pure (returns a new state)."""
    s, k = state, event.kind
    if k == Kind.SUBMIT:
        return s._replace(submitted=s.submitted + 1, in_flight=s.in_flight + 1)
    if k == Kind.COMPLETE:
        return s._replace(in_flight=s.in_flight - 1, queued=s.queued + 1)
    if k == Kind.VERSION:
        return s._replace(version=s.version + 1)
    if k == Kind.FAIL:
        return s._replace(in_flight=s.in_flight - 1, failed=s.failed + 1)
    if k == Kind.CANCEL:
        if event.from_queue:
            return s._replace(queued=s.queued - 1, cancelled=s.cancelled + 1)
        return s._replace(in_flight=s.in_flight - 1, cancelled=s.cancelled + 1)
    if k == Kind.MASK:
        return s._replace(queued=s.queued - 1, masked=s.masked + 1)
    if k == Kind.REJECT:
        return s._replace(queued=s.queued - 1, rejected_stale=s.rejected_stale + 1)
    if k == Kind.FILTER:
        return s._replace(queued=s.queued - 1, filtered=s.filtered + 1)
    if k == Kind.TRAIN:
        gap = event.gen_gap + event.queue_gap
        return s._replace(
            queued=s.queued - 1,
            trained=s.trained + 1,
            max_gap=max(s.max_gap, gap),
            gap_hist=_bump(s.gap_hist, gap),
            gen_gap_hist=_bump(s.gen_gap_hist, event.gen_gap),
            queue_gap_hist=_bump(s.queue_gap_hist, event.queue_gap),
        )
    raise ValueError(f"unknown event kind {k!r}")


def terminal_counts(state: StalenessState) -> dict[str, int]:
    return {t.value: int(getattr(state, t.value)) for t in Terminal}


def is_conserved(state: StalenessState) -> bool:
    """Every submitted task is in flight, queued, or in exactly one terminal state."""
    total = state.in_flight + state.queued + sum(terminal_counts(state).values())
    return bool(total == state.submitted and state.in_flight >= 0 and state.queued >= 0)


def _queue_capacity(config: StalenessConfig) -> int:
    if not config.queue_capacity:
        raise ValueError("queue_capacity=0 (derived) must be resolved first: StalenessConfig.resolved")
    return config.queue_capacity


def queue_pressure(state: StalenessState, config: StalenessConfig) -> float:
    """Share of the queue taken by completed and in-flight work (1.0 = full)."""
    return (state.queued + state.in_flight) / _queue_capacity(config)


def capacity(state: StalenessState, config: StalenessConfig, batch_size: int) -> int:
    """How many new tasks may be submitted now (0 = backpressure) with ``batch_size`` per step."""
    # Samples that were or will be trained take a place; masked, rejected, cancelled, failed and
    # filtered ones never will, so they give theirs back (counting masked ones starved a run
    # with infra faults: about (gap + 1) x (1 - f) / f steps at fault rate f).
    held = state.trained + state.queued + state.in_flight
    off_policy = (config.max_version_gap + state.version + 1) * batch_size - held
    concurrency = config.max_in_flight - state.in_flight
    queue_room = _queue_capacity(config) - state.queued - state.in_flight
    return max(0, min(off_policy, concurrency, queue_room))


def max_gap_for(config: StalenessConfig, task_class: str, pressure: float = 0.0) -> int:
    """The hard version-gap bound for a class, tightened under queue pressure."""
    bound = config.class_max_gap.get(task_class, config.max_version_gap)
    if pressure >= config.pressure_threshold:
        bound -= config.pressure_tighten
    return max(bound, 0)


class SampleInfo(NamedTuple):
    version_gap: int
    task_class: str
    drift: float | None = None  # measured log-prob drift, e.g. mean |logp_train - logp_behaviour|
    queue_pressure: float = 0.0


class Decision(NamedTuple):
    admission: Admission
    weight: float
    reason: str


def admit(info: SampleInfo, config: StalenessConfig) -> Decision:
    """Default admission policy; any function with this signature can replace it.

    Order: the hard gap bound (per class, tightened under queue pressure) rejects; a measured drift
    above ``max_drift`` rejects; above ``objective_drift`` the sample goes to the objective's IS /
    filter; a gap above ``downweight_from_gap`` gets ``w = decay ** (gap - downweight_from_gap)``.
    """
    bound = max_gap_for(config, info.task_class, info.queue_pressure)
    if info.version_gap > bound:
        return Decision(Admission.REJECT, 0.0, f"version_gap {info.version_gap} > {bound}")
    if info.drift is not None and config.max_drift is not None and info.drift > config.max_drift:
        return Decision(Admission.REJECT, 0.0, f"drift {info.drift:.4g} > {config.max_drift}")
    if info.drift is not None and config.objective_drift is not None and info.drift > config.objective_drift:
        return Decision(Admission.TO_OBJECTIVE, 1.0, f"drift {info.drift:.4g} to objective")
    dw = config.downweight_from_gap
    if dw >= 0 and info.version_gap > dw:
        w = float(config.downweight_decay ** (info.version_gap - dw))
        return Decision(Admission.DOWNWEIGHT, w, f"version_gap {info.version_gap} > {dw}")
    return Decision(Admission.ACCEPT, 1.0, "")
