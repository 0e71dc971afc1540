"""Event sources for the scheduler: a deterministic virtual clock and a real thread pool.

Both executors expose the same calls, so the scheduler never knows which one drives it:

    ticket = executor.submit(fn, *args)   # start a job (a learner step)
    ticket = executor.submit_round(worker, item)   # start a rollout round (worker.run_round(item))
    executor.cancel(ticket)               # its result will never be delivered
    ticket, result = executor.next()      # the next finished job, in (virtual or real) time order
    executor.now()                        # the current time in seconds

:class:`SimulatedExecutor` is a discrete-event simulation over a heap of ``(time, seq, event)``:
a job's function runs at submission, and its result is delivered at ``now + result.duration``.
Ties in time are broken by submission order, so a run is a pure function of its inputs (same
seed, same event order). :class:`ThreadedExecutor` runs jobs on threads and delivers them as they
finish in real time: order may vary between runs, but every submitted job is delivered or
cancelled, never lost.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Failure:
    """A job that raised: the exception and when it was delivered."""

    error: BaseException
    duration: float = 0.0


class VirtualClock:
    """A heap of ``(time, seq, event)``; ``pop`` advances ``now`` to the event's time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = 0
        self._cancelled: set[int] = set()

    def schedule(self, at: float, event: Any) -> int:
        if at < self.now:
            raise ValueError(f"cannot schedule in the past: at={at} < now={self.now}")
        seq, self._seq = self._seq, self._seq + 1
        heapq.heappush(self._heap, (at, seq, event))
        return seq

    def cancel(self, seq: int) -> None:
        self._cancelled.add(seq)

    def is_cancelled(self, seq: int) -> bool:
        return seq in self._cancelled

    def pop(self) -> tuple[float, int, Any]:
        while self._heap:
            at, seq, event = heapq.heappop(self._heap)
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                continue
            self.now = at
            return at, seq, event
        raise IndexError("pop from an empty virtual clock")

    def __len__(self) -> int:
        return len(self._heap) - len(self._cancelled)

    def snapshot_state(self) -> dict:
        """Named fields for a snapshot (events are whatever the jobs returned)."""
        return {
            "now": self.now,
            "seq": self._seq,
            "heap": list(self._heap),
            "cancelled": sorted(self._cancelled),
        }

    def load_snapshot_state(self, d: dict) -> None:
        self.now, self._seq = float(d["now"]), int(d["seq"])
        self._heap = [tuple(e) for e in d["heap"]]  # the list order keeps the heap invariant
        self._cancelled = set(d["cancelled"])


def _duration(result: Any) -> float:
    d = float(getattr(result, "duration", 0.0))
    if not d >= 0.0:
        raise ValueError(f"job result has an invalid duration {d!r}")
    return d


class SimulatedExecutor:
    """Deterministic executor: ``fn`` runs now, its result arrives at ``now + result.duration``."""

    def __init__(self) -> None:
        self.clock = VirtualClock()

    def now(self) -> float:
        return self.clock.now

    def submit(self, fn: Callable[..., Any], *args: Any) -> int:
        try:
            result = fn(*args)
            at = self.clock.now + _duration(result)
        except Exception as e:  # noqa: BLE001 - a failed job is an event, not a crash
            result, at = Failure(e), self.clock.now
        return self.clock.schedule(at, result)

    def submit_round(self, worker: Any, item: Any) -> int:
        """A rollout round: ``worker.run_round(item)`` (a batching executor may defer it)."""
        return self.submit(worker.run_round, item)

    def cancel(self, ticket: int) -> None:
        self.clock.cancel(ticket)

    def next(self) -> tuple[int, Any]:
        _, seq, result = self.clock.pop()
        return seq, result

    def pending(self) -> int:
        return len(self.clock)

    def close(self) -> None:
        pass

    def snapshot_state(self) -> dict:
        return {"kind": type(self).__name__, "clock": self.clock.snapshot_state()}

    def load_snapshot_state(self, d: dict) -> None:
        self.clock.load_snapshot_state(d["clock"])


class ThreadedExecutor:
    """Real latency: jobs run on a thread pool and are delivered in the order they finish."""

    def __init__(self, max_workers: int, timeout: float = 60.0) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)
        self._done: queue.Queue[tuple[int, concurrent.futures.Future]] = queue.Queue()
        self._seq = itertools.count()
        self._live: set[int] = set()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._timeout = timeout

    def now(self) -> float:
        return time.monotonic() - self._t0

    def submit(self, fn: Callable[..., Any], *args: Any) -> int:
        ticket = next(self._seq)
        with self._lock:
            self._live.add(ticket)
        fut = self._pool.submit(fn, *args)
        fut.add_done_callback(lambda f, t=ticket: self._done.put((t, f)))
        return ticket

    def submit_round(self, worker: Any, item: Any) -> int:
        """A rollout round: ``worker.run_round(item)`` on a thread."""
        return self.submit(worker.run_round, item)

    def cancel(self, ticket: int) -> None:
        # A running thread cannot be stopped: its result is dropped when it arrives.
        with self._lock:
            self._live.discard(ticket)

    def next(self) -> tuple[int, Any]:
        while True:
            if self.pending() == 0:
                raise IndexError("no job in flight")
            ticket, fut = self._done.get(timeout=self._timeout)
            with self._lock:
                if ticket not in self._live:
                    continue
                self._live.discard(ticket)
            err = fut.exception()
            return ticket, (Failure(err) if err is not None else fut.result())

    def pending(self) -> int:
        with self._lock:
            return len(self._live)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
