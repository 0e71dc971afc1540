"""The wall-clock executor of the training loop (``scheduler.clock='real'``).

Rollout rounds and learner steps run at the same time on two threads, and the scheduler's modes
act on real events:

* a **sampler thread** runs the rounds. On the slot engine (``worker.streams``) it is one
  continuous call (``worker.stream_rounds``): a round submitted while it runs joins at the next
  engine step and takes a slot as one frees, and each round's result is delivered the moment
  its episode ends, so a long-tailed episode holds only its own slot. Lock-step ``Rollout`` (and
  a multi-process worker) runs every round submitted so far as one ``worker.run_rounds`` call;
  rounds submitted meanwhile join the next call;
* a **learner thread** runs the learner jobs (one at a time, in submission order);
* results are delivered in the order they finish (:meth:`next` blocks on them).

JAX releases the GIL while it computes, so the two threads overlap on the devices they share
(colocated) or use theirs at the same time (disaggregated). ``async`` and ``windowed_fifo`` keep
sampling while the learner trains; ``sync`` waits at its barrier, so its threads never overlap.
:meth:`report` measures it: busy seconds per thread and the seconds both were busy.

A real-time run is not a pure function of its seed (which episode finishes first depends on the
machine); the virtual clock (:class:`~agentjax.sampling.worker.BatchingExecutor`) is. But the
order of its deliveries (:attr:`RealtimeExecutor.delivered`) fixes it, and
:mod:`agentjax.sampling.replay` re-executes a run from that order. Its in-flight work cannot be
snapshotted: threads hold it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from agentjax.sampling.clock import Failure


class RealtimeExecutor:
    """Scheduler executor: rollout rounds on a sampler thread, learner jobs on a learner thread."""

    max_consecutive_failures = 3

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._done: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._seq = itertools.count()
        self._live: set[int] = set()
        self._rounds: list[tuple[int, Any, Any]] = []  # (ticket, worker, item) waiting for a call
        self._cv = threading.Condition()
        self._closed = False
        self._failures = 0
        self.intervals: dict[str, list[tuple[float, float]]] = {"sampler": [], "learner": []}
        self.round_calls = 0
        self.rounds_run = 0
        self.delivered: list[tuple[int, float]] = []  # (ticket, time) as next() returned them
        self._learner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="learner")
        self._sampler = threading.Thread(target=self._sample_loop, name="sampler", daemon=True)
        self._sampler.start()

    def now(self) -> float:
        return self._clock()

    def _clock(self) -> float:
        """Seconds since this executor started (the threads' busy intervals)."""
        return time.monotonic() - self._t0

    def _ticket(self) -> int:
        ticket = next(self._seq)
        with self._cv:
            self._live.add(ticket)
        return ticket

    # -- learner jobs --------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args: Any) -> int:
        ticket = self._ticket()

        def job():
            t0 = self._clock()
            try:
                return fn(*args)
            except Exception as e:  # noqa: BLE001 - a failed job is an event, not a crash here
                return Failure(e)
            finally:
                self.intervals["learner"].append((t0, self._clock()))

        fut = self._learner.submit(job)
        fut.add_done_callback(lambda f, t=ticket: self._done.put((t, f.result())))
        return ticket

    # -- rollout rounds ------------------------------------------------------------------------
    def submit_round(self, worker: Any, item: Any) -> int:
        ticket = self._ticket()
        with self._cv:
            self._rounds.append((ticket, worker, item))
            self._cv.notify()
        return ticket

    def _sample_loop(self) -> None:
        while True:
            with self._cv:
                while not self._rounds and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                batch = [r for r in self._rounds if r[0] in self._live]  # cancelled: not run
                self._rounds = []
            by_worker: dict[int, list] = defaultdict(list)
            for r in batch:
                by_worker[id(r[1])].append(r)
            for group in by_worker.values():
                worker = group[0][1]
                if getattr(worker, "streams", False):
                    self._stream(worker, group)
                else:
                    self._run(worker, group)

    def _run(self, worker, group) -> None:
        t0 = self._clock()
        try:
            results = worker.run_rounds([item for _, _, item in group])
            self._failures = 0
        except Exception as e:  # noqa: BLE001 - a failed call fails its rounds, not the run
            results = [Failure(self._failed(e))] * len(group)
        self._call_done(t0)
        self.rounds_run += len(group)
        for (ticket, _, _), res in zip(group, results, strict=True):
            self._round_done(ticket, res)

    def _stream(self, worker, first) -> None:
        """Continuous admission: one streaming call of ``worker`` (the slot engine) takes every
        round submitted to it while it runs and delivers each result as its episode ends."""
        t0 = self._clock()
        waiting, taken = list(first), set()

        def take():
            nonlocal waiting
            with self._cv:
                more = [r for r in self._rounds if r[1] is worker]
                self._rounds = [r for r in self._rounds if r[1] is not worker]
                new = [(t, item) for t, _, item in waiting + more if t in self._live]  # cancelled: not run
            waiting = []
            taken.update(t for t, _ in new)
            return new

        def deliver(ticket, result) -> None:
            taken.discard(ticket)
            self.rounds_run += 1
            self._round_done(ticket, result)

        try:
            worker.stream_rounds(take, deliver)
            self._failures = 0
        except Exception as e:  # noqa: BLE001 - a failed call fails its open rounds, not the run
            failure = Failure(self._failed(e))
            for ticket in sorted(taken):
                self._round_done(ticket, failure)
        self._call_done(t0)

    def _round_done(self, ticket: int, result) -> None:
        """A rollout round's result (on the sampler thread), for :meth:`next`."""
        self._done.put((ticket, result))

    def _failed(self, e: Exception) -> Exception:
        """Counts a failed rollout call; after ``max_consecutive_failures`` in a row it is a bug,
        not bad luck: the error that fails the run."""
        self._failures += 1
        if self._failures >= self.max_consecutive_failures:
            return RuntimeError(f"{self._failures} rollout calls failed in a row: {e!r}")
        return e

    def _call_done(self, t0: float) -> None:
        self.intervals["sampler"].append((t0, self._clock()))
        self.round_calls += 1

    # -- the scheduler's side ------------------------------------------------------------------
    def cancel(self, ticket: int) -> None:
        """A waiting round is not run; a running one's result is dropped when it arrives."""
        with self._cv:
            self._live.discard(ticket)

    def pending(self) -> int:
        with self._cv:
            return len(self._live)

    def next(self) -> tuple[int, Any]:
        while True:
            if self.pending() == 0:
                raise IndexError("no job in flight")
            try:
                ticket, result = self._done.get(timeout=1.0)
            except queue.Empty:
                if not self._sampler.is_alive() and not self._closed:
                    raise RuntimeError("the sampler thread died") from None
                continue
            with self._cv:
                if ticket not in self._live:
                    continue
                self._live.discard(ticket)
            if isinstance(result, Failure) and self._failures >= self.max_consecutive_failures:
                raise result.error
            self.delivered.append((ticket, self.now()))  # the schedule --replay re-executes
            return ticket, result

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._sampler.join()
        self._learner.shutdown(wait=True)

    def report(self) -> dict:
        """Busy seconds of each thread, the seconds both were busy, and the sampler's calls."""
        busy = {k: sum(b - a for a, b in v) for k, v in self.intervals.items()}
        overlap = 0.0
        for a0, a1 in self.intervals["sampler"]:
            for b0, b1 in self.intervals["learner"]:
                overlap += max(0.0, min(a1, b1) - max(a0, b0))
        return {
            "clock": "real",
            "wall_s": self._clock(),
            "sampler_busy_s": busy["sampler"],
            "learner_busy_s": busy["learner"],
            "overlap_s": overlap,
            "sampler_calls": self.round_calls,
            "rounds_per_call": self.rounds_run / max(self.round_calls, 1),
        }
