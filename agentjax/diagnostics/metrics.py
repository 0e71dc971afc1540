"""Metrics that make the scheduling trade-offs visible (``PROBLEMS.md`` sections 1-3).

Pure functions over plain sequences (durations, class names, terminal states, intervals), plus
:func:`summarise`, which reads a scheduler run log by duck typing (``records``, ``batches``,
``step_end_times``, ``config``) so that this module imports nothing from ``sampling/``.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def throughput(num_consumed: int, elapsed: float) -> float:
    """Trajectories consumed by the learner per second."""
    return float(num_consumed) / elapsed if elapsed > 0 else 0.0


def batch_slot_utilisation(durations: Sequence[float]) -> float:
    """One synchronous batch: ``U = sum_i d_i / (n * max_i d_i)`` (10, 20, 100 s -> 43.3%)."""
    d = np.asarray(durations, np.float64)
    return float(d.sum() / (d.size * d.max())) if d.size and d.max() > 0 else 0.0


def slot_utilisation(busy_seconds: Iterable[float], num_slots: int, elapsed: float) -> float:
    """Share of slot-seconds spent running rollouts: ``sum busy / (slots * elapsed)``."""
    if elapsed <= 0:
        return 0.0
    return float(np.sum(np.fromiter(busy_seconds, np.float64)) / (num_slots * elapsed))


def duration_percentiles(durations: Sequence[float], qs=(50, 95, 99)) -> dict[str, float]:
    d = np.asarray(durations, np.float64)
    if d.size == 0:
        return {f"p{q}": float("nan") for q in qs}
    return {f"p{q}": float(np.percentile(d, q)) for q in qs}


def class_shares(submitted: Sequence[str], admitted: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per task class: share among submitted, share among admitted, and the gap in points.

    ``deviation_pp = 100 * (admitted_share - submitted_share)``; negative for a class the
    scheduler under-admits (fast-first bias shows up as negative values for slow classes).
    """
    sub, adm = collections.Counter(submitted), collections.Counter(admitted)
    ns, na = max(len(submitted), 1), max(len(admitted), 1)
    out = {}
    for c in sorted(set(sub) | set(adm)):
        s, a = sub[c] / ns, adm[c] / na
        out[c] = {"submitted": s, "admitted": a, "deviation_pp": 100.0 * (a - s)}
    return out


def max_share_deviation_pp(shares: dict[str, dict[str, float]]) -> float:
    return max((abs(v["deviation_pp"]) for v in shares.values()), default=0.0)


def terminal_rates(terminals: Sequence[str]) -> dict[str, float]:
    """Counts and rates of each terminal state, plus the cancellation and rejection rates."""
    n = len(terminals)
    counts = collections.Counter(terminals)
    out: dict[str, float] = {"submitted": n}
    for k, v in sorted(counts.items()):
        out[k] = v
    out["cancellation_rate"] = counts["cancelled"] / n if n else 0.0
    out["rejection_rate"] = counts["rejected_stale"] / n if n else 0.0
    return out


def long_task_drop_rate(is_long: Sequence[bool], trained: Sequence[bool]) -> float:
    """Share of long tasks that never reached the learner (rejected, cancelled, failed, masked)."""
    lo, tr = np.asarray(is_long, bool), np.asarray(trained, bool)
    return float(np.mean(~tr[lo])) if lo.any() else 0.0


def version_gap_histogram(gaps: Sequence[int], num_bins: int) -> np.ndarray:
    """Counts of gaps 0..num_bins-2; the last bin collects every larger gap."""
    g = np.clip(np.asarray(gaps, np.int64), 0, num_bins - 1)
    return np.bincount(g, minlength=num_bins).astype(np.int64)


def ess(weights: Sequence[float]) -> float:
    """Effective sample size ``(sum w)^2 / sum w^2`` (N for equal weights)."""
    w = np.asarray(weights, np.float64)
    den = float(np.sum(w * w))
    return float(np.sum(w) ** 2 / den) if den > 0 else 0.0


def masked_fractions(reasons: Sequence[str | None]) -> dict[str, float]:
    """Share of samples (or tokens) masked per reason; ``None`` means not masked."""
    n = len(reasons)
    counts = collections.Counter(r for r in reasons if r is not None)
    out = {r: c / n for r, c in sorted(counts.items())}
    out["total"] = sum(counts.values()) / n if n else 0.0
    return out


def delta_statistics(delta: np.ndarray, mask: np.ndarray | None = None) -> dict[str, float]:
    """``delta_t = log pi_train - log mu_infer`` on masked tokens: mean |delta|, tails, max."""
    d = np.asarray(delta, np.float64)
    if mask is not None:
        d = d[np.asarray(mask, bool)]
    a = np.abs(d)
    if a.size == 0:
        return {"mean_abs": 0.0, "p50_abs": 0.0, "p99_abs": 0.0, "max_abs": 0.0, "mean": 0.0}
    return {
        "mean_abs": float(a.mean()),
        "p50_abs": float(np.percentile(a, 50)),
        "p99_abs": float(np.percentile(a, 99)),
        "max_abs": float(a.max()),
        "mean": float(d.mean()),
    }


def littles_law(arrival_rate: float, mean_residence: float) -> float:
    """Expected number in flight ``L = lambda * W`` (4/s x 90 s = 360)."""
    return float(arrival_rate * mean_residence)


def time_average_in_flight(intervals: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    """Measured mean number of open intervals over ``[t0, t1]``."""
    if t1 <= t0:
        return 0.0
    iv = np.asarray(intervals, np.float64).reshape(-1, 2)
    overlap = np.clip(np.minimum(iv[:, 1], t1) - np.maximum(iv[:, 0], t0), 0.0, None)
    return float(overlap.sum() / (t1 - t0))


def env_pool_report(intervals: Sequence[tuple[float, float]], t0: float, t1: float) -> dict:
    """Env pool in-flight count measured vs predicted by Little's law from the same intervals."""
    iv = np.asarray(intervals, np.float64).reshape(-1, 2)
    inside = iv[(iv[:, 0] >= t0) & (iv[:, 0] < t1)]
    rate = inside.shape[0] / (t1 - t0) if t1 > t0 else 0.0
    residence = float(np.mean(inside[:, 1] - inside[:, 0])) if inside.size else 0.0
    return {
        "arrival_rate": rate,
        "mean_residence": residence,
        "predicted_in_flight": littles_law(rate, residence),
        "measured_in_flight": time_average_in_flight(iv, t0, t1),
    }


def capacity_times(t_rollout: float, t_learn: float, t_sync: float) -> tuple[float, float]:
    """Iteration time serial ``T_r + T_l + T_w`` and the overlap lower bound
    ``max(T_r, T_l) + T_w`` (80/40/5 s -> 125 s vs >= 85 s; not a speed-up at equal cost)."""
    return t_rollout + t_learn + t_sync, max(t_rollout, t_learn) + t_sync


COST_ITEMS = ("generation", "environment", "verification", "training", "retry_waste")


@dataclasses.dataclass
class CostLedger:
    """``C_task = generation + environment + verification + training + retry/waste``, in
    device-seconds and CPU-seconds, kept apart (they are not the same currency)."""

    device_seconds: dict[str, float] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(COST_ITEMS, 0.0)
    )
    cpu_seconds: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(COST_ITEMS, 0.0))

    def add(self, item: str, *, device: float = 0.0, cpu: float = 0.0) -> None:
        if item not in COST_ITEMS:
            raise ValueError(f"item must be one of {COST_ITEMS}, got {item!r}")
        self.device_seconds[item] += device
        self.cpu_seconds[item] += cpu

    def per_task(self, num_trained: int) -> dict[str, float]:
        n = max(num_trained, 1)
        return {
            "device_seconds": sum(self.device_seconds.values()) / n,
            "cpu_seconds": sum(self.cpu_seconds.values()) / n,
        }


def cost_ledger(records: Iterable[Any], num_steps: int, step_device_seconds: float) -> CostLedger:
    """Ledger from scheduler records: the work of tasks that never trained is retry/waste."""
    ledger = CostLedger()
    for r in records:
        gen = r.generation_time + r.recompute_time
        if r.terminal is not None and r.terminal.value == "trained":
            ledger.add("generation", device=gen)
            ledger.add("environment", cpu=r.env_time)
        else:
            ledger.add("retry_waste", device=gen, cpu=r.env_time)
    ledger.add("training", device=num_steps * step_device_seconds)
    return ledger


def measured_cost_ledger(records: Iterable[Any], trajectories: dict, train_seconds: float) -> CostLedger:
    """The ledger of the real run from measured wall times: each trajectory's generation wall
    share (``timings["generation"]``, device), environment wall (``env_wall`` less the final
    step, CPU), verification wall (``verify_wall``: the final step, submission and verifier, CPU),
    and the learner's measured step time; work that never trained is retry/waste."""
    ledger = CostLedger()
    for r in records:
        t = trajectories.get(r.index)
        if t is None:
            continue
        gen = float(t.timings.get("generation", 0.0))
        verify = float(t.timings.get("verify_wall", 0.0))
        env = max(float(t.timings.get("env_wall", 0.0)) - verify, 0.0)
        if r.terminal is not None and r.terminal.value == "trained":
            ledger.add("generation", device=gen)
            ledger.add("environment", cpu=env)
            ledger.add("verification", cpu=verify)
        else:
            ledger.add("retry_waste", device=gen, cpu=env + verify)
    ledger.add("training", device=train_seconds)
    return ledger


def class_fast_first(classes: Sequence[str], durations: Sequence[float], trained: Sequence[bool]) -> dict:
    """Fast-first bias over the task classes that exist in the run: per class its mean episode
    duration and the share that never trained; the slowest class's drop rate is the headline."""
    by: dict[str, list] = collections.defaultdict(list)
    for c, d, t in zip(classes, durations, trained, strict=True):
        by[c].append((d, t))
    dur = {c: _mean([d for d, _ in v if d == d]) for c, v in sorted(by.items())}
    drop = {c: float(np.mean([not t for _, t in v])) for c, v in sorted(by.items())}
    slowest = max(dur, key=dur.get) if dur else ""
    return {
        "duration_by_class": dur,
        "drop_rate_by_class": drop,
        "slowest_class": slowest,
        "slowest_class_drop_rate": drop.get(slowest, 0.0),
    }


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else 0.0


def summarise(log: Any, long_classes: Sequence[str] | None = ("long",)) -> dict[str, Any]:
    """All scheduling metrics of one run log; submissions cancelled at shutdown are censored
    (neither admitted nor dropped) for the share and drop-rate metrics."""
    recs = log.records
    done = [r for r in recs if r.reason != "shutdown"]
    trained = [r.terminal.value == "trained" for r in done]
    gaps = [r.version_gap for r in done if r.terminal.value == "trained"]
    weights = [c.weight for b in log.batches for c in b]
    elapsed = log.step_end_times[-1] if log.step_end_times else 0.0
    shares = class_shares(
        [r.task_class for r in done],
        [r.task_class for r, t in zip(done, trained, strict=True) if t],
    )
    return {
        "steps": len(log.step_end_times),
        "elapsed": elapsed,
        "consumed": len(weights),
        "throughput": throughput(len(weights), elapsed),
        "slot_utilisation": slot_utilisation((r.busy_time for r in recs), log.config.num_slots, elapsed),
        "duration": duration_percentiles(
            [r.complete_time - r.submit_time for r in done if r.complete_time == r.complete_time]
        ),
        "terminal": terminal_rates([r.terminal.value for r in recs]),
        "mid_run_cancellation_rate": float(np.mean([r.terminal.value == "cancelled" for r in done]))
        if done
        else 0.0,
        "class_shares": shares,
        "max_share_deviation_pp": max_share_deviation_pp(shares),
        **(
            {}
            if long_classes is None
            else {
                "long_task_drop_rate": long_task_drop_rate(
                    [r.task_class in long_classes for r in done], trained
                )
            }
        ),
        **class_fast_first(
            [r.task_class for r in done], [r.complete_time - r.submit_time for r in done], trained
        ),
        "max_version_gap": max(gaps, default=0),
        "mean_generation_gap": _mean([r.gen_gap for r in done if r.terminal.value == "trained"]),
        "mean_queue_gap": _mean([r.queue_gap for r in done if r.terminal.value == "trained"]),
        "version_gap_hist": version_gap_histogram(gaps, 8).tolist(),
        "ess_fraction": ess(weights) / len(weights) if weights else 0.0,
    }
