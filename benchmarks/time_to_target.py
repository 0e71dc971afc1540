"""The seed's criterion for an architecture: wall time to the same held-out score, per scheduling mode.

    python benchmarks/time_to_target.py                     # sync / async / windowed FIFO, seeds 0-2
    python benchmarks/time_to_target.py --seeds 0 1 2 3 4 --modes windowed_fifo

Each (mode, seed) runs the README's main job (``python -m launch.train``: real time on the slot
engine) with ``--config.scheduler.mode=MODE --config.seed=S`` into ``<root>/<mode>/seed_S`` (a
finished run there is read, not re-run). Per run: the first RL step whose greedy held-out
evaluation (256 tasks, every 20 steps) reached the target, the wall time at that step (the whole
command: warm start and earlier evaluations included, the same in every mode), the final score,
and the measured costs (learner and sampler busy seconds, their overlap, environment seconds).
Prints one table with the median per mode and its ratio to sync, and writes
``benchmarks/results/time_to_target.json``. Same machine, same threads, one run after another.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learning_seeds import ROOT, run_seed  # noqa: E402

MODES = ("sync", "async", "windowed_fifo")


def time_to(workdir: str, target: float) -> dict:
    """Step and wall seconds at the first held-out evaluation >= ``target`` (None: never)."""
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl")) if x.strip()]
    wall = {r["step"]: r["wall"] for r in rows if "wall" in r}
    hit = next((r["step"] for r in rows if r.get("eval/success", 0.0) >= target and r["step"] > 0), None)
    return {"step": hit, "wall_s": None if hit is None else wall.get(hit)}


def measure(mode: str, seed: int, root: str, target: float, extra: list[str], fresh: bool) -> dict:
    wd = os.path.join(root, mode, f"seed_{seed}")
    flags = [*extra, f"--config.scheduler.mode={mode}"] if mode != "windowed_fifo" else list(extra)
    r = run_seed(seed, wd, flags, fresh)
    s = json.load(open(os.path.join(wd, "summary.json")))
    rt, eng = s.get("realtime", {}), s.get("engine", {})
    return {
        "mode": mode,
        "seed": seed,
        "final": r["final"],
        "to_target": time_to(wd, target),
        "wall_s": r["wall_seconds"],
        "learner_busy_s": rt.get("learner_busy_s"),
        "sampler_busy_s": rt.get("sampler_busy_s"),
        "overlap_s": rt.get("overlap_s"),
        "env_cpu_s": s["cost_ledger"]["cpu_seconds"]["environment"],
        "episodes": s["scheduler"]["terminal"]["submitted"],
        "trained_per_s": s["scheduler"]["throughput"],  # trained trajectories / RL-phase wall second
        "max_version_gap": s["scheduler"]["max_version_gap"],
        "engine_tokens_per_s": eng.get("tokens_per_s"),
        "flags": flags,
    }


def table(rows: list[dict], target: float) -> str:
    out = [
        f"| mode | seed | final | step to {target:.2f} | wall to {target:.2f} | total wall | "
        "learner busy | sampler busy | overlap | engine tok/s | trained traj/s | max gap |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    for r in rows:
        t = r["to_target"]
        cells = [
            r["mode"],
            r["seed"],
            f"{r['final']:.3f}",
            f(t["step"], "d"),
            "-" if t["wall_s"] is None else f"{t['wall_s']:.0f} s",
            *(f"{f(r[k], '.0f')} s" for k in ("wall_s", "learner_busy_s", "sampler_busy_s", "overlap_s")),
            f(r["engine_tokens_per_s"], ".0f"),
            f(r["trained_per_s"], ".1f"),
            r["max_version_gap"],
        ]
        out.append("| " + " | ".join(map(str, cells)) + " |")
    out += [
        "",
        f"| mode | seeds reaching {target:.2f} | median wall to {target:.2f} | speed-up vs sync | "
        "median trained traj/s | throughput vs sync |",
        "|---|---|---|---|---|---|",
    ]
    med, thr = {}, {}
    for m in dict.fromkeys(r["mode"] for r in rows):
        ts = [r["to_target"]["wall_s"] for r in rows if r["mode"] == m]
        med[m] = statistics.median(math.inf if t is None else t for t in ts)  # never reached: inf
        thr[m] = statistics.median(r["trained_per_s"] for r in rows if r["mode"] == m)
    for m in med:
        n = sum(r["to_target"]["wall_s"] is not None for r in rows if r["mode"] == m)
        k = sum(r["mode"] == m for r in rows)
        finite = math.isfinite(med[m]) and math.isfinite(med.get("sync", math.inf))
        faster = f"{med['sync'] / med[m]:.2f}x" if finite else "-"
        ratio = "-" if "sync" not in thr else f"{thr[m] / thr['sync']:.2f}x"
        when = f"{med[m]:.0f} s" if math.isfinite(med[m]) else "not reached"
        out.append(f"| {m} | {n}/{k} | {when} | {faster} | {thr[m]:.1f} | {ratio} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--root", default="workdir/time_to_target")
    ap.add_argument("--extra", action="append", default=[], help="extra launch.train flags")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "time_to_target.json"))
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = [measure(m, s, a.root, a.target, a.extra, a.fresh) for m in a.modes for s in a.seeds]
    print(table(rows, a.target))
    print(f"total wall time {time.perf_counter() - t0:.0f} s")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"target": a.target, "rows": rows, "extra": a.extra}, f, indent=1)


if __name__ == "__main__":
    main()
