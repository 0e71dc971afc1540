"""Scheduling benchmark: sync vs async vs windowed FIFO on a long-tailed workload, side by side.

Virtual clock (deterministic), equal devices (the same number of concurrent rollout slots in every
mode), a fixed simulated learner step time. Prints one table and PASS/FAIL per target, and writes
``benchmarks/results/scheduling.json``.

Targets (issue 6):
  * async >= 2.0x sync throughput (trajectories consumed by the learner per second), with the
    configured max version gap never exceeded;
  * windowed_fifo keeps every task class's admitted share within 5 percentage points of its
    submitted share while >= 1.5x sync throughput.

    python benchmarks/scheduling.py [--steps 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import numpy as np

from agentjax.diagnostics import metrics
from agentjax.sampling import scheduler as sch
from agentjax.sampling import staleness as stl
from agentjax.sampling.simulated import DEFAULT_CLASSES, SimulatedWorker, long_tailed_workload

SLOTS = BATCH = 32
MAX_GAP = 4
LEARNER_STEP = 10.0  # virtual seconds per learner step
QUEUE_CAPACITY = 8 * BATCH
WINDOWS = (1, 8, 32, 64, 128, 256)
TARGET_WINDOW = 32


def learner(params: np.ndarray, train: sch.Train) -> np.ndarray:
    """A stand-in pure learner; its output depends on batch order and tokens (determinism)."""
    x = np.array([float(c.trajectory.turns[-1].action[:8].sum()) for c in train.batch])
    return params * 0.5 + np.sin(x * np.arange(1, x.size + 1)).sum()


def run_mode(mode, window, seed, steps, round_budget=None):
    cfg = sch.SchedulerConfig(
        mode=mode,
        window=window,
        num_slots=SLOTS,
        round_budget=round_budget,
        learner_step_time=LEARNER_STEP,
    )
    scfg = stl.StalenessConfig(max_version_gap=MAX_GAP, queue_capacity=QUEUE_CAPACITY)
    wl = long_tailed_workload(seed)
    return sch.run(
        wl,
        SimulatedWorker(),
        learner,
        np.zeros(4),
        config=cfg,
        staleness_config=scfg,
        batch_size=BATCH,
        num_steps=steps,
    )


def workload_stats(seed: int, n: int = 20000) -> dict:
    d = np.array([t.duration for t in itertools.islice(long_tailed_workload(seed), n)])
    p = metrics.duration_percentiles(d)
    return {**p, "p99_over_p50": p["p99"] / p["p50"], "mean": float(d.mean())}


def row(name, mode, window, log, wall):
    s = metrics.summarise(log)
    shares = s["class_shares"]
    return {
        "name": name,
        "mode": mode,
        "window": window,
        "throughput": s["throughput"],
        "elapsed": s["elapsed"],
        "consumed": s["consumed"],
        "max_version_gap": s["max_version_gap"],
        "configured_max_gap": MAX_GAP,
        "max_share_deviation_pp": s["max_share_deviation_pp"],
        "class_shares": shares,
        "long_task_drop_rate": s["long_task_drop_rate"],
        "slot_utilisation": s["slot_utilisation"],
        "duration": s["duration"],
        "mid_run_cancellation_rate": s["mid_run_cancellation_rate"],
        "rejection_rate": s["terminal"]["rejection_rate"],
        "terminal": s["terminal"],
        "version_gap_hist": s["version_gap_hist"],
        "mean_generation_gap": s["mean_generation_gap"],
        "mean_queue_gap": s["mean_queue_gap"],
        "conserved": bool(stl.is_conserved(log.staleness)),
        "wall_seconds": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args()

    wstats = workload_stats(args.seed)
    runs = [("sync", "sync", None, None), ("sync+partial(512)", "sync", None, 512)]
    runs += [("async", "async", None, None), ("async+partial(512)", "async", None, 512)]
    runs += [(f"windowed_fifo({w})", "windowed_fifo", w, None) for w in WINDOWS]
    rows, logs = [], {}
    for name, mode, window, budget in runs:
        t0 = time.perf_counter()
        logs[name] = run_mode(mode, window, args.seed, args.steps, budget)
        rows.append(row(name, mode, window, logs[name], time.perf_counter() - t0))
    base = rows[0]["throughput"]
    for r in rows:
        r["ratio_vs_sync"] = r["throughput"] / base

    again = run_mode("async", None, args.seed, args.steps)
    key = lambda lg: [(c.index, c.trajectory.turns[-1].action.tobytes()) for b in lg.batches for c in b]
    deterministic = key(again) == key(logs["async"]) and np.array_equal(again.params, logs["async"].params)

    by = {r["name"]: r for r in rows}
    a, w = by["async"], by[f"windowed_fifo({TARGET_WINDOW})"]
    targets = {
        "workload p99/p50 >= 10": wstats["p99_over_p50"] >= 10,
        "async >= 2.0x sync": a["ratio_vs_sync"] >= 2.0,
        "async max version gap <= configured": a["max_version_gap"] <= MAX_GAP,
        f"windowed_fifo({TARGET_WINDOW}) class shares within 5 pp": w["max_share_deviation_pp"] <= 5.0,
        f"windowed_fifo({TARGET_WINDOW}) >= 1.5x sync": w["ratio_vs_sync"] >= 1.5,
        "every mode: max gap <= configured": all(r["max_version_gap"] <= MAX_GAP for r in rows),
        "every mode: conservation": all(r["conserved"] for r in rows),
        "async deterministic (same seed -> same trajectories, order, params)": deterministic,
    }

    print(
        f"workload: classes {[(c.name, c.share, c.median_seconds) for c in DEFAULT_CLASSES]}, "
        f"episode p50 {wstats['p50']:.1f} s, p99 {wstats['p99']:.1f} s "
        f"(p99/p50 = {wstats['p99_over_p50']:.1f})"
    )
    print(
        f"slots = batch = {SLOTS}, learner step {LEARNER_STEP} s, max version gap {MAX_GAP}, "
        f"queue capacity {QUEUE_CAPACITY}, {args.steps} learner steps per mode, seed {args.seed}\n"
    )
    print(table(rows))
    print()
    for k, ok in targets.items():
        print(f"{'PASS' if ok else 'FAIL'}  {k}")
    print("\nwindowed_fifo target (shares within 5 pp and >= 1.5x sync) by window:")
    for r in rows:
        if r["mode"] == "windowed_fifo":
            ok = r["max_share_deviation_pp"] <= 5.0 and r["ratio_vs_sync"] >= 1.5
            r["meets_windowed_target"] = ok
            print(
                f"  window {r['window']:>4}: {'PASS' if ok else 'FAIL'} "
                f"({r['max_share_deviation_pp']:.1f} pp, {r['ratio_vs_sync']:.2f}x)"
            )

    os.makedirs(args.out, exist_ok=True)
    out = {
        "config": {
            "slots": SLOTS,
            "batch_size": BATCH,
            "max_version_gap": MAX_GAP,
            "learner_step_seconds": LEARNER_STEP,
            "queue_capacity": QUEUE_CAPACITY,
            "steps": args.steps,
            "seed": args.seed,
            "classes": [c.__dict__ for c in DEFAULT_CLASSES],
        },
        "workload": wstats,
        "rows": rows,
        "targets": targets,
    }
    with open(os.path.join(args.out, "scheduling.json"), "w") as f:
        json.dump(out, f, indent=1, default=float)


def table(rows: list[dict]) -> str:
    head = (
        "| mode | traj/s | vs sync | max gap (cfg) | share dev (pp) | long adm/sub | "
        "long drop | slot util | p50/p99 episode (s) | gap gen/queue | cancel | reject |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lo = r["class_shares"].get("long", {"admitted": 0.0, "submitted": 0.0})
        d = r["duration"]
        lines.append(
            f"| {r['name']} | {r['throughput']:.3f} | {r['ratio_vs_sync']:.2f}x | "
            f"{r['max_version_gap']} ({r['configured_max_gap']}) | "
            f"{r['max_share_deviation_pp']:.1f} | "
            f"{100 * lo['admitted']:.1f}% / {100 * lo['submitted']:.1f}% | "
            f"{100 * r['long_task_drop_rate']:.1f}% | {100 * r['slot_utilisation']:.1f}% | "
            f"{d['p50']:.0f} / {d['p99']:.0f} | "
            f"{r['mean_generation_gap']:.2f} / {r['mean_queue_gap']:.2f} | "
            f"{100 * r['mid_run_cancellation_rate']:.1f}% | "
            f"{100 * r['rejection_rate']:.1f}% |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
