"""The real-time executor of a multi-process run: one decision maker, the same scheduler everywhere.

Every process runs the same :class:`~agentjax.sampling.scheduler.Scheduler` (the pure machine's
driver) and sees the same events in the same order, so every process takes the same decisions:
the same admissions, versions, cancellations and learner batches, and the same jitted steps in
the same order (no divergence, no deadlock). What makes the order the same is one decision maker:

* **Rounds are owned.** A rollout round runs on one process: :meth:`SpreadExecutor.submit_round`
  gives it to the process that already samples its GRPO group (same ``task_id``), else to the
  process with the fewest rounds in flight (ties: the lowest index). Every process computes the
  same owner, since it sees the same submissions and deliveries; a process whose episodes finish
  later gets fewer new rounds, so no step waits on the slowest process by construction.
* **Only metadata crosses processes.** A finished round stays on its owner; the owner posts its
  metadata (:func:`~agentjax.trajectory.meta_of`: rewards, labels, versions, row sizes; no token)
  on its ``done`` stream of the :class:`~agentjax.sharding.exchange.Channel`.
* **Process 0 orders the deliveries.** It merges its own results and its peers' ``done`` messages
  in arrival order and posts each delivery ``(ticket, seconds)`` on its ``order`` stream; the
  other processes deliver the same tickets in that order (a learner job's ticket: their own
  job's result; a round: theirs in full, another process's as its metadata). Under ``--replay``
  every process follows the recorded order instead.
* ``now()`` is the decision maker's time of the last delivery on every process, so the machine's
  inputs are the same everywhere.

The learner batch is then formed from whole groups on their owners and assembled on the devices
from process-local rows (:mod:`agentjax.learner.spread_batch`).
"""

from __future__ import annotations

import dataclasses
import queue
import time
from collections.abc import Sequence
from typing import Any

from agentjax.sampling.clock import Failure
from agentjax.sampling.realtime import RealtimeExecutor
from agentjax.trajectory import meta_of

LEADER = 0
DONE, ORDER = "done", "order"
LIVENESS_EVERY_S = 2.0  # how often a waiting process reads its peers' heartbeats
POLL_S = (0.002, 0.05)  # process 0 polls its peers' streams every 2 ms, backing off to 50 ms


def metadata(result: Any, process: int) -> Any:
    """What crosses processes for a finished round: its metadata (a failure: its message)."""
    if isinstance(result, Failure):
        return Failure(RuntimeError(repr(result.error)))
    if result.state is not None:  # partial rollout's paused state stays with its process
        raise ValueError("a paused round cannot cross processes (round_budget must be 0)")
    return dataclasses.replace(result, trajectory=meta_of(result.trajectory, process))


class SpreadExecutor(RealtimeExecutor):
    """A :class:`RealtimeExecutor` whose sampler thread runs this process's rounds only and whose
    deliveries follow process 0's order (or ``recorded``, a schedule being replayed).
    ``channel``: the run's control plane (:class:`~agentjax.sharding.exchange.Channel`)."""

    def __init__(self, channel: Any, recorded: Sequence[tuple[int, float]] | None = None):
        self.ch = channel
        self.me, self.n = channel.process, channel.count
        self.recorded = None if recorded is None else list(recorded)
        self.owner: dict[int, int] = {}  # round ticket -> its process
        self.assigned = [0] * self.n  # rounds given to each process so far
        self._load = [0] * self.n  # rounds in flight on each process
        self._group: dict[str, int] = {}  # task id -> the process that samples its group
        self._held: dict[int, Any] = {}  # results that have come, waiting for their turn
        self._arrivals: list[int] = []  # decision maker: tickets in arrival order
        self._at = 0.0
        self._k = 0  # deliveries so far
        super().__init__()

    @property
    def decides(self) -> bool:
        return self.me == LEADER and self.recorded is None

    def now(self) -> float:
        return self._at

    # -- submissions (every process, same calls, same order) -----------------------------------
    def submit_round(self, worker: Any, item: Any) -> int:
        ticket = self._ticket()
        key = str(getattr(item.task, "task_id", ticket))
        p = self._group.get(key)
        if p is None:
            p = min(range(self.n), key=lambda q: (self._load[q], q))
            self._group[key] = p
        self.owner[ticket] = p
        self.assigned[p] += 1
        self._load[p] += 1
        if p == self.me:
            with self._cv:
                self._rounds.append((ticket, worker, item))
                self._cv.notify()
        return ticket

    def cancel(self, ticket: int) -> None:
        super().cancel(ticket)
        self._settle(ticket)

    def _settle(self, ticket: int) -> None:
        p = self.owner.pop(ticket, None)
        if p is not None:
            self._load[p] -= 1
        self._held.pop(ticket, None)

    def _round_done(self, ticket: int, result) -> None:
        with self._cv:
            live = ticket in self._live
        if live:  # its metadata, for the decision maker and every other process
            self.ch.post(DONE, (ticket, metadata(result, self.me)))
        super()._round_done(ticket, result)

    # -- deliveries --------------------------------------------------------------------------
    def next(self) -> tuple[int, Any]:
        if self.pending() == 0:
            raise IndexError("no job in flight")
        ticket, at = self._decide() if self.decides else self._follow()
        result = self._result(ticket)
        with self._cv:
            self._live.discard(ticket)
        self._settle(ticket)
        self._at, self._k = at, self._k + 1
        self.delivered.append((ticket, at))
        if isinstance(result, Failure) and self._failures >= self.max_consecutive_failures:
            raise result.error
        return ticket, result

    def _follow(self) -> tuple[int, float]:
        if self.recorded is not None:
            from agentjax.sampling.replay import ScheduleError  # noqa: PLC0415

            if self._k >= len(self.recorded):
                raise ScheduleError(
                    f"--replay: the schedule ends after {self._k} deliveries; the run asks for more"
                )
            ticket, at = self.recorded[self._k]
            if ticket not in self._live:
                raise ScheduleError(
                    f"--replay diverged at delivery {self._k}: ticket {ticket} is not in flight"
                )
            return ticket, at
        ticket, at = self.ch.read(ORDER, LEADER, f"the decision maker's delivery {self._k}")
        return int(ticket), float(at)

    def _decide(self) -> tuple[int, float]:
        """Process 0: the first live result to arrive, anywhere; posted as the next delivery."""
        checked, idle = time.monotonic(), POLL_S[0]
        while True:
            self._drain_local(wait_s=0.0)
            for p in range(self.n):
                if p != self.me:
                    while (m := self.ch.poll(DONE, p)) is not None:
                        self._arrive(*m)
            with self._cv:
                live = set(self._live)
            self._arrivals = [t for t in self._arrivals if t in live]
            if self._arrivals:
                ticket, at = self._arrivals.pop(0), self._clock()
                self.ch.post(ORDER, (ticket, at))
                return ticket, at
            self._drain_local(wait_s=idle)  # while nothing comes, poll the peers less often
            idle = min(2 * idle, POLL_S[1])
            if time.monotonic() - checked > LIVENESS_EVERY_S:
                checked = time.monotonic()
                self._check_alive()

    def _arrive(self, ticket: int, result) -> None:
        self._held[ticket] = result
        if self.decides:
            self._arrivals.append(ticket)

    def _drain_local(self, wait_s: float) -> None:
        """Moves this process's finished jobs into ``_held`` (waiting up to ``wait_s`` for one)."""
        try:
            item = self._done.get(timeout=wait_s) if wait_s else self._done.get_nowait()
        except queue.Empty:
            return
        while True:
            self._arrive(*item)
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return

    def _result(self, ticket: int) -> Any:
        """The delivered ticket's result: this process's own (a learner job, a round it owns) or
        the metadata its owner posted."""
        owner = self.owner.get(ticket, self.me)  # a learner job is every process's own
        checked = time.monotonic()
        while ticket not in self._held:
            if owner == self.me:
                self._drain_local(wait_s=0.05)
                if time.monotonic() - checked > LIVENESS_EVERY_S:
                    checked = time.monotonic()
                    self._check_alive()
            else:
                t, res = self.ch.read(DONE, owner, f"the result of round {ticket}")
                self._held[t] = res
        self._arrivals = [t for t in self._arrivals if t != ticket]
        return self._held.pop(ticket)

    def _check_alive(self) -> None:
        if not self._sampler.is_alive() and not self._closed:
            raise RuntimeError("the sampler thread died")
        self.ch.check_alive()

    def report(self) -> dict:
        return {
            **super().report(),
            "processes": self.n,
            "rounds_assigned": list(self.assigned),
            "kv_bytes": self.ch.wire.report(),
        }
