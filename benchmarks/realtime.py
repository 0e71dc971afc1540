"""The training loop on the wall clock: sync vs async vs windowed FIFO, one run, side by side.

Each mode trains the default run's model and task (``configs/default.py``, a short RL phase at a
smaller batch so the table takes minutes) with ``--config.scheduler.clock=real``: rollout rounds on
the sampler thread, learner steps on the learner thread (``agentjax/sampling/realtime.py``). Same
seed, slots, batch and machine for every mode; a first untimed run compiles the sampler.
Reported per mode: trained trajectories per wall second between the end of the first learner
step (each run traces its train step there) and the last one, the speed-up over ``sync``, the
seconds the sampler and the learner were busy and both at once, and the largest version gap
trained on (the bound is ``admission.max_version_gap``). Target (issue #15): async >= 1.5x sync
trajectories/s with the gap bound never exceeded. Writes ``benchmarks/results/realtime.json``.

    python benchmarks/realtime.py [--steps 8] [--batch 16] [--slots 32]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentjax import system  # noqa: E402
from configs import default  # noqa: E402

MODES = ("sync", "async", "windowed_fifo")


def config(mode: str, steps: int, batch: int, slots: int, gap: int):
    c = default.get_config()
    c.task.eval_tasks = 16
    c.warm_start.update(episodes=256, steps=20, batch_size=32)
    c.rl.update(steps=steps, group_size=4, batch_size=batch, eval_every=steps)
    c.scheduler.update(mode=mode, clock="real", num_slots=slots, window=batch)
    c.admission.max_version_gap = gap
    c.checkpoint_every, c.log_every, c.report = 0, 1, False
    return c


def run(mode: str, args) -> dict:
    with tempfile.TemporaryDirectory() as wd:
        summary = system.train(
            config(mode, args.steps, args.batch, args.slots, args.gap), wd, log=lambda s: None
        )
        rows = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl")) if x.strip()]
    steps = [r for r in rows if "loss/total" in r]
    rt = summary["realtime"]
    # Steady state: from the end of the first learner step (each run compiles its train step in
    # that step) to the end of the last; the real clock's seconds are the rows' virtual_time.
    t1, tn = steps[0]["virtual_time"], steps[-1]["virtual_time"]
    return {
        "mode": mode,
        "trained": len(steps) * args.batch,
        "rl_wall_s": tn,
        "steady_wall_s": tn - t1,
        "traj_per_s": (len(steps) - 1) * args.batch / (tn - t1),
        "sampler_busy_s": rt["sampler_busy_s"],
        "learner_busy_s": rt["learner_busy_s"],
        "overlap_s": rt["overlap_s"],
        "rounds_per_call": rt["rounds_per_call"],
        "max_version_gap": max(r["version_gap_max"] for r in steps),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--slots", type=int, default=32)
    p.add_argument("--gap", type=int, default=2)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "realtime.json"))
    args = p.parse_args()
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    run("async", argparse.Namespace(**{**vars(args), "steps": 2}))  # compiles the sampler
    rows = [run(m, args) for m in MODES]
    base = rows[0]["traj_per_s"]
    print(f"{'mode':>14} | traj/s | vs sync | RL wall s | sampler busy | learner busy | overlap | max gap")
    for r in rows:
        r["speedup_vs_sync"] = r["traj_per_s"] / base
        print(
            f"{r['mode']:>14} | {r['traj_per_s']:6.2f} | {r['speedup_vs_sync']:6.2f}x | "
            f"{r['rl_wall_s']:9.1f} | {r['sampler_busy_s']:12.1f} | {r['learner_busy_s']:12.1f} | "
            f"{r['overlap_s']:7.1f} | {r['max_version_gap']} (bound {args.gap})"
        )
    a = rows[1]
    targets = {
        "async >= 1.5x sync trajectories/s": a["speedup_vs_sync"] >= 1.5,
        "gap bound never exceeded": all(r["max_version_gap"] <= args.gap for r in rows),
    }
    for k, v in targets.items():
        print(f"{'MET ' if v else 'MISSED'} {k}")
    out = {
        "args": vars(args),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_before_after": [load0, os.getloadavg()[0]],
        "total_s": time.perf_counter() - t0,
        "rows": rows,
        "targets": targets,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
