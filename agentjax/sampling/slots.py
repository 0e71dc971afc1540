"""One :meth:`EngineRollout.run` call's bookkeeping: which episode (row) holds which engine slot,
what each row has seen, the weights and budget it runs under, and the queues of rows waiting
for a slot, for their environment or for a prefill. Plain data and small queries; the driver
(:mod:`agentjax.sampling.engine_rollout`) decides what happens at each engine step.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import Any

import numpy as np

from agentjax.sampling.episode import Episode, EpisodeSpec
from agentjax.sampling.queue import ResumeMode


@dataclasses.dataclass
class Paused:
    """An episode paused by the round budget: what the next ``run`` resumes it from."""

    row: Episode  # host state: environment, turns so far, the current action's tokens
    stream: np.ndarray  # every token the model has seen
    routes: np.ndarray | None  # MoE experts of ``stream`` (None: dense)
    slot_row: Any = None  # ``keep``: the slot's one-row state (KV cache); ``recompute``: None


@dataclasses.dataclass(frozen=True)
class Admission:
    """An episode (new, or paused to resume) joining an :meth:`EngineRollout.run` call, with the
    weights and version it runs under, its round budget (None: none) and resume mode."""

    episode: EpisodeSpec | Paused | None
    params: Any
    version: int
    round_budget: int | None = None
    resume: ResumeMode = ResumeMode.RECOMPUTE

    @property
    def keep(self) -> bool:
        return self.resume == ResumeMode.KEEP


@dataclasses.dataclass
class Slots:
    """The slot map and per-row state of one call (rows are indices into the call's episodes)."""

    owner: list[int]  # slot -> row (-1: free)
    slot: dict[int, int] = dataclasses.field(default_factory=dict)  # row -> slot (absent: none)
    stream: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # every token seen
    routes: dict[int, np.ndarray | None] = dataclasses.field(default_factory=dict)
    new: deque[int] = dataclasses.field(default_factory=deque)  # rows to admit
    back: deque[int] = dataclasses.field(default_factory=deque)  # whole stream prefilled on admission
    kept: dict[int, Any] = dataclasses.field(default_factory=dict)  # resumed under keep: slot row
    run_of: dict[int, Admission] = dataclasses.field(default_factory=dict)  # weights, budget
    spent: dict[int, int] = dataclasses.field(default_factory=dict)  # action tokens this call
    open: set[int] = dataclasses.field(default_factory=set)  # rows not yet ended or paused
    waiting: dict[int, float] = dataclasses.field(default_factory=dict)  # row -> env submitted at
    pending: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # slot -> to prefill
    fresh: list[int] = dataclasses.field(default_factory=list)  # slots to empty first

    @classmethod
    def empty(cls, n: int) -> Slots:
        return cls(owner=[-1] * n)

    def assign(self, i: int, s: int) -> None:
        self.owner[s], self.slot[i] = i, s

    def release(self, i: int) -> None:
        """Row ``i`` gives up its slot."""
        self.owner[self.slot.pop(i)] = -1

    def held(self) -> bool:
        return any(o >= 0 for o in self.owner)

    def queued(self) -> bool:
        return bool(self.new or self.back)

    def decoding(self, done) -> list[bool]:
        """Per slot: its row decodes at this step (held, not waiting on its environment, not
        ``done(row)``)."""
        return [o >= 0 and o not in self.waiting and not done(o) for o in self.owner]

    def take_prefill(self) -> tuple[dict[int, np.ndarray], list[int]]:
        """This step's prefill inputs (slot -> tokens) and the slots to empty first; both reset."""
        out = self.pending, self.fresh
        self.pending, self.fresh = {}, []
        return out

    def spent_all(self, i: int) -> bool:
        budget = self.run_of[i].round_budget
        return bool(budget) and self.spent[i] >= budget

    def evictable(self, evict_after: float | None) -> list[int]:
        """Rows holding a slot while their environment runs, for ``evict_after`` seconds or more."""
        if evict_after is None:
            return []
        now = time.perf_counter()
        return [i for i, t in self.waiting.items() if i in self.slot and now - t >= evict_after]

    def by_version(self, slots) -> list[tuple[Admission, list[int]]]:
        """``slots`` grouped by the weights their rows run under (first-seen order)."""
        groups: dict[tuple, tuple[Admission, list[int]]] = {}
        for s in slots:
            run = self.run_of[self.owner[s]]
            groups.setdefault((run.version, id(run.params)), (run, []))[1].append(s)
        return list(groups.values())
