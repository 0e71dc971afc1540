"""Environment pool: environment steps run on workers, concurrently with decoding, and measured.

    with EnvPool(workers=8, kind="thread") as pool:       # "process" for CPU-bound Python envs
        pool.submit(key, step_fn, env, action)            # returns at once
        ... decode a chunk ...
        for done in pool.collect(timeout=0.0):            # finished steps (key, value, error)
            ...
        stats = pool.stats()                              # utilisation, queue, latency, Little

Threads suit environments that wait on subprocesses, sandboxes or I/O (the GIL is released while
they wait); processes suit CPU-bound Python environments. In a process pool ``fn`` and its
arguments are pickled to a worker and the value back, so a stateful environment travels with the
step (``fn(env, action) -> (env, result)``); processes are started with ``spawn`` (a forked JAX
process is unsafe).

Measured on real events: each step's arrival (``submit``), start and end (timed by the worker,
``time.monotonic``, one clock for every process on the host); the number in flight is a counter
integrated over time, raised at ``submit`` and lowered when the step's future completes.
:func:`pool_stats` reports utilisation, mean queue length, per-step latency, and checks Little's
law, mean in flight ``L`` against ``lambda x W`` (arrival rate x mean residence) from those two
independent measurements. ``implied_workers`` is the pool size the load implies: the arrival rate
while steps arrive x mean service time (the workers a steady stream keeps busy, Little's law on the
service stage), rounded up.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import numpy as np

from agentjax.choice import Choice


class EnvPoolKind(Choice):
    """The environment workers: threads, or processes (for CPU-bound Python environments)."""

    THREAD = "thread"
    PROCESS = "process"


class StepEvent(NamedTuple):
    arrive: float  # submit (monotonic seconds)
    start: float  # a worker began it
    end: float  # the worker finished it


class Done(NamedTuple):
    key: Hashable
    value: Any  # fn's return value (None on error)
    error: BaseException | None
    event: StepEvent


def _timed(fn, args):
    t0 = time.monotonic()
    try:
        value, error = fn(*args), None
    except Exception as e:  # noqa: BLE001 - a broken environment step is reported, not raised here
        value, error = None, e
    return t0, time.monotonic(), value, error


class EnvPool:
    """``workers`` threads or processes stepping environments (see the module docstring)."""

    def __init__(self, workers: int, kind: EnvPoolKind = EnvPoolKind.THREAD):
        kind = EnvPoolKind.parse("env_pool.kind", kind)
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"env_pool.workers={workers!r} is invalid; must be an int >= 1")
        self.workers, self.kind = workers, kind
        if kind == "thread":
            self._ex = cf.ThreadPoolExecutor(workers, thread_name_prefix="envpool")
        else:
            self._ex = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        self._lock = threading.Lock()
        self._pending: dict[cf.Future, tuple[Hashable, float]] = {}
        self._events: list[StepEvent] = []
        self.t0 = self._last = time.monotonic()
        self._n = 0  # in flight: submitted, future not yet complete
        self._area = 0.0  # integral of the in-flight count over time

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._ex.shutdown(wait=True, cancel_futures=True)

    def _count(self, delta: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._area += self._n * (now - self._last)
            self._n, self._last = self._n + delta, now

    def submit(self, key: Hashable, fn: Callable, *args) -> None:
        """Queues ``fn(*args)``; its result comes back from :meth:`collect` under ``key``."""
        arrive = time.monotonic()
        self._count(+1)
        fut = self._ex.submit(_timed, fn, args)
        self._pending[fut] = (key, arrive)
        fut.add_done_callback(lambda _: self._count(-1))

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def collect(self, timeout: float | None = 0.0) -> list[Done]:
        """Finished steps, waiting up to ``timeout`` seconds for the first (None: until one ends;
        0: only those already done). Returned in submission order among the finished."""
        if not self._pending:
            return []
        done, _ = cf.wait(list(self._pending), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        out = []
        for fut in [f for f in self._pending if f in done]:
            key, arrive = self._pending.pop(fut)
            try:
                start, end, value, error = fut.result()
            except Exception as e:  # noqa: BLE001 - e.g. an unpicklable result in a process pool
                start = end = time.monotonic()
                value, error = None, e
            event = StepEvent(arrive, start, end)
            self._events.append(event)
            out.append(Done(key, value, error, event))
        return out

    def stats(self) -> dict[str, float]:
        """:func:`pool_stats` over the pool's life so far."""
        self._count(0)
        with self._lock:
            t1, area = self._last, self._area
        return pool_stats(self._events, self.workers, self.t0, t1, in_flight_area=area)


def _time_average(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> float:
    overlap = np.clip(np.minimum(ends, t1) - np.maximum(starts, t0), 0.0, None)
    return float(overlap.sum() / (t1 - t0)) if t1 > t0 else 0.0


def _max_concurrent(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals ``[start, end)`` open at one instant (an end at t closes before a start
    at t opens)."""
    marks = sorted([(float(t), 1) for t in starts] + [(float(t), -1) for t in ends])
    return max(np.cumsum([d for _, d in marks]), default=0)


def pool_stats(
    events, workers: int, t0: float, t1: float, *, in_flight_area: float | None = None
) -> dict[str, float]:
    """Utilisation, queue length, latency and Little's law over ``[t0, t1]`` from step events.

    ``in_flight_area``: the integral of the in-flight counter (measured independently of the
    events); without it the mean in flight is computed from the events' ``[arrive, end]``.
    """
    ev = np.asarray(list(events), np.float64).reshape(-1, 3)
    span = max(t1 - t0, 1e-12)
    arrive, start, end = ev[:, 0], ev[:, 1], ev[:, 2]
    residence, service, wait = end - arrive, end - start, start - arrive
    rate = ev.shape[0] / span
    # while steps arrive: a burst or a steady stream, not diluted by the final drain
    arrivals = arrive.max() - arrive.min() if ev.shape[0] > 1 else 0.0
    arrival_rate = (ev.shape[0] - 1) / arrivals if arrivals > 0 else rate
    mean_res = float(residence.mean()) if ev.size else 0.0
    mean_service = float(service.mean()) if ev.size else 0.0
    measured = in_flight_area / span if in_flight_area is not None else _time_average(arrive, end, t0, t1)
    predicted = rate * mean_res
    pct = lambda q: float(np.percentile(residence, q)) if ev.size else 0.0
    return {
        "workers": float(workers),
        "steps": float(ev.shape[0]),
        "seconds": float(span),
        "arrival_rate": rate,
        "latency_mean": mean_res,
        "latency_p50": pct(50),
        "latency_p95": pct(95),
        "latency_max": float(residence.max()) if ev.size else 0.0,
        "service_mean": mean_service,
        "queue_wait_mean": float(wait.mean()) if ev.size else 0.0,
        "queue_length_mean": _time_average(arrive, start, t0, t1),
        "utilisation": _time_average(start, end, t0, t1) / workers,
        "busy_max": float(_max_concurrent(start, end)),  # steps served at once (<= workers)
        "in_flight_measured": measured,
        "in_flight_littles_law": predicted,
        "littles_law_rel_error": abs(measured - predicted) / max(measured, 1e-12),
        "arrival_rate_while_arriving": arrival_rate,
        "offered_load": arrival_rate * mean_service,
        "implied_workers": float(math.ceil(arrival_rate * mean_service - 1e-9)),
    }


class RealLatency:
    """Wraps an environment so each step also *waits* its reported latency x ``scale`` (seconds):
    a simulated latency (minirepo's long-tailed ``evidence["latency_s"]``) applied as real waiting,
    released to other threads while it sleeps, as a sandbox or subprocess would."""

    def __init__(self, env, scale: float = 1.0):
        self.env, self.scale = env, scale

    def reset(self, task, seed: int):
        return self.env.reset(task, seed)

    def step(self, action_text: str):
        res = self.env.step(action_text)
        time.sleep(self.scale * float(res.evidence.get("latency_s", 0.0)))
        return res

    def __getattr__(self, name):  # audit() and the rest of the wrapped environment
        if name in ("env", "scale"):
            raise AttributeError(name)
        return getattr(self.env, name)
