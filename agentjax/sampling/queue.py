"""The rollout-worker interface, and the scheduler's choices (mode, clock, resume).

A rollout is driven in *rounds*: the scheduler hands a worker a :class:`WorkItem` (task, policy
version, per-round token budget, per-task caps, resume semantics and the resumable state of a
paused rollout) and gets back a :class:`RoundResult` (the new resumable state, the trajectory so
far, why the round stopped and how long it took). The scheduler never looks inside the state:
the simulated worker keeps positions and tokens, the real sampler will keep its KV cache.

Consumption order by mode (:func:`agentjax.sampling.schedstate.consumable`):

* ``async``: completed trajectories in completion order (greedy; fast tasks first).
* ``windowed_fifo(W)``: only completed trajectories whose submission index lies in
  ``[head, head + W)`` are consumable, in submission order; ``head`` is the oldest unresolved
  submission, so the window advances as its head is consumed (MiniMax Forge, M2 report s6.2.4).
  ``W = 1`` is strict FIFO; ``W -> inf`` is greedy.
* ``sync``: everything completed in the round, at the barrier, in submission order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from agentjax.choice import Choice
from agentjax.trajectory import StopReason, Trajectory


class SchedulerMode(Choice):
    SYNC = "sync"
    ASYNC = "async"
    WINDOWED_FIFO = "windowed_fifo"


class Clock(Choice):
    """What time the scheduler runs on: a deterministic simulation, or the wall clock."""

    VIRTUAL = "virtual"  # BatchingExecutor: a pure function of the seed; snapshots, exact resume
    REAL = "real"  # RealtimeExecutor: sampling and learning overlap on two threads


class ResumeMode(Choice):
    """How a paused rollout continues: ``recompute`` its context under the new weights, or
    ``keep`` its KV cache (tokens sampled before the pause keep their behaviour version)."""

    RECOMPUTE = "recompute"
    KEEP = "keep"


@dataclasses.dataclass(frozen=True)
class Caps:
    """Per-task caps (part of the task: hitting one ends the episode with
    ``StopReason.TASK_CAP``, the agent's failure), the one caps type of every rollout driver and
    of the simulated worker."""

    max_tool_calls: int = 8  # environment steps over the whole episode
    max_action_tokens: int = 16  # per turn
    max_obs_tokens: int = 80  # per observation, after encoding (cut tokens are recorded)
    max_tokens: int | None = None  # action tokens over the whole episode (None: no cap)


@dataclasses.dataclass(frozen=True)
class WorkItem:
    task: Any  # anything with ``task_id`` and ``task_class``
    version: int  # the policy version this round samples with
    round_budget: int | None  # action tokens allowed this round (None: unlimited)
    caps: Caps | None  # None: uncapped (a simulated workload)
    resume: str  # "recompute" (re-prefill the prefix under new weights) or "keep" (old KV)
    state: Any = None  # the worker's resumable state of a paused rollout, None to start


@dataclasses.dataclass(frozen=True)
class RoundResult:
    """One round of one rollout. ``trajectory.stop_reason`` says why it stopped."""

    state: Any  # resumable state (meaningful when paused)
    trajectory: Trajectory
    duration: float  # seconds the round occupied its slot
    generation_time: float = 0.0
    env_time: float = 0.0
    recompute_time: float = 0.0  # re-prefill cost of a resume under "recompute"
    env_intervals: tuple[tuple[float, float], ...] = ()  # env steps, offsets from round start

    @property
    def paused(self) -> bool:
        return self.trajectory.stop_reason == StopReason.ROUND_BUDGET_PAUSED


class RolloutWorker(Protocol):
    def run_round(self, item: WorkItem) -> RoundResult:
        """Runs one round; must be safe to call from several threads at once."""
