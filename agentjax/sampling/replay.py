"""Reproducible real-time runs: record the order in which results arrived, replay it exactly.

A real-time run (:class:`~agentjax.sampling.realtime.RealtimeExecutor`) is not a pure function of
its seed: which rollout finishes first, and whether a learner step ends before or after it,
depends on the machine. But the scheduler is a deterministic state machine of the events it is
given, and in exact mode a rollout's tokens and log-probs depend only on its task, its episode
seed and the policy version it was submitted with (not on its batch-mates). So the run is fixed by
one sequence: the tickets ``next()`` delivered, in order. The real-time executor records it
(:attr:`RealtimeExecutor.delivered`, with the wall time of each delivery); the training loop
writes it to ``<workdir>/schedule.json`` with the run config and the time each weight version was
published (the journal holds every token's policy version); ``launch.train --replay=W`` runs
the same config with :class:`ReplayExecutor`, which hands out tickets in the same order as the
real executor did, runs each rollout round when it is submitted (so the version it names is still
published) and each learner job when its turn comes, and delivers the results in the recorded
order at the recorded times. Same admissions, same versions per token, same batches: the same
trajectories and bitwise the same final parameters (``tests/test_realtime.py``).

What it does not cover: a run in which a rollout call failed (a replayed call succeeds unless the
failure was deterministic), and the wall times inside trajectories (timings are measured anew).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from agentjax.sampling.clock import Failure

FORMAT, VERSION = "agentjax-realtime-schedule", 1
FILE = "schedule.json"


class ScheduleError(ValueError):
    """A schedule that cannot be replayed (missing, another format, another config, diverged)."""


def write_schedule(
    workdir: str,
    config: dict,
    delivered: Sequence[tuple[int, float]],
    published: Sequence[float],
    resumed_at: int | None = None,
) -> str:
    """``delivered``: (ticket, seconds) in delivery order; ``published``: the second at which each
    weight version v = 1, 2, ... reached the scheduler (for reading; replay needs the order).
    ``resumed_at``: the checkpoint step a resumed run continued from (its schedule covers only
    what ran after it, so it cannot be replayed)."""
    path = os.path.join(workdir, FILE)
    body = {
        "format": FORMAT,
        "version": VERSION,
        "config": config,
        "delivered": [list(d) for d in delivered],
        "published": list(published),
        "resumed_at": resumed_at,
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, path)
    return path


def read_schedule(workdir: str, config: dict) -> list[tuple[int, float]]:
    """The recorded deliveries of the run in ``workdir``; its config must equal ``config``."""
    path = os.path.join(workdir, FILE)
    try:
        with open(path) as f:
            body = json.load(f)
    except (OSError, ValueError) as e:
        raise ScheduleError(
            f"--replay: cannot read {path} ({e}); only a finished scheduler.clock='real' run writes one"
        ) from None
    if body.get("format") != FORMAT or body.get("version") != VERSION:
        raise ScheduleError(f"--replay: {path} is not a version-{VERSION} {FORMAT} file")
    if body.get("resumed_at") is not None:
        raise ScheduleError(
            f"--replay: {path} records a run resumed at step {body['resumed_at']} (--resume); "
            "only a run that went from start to end without a resume can be replayed"
        )
    if body["config"] != config:
        diff = sorted(k for k in set(body["config"]) | set(config) if body["config"].get(k) != config.get(k))
        raise ScheduleError(
            f"--replay: {path} was recorded with another config (sections {diff} differ): "
            "pass the flags of the recorded run"
        )
    return [(int(t), float(at)) for t, at in body["delivered"]]


class ReplayExecutor:
    """Scheduler executor that re-delivers a recorded real-time schedule (see module doc)."""

    def __init__(self, delivered: Sequence[tuple[int, float]]) -> None:
        self._order = list(delivered)
        self._pos = 0
        self._next_ticket = 0
        self._live: set[int] = set()
        self._results: dict[int, Any] = {}
        self._learner_jobs: dict[int, tuple[Callable[..., Any], tuple]] = {}
        self._now = 0.0

    def now(self) -> float:
        return self._now

    def _ticket(self) -> int:
        ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        self._live.add(ticket)
        return ticket

    def submit(self, fn: Callable[..., Any], *args: Any) -> int:
        ticket = self._ticket()
        self._learner_jobs[ticket] = (fn, args)
        return ticket

    def submit_round(self, worker: Any, item: Any) -> int:
        ticket = self._ticket()
        try:
            self._results[ticket] = worker.run_rounds([item])[0]
        except Exception as e:  # noqa: BLE001 - as the real executor: a failed round is an event
            self._results[ticket] = Failure(e)
        return ticket

    def cancel(self, ticket: int) -> None:
        self._live.discard(ticket)

    def pending(self) -> int:
        return len(self._live)

    def next(self) -> tuple[int, Any]:
        if self._pos >= len(self._order):
            raise ScheduleError(
                f"--replay: the schedule ends after {self._pos} deliveries; the run asks for more"
            )
        ticket, at = self._order[self._pos]
        self._pos += 1
        if ticket not in self._live:
            raise ScheduleError(
                f"--replay diverged at delivery {self._pos - 1}: ticket {ticket} is not in flight "
                "(another code version, or a run whose rollout call failed)"
            )
        self._live.discard(ticket)
        self._now = at
        if ticket in self._learner_jobs:
            fn, args = self._learner_jobs.pop(ticket)
            try:
                return ticket, fn(*args)
            except Exception as e:  # noqa: BLE001
                return ticket, Failure(e)
        return ticket, self._results.pop(ticket)

    def close(self) -> None:
        pass
