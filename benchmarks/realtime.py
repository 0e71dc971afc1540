"""The training loop on the wall clock, one run, side by side: lock-step Rollout (sync), the slot
engine (sync), and the slot engine with the learner overlapped (async, windowed FIFO).

Each row trains the default run's model and task (``configs/default.py``, a short RL phase at a
smaller batch so the table takes minutes) with ``--config.scheduler.clock=real``: rollout rounds on
the sampler thread, learner steps on the learner thread (``agentjax/sampling/realtime.py``).
``--latency-scale s`` makes every tool call wait its simulated long-tailed latency x s in real
time (``scheduler.env_latency_scale``; the engine keeps decoding other slots meanwhile; default 1:
the latency the virtual clock charges). Same
seed, slots, batch, env workers and machine for every row; a first untimed run compiles.
Reported per row: trained trajectories per wall second between the end of the first learner
step (each run traces its train step there) and the last one, the speed-up over lock-step sync
and over engine sync, generated tokens/s, slot occupancy, env-pool utilisation, the seconds the
sampler and the learner were busy and both at once, and the version-gap histogram of trained
samples (the bound is ``admission.max_version_gap``). Then each engine row again on the virtual
clock with unit costs measured on engine sync (seconds per token per slot, learner seconds per
step): the simulation's prediction next to the measurement. Targets (issue #15): slot engine >= 2.0x
lock-step; async >= 1.5x engine sync with the gap bound never exceeded; simulation within 25%. Writes
``benchmarks/results/realtime.json``.

    python benchmarks/realtime.py [--steps 8] [--batch 16] [--slots 32] [--latency-scale 1]
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

from agentjax.run import loop  # noqa: E402
from configs import default  # noqa: E402

ROWS = (  # name: (scheduler mode, slot engine)
    ("lock-step sync", "sync", False),
    ("engine sync", "sync", True),
    ("engine async", "async", True),
    ("engine windowed_fifo", "windowed_fifo", True),
)


def config(
    mode: str, steps: int, batch: int, slots: int, gap: int, engine: bool = True, latency: float = 0.0
):
    c = default.get_config()
    c.task.eval_tasks = 16
    c.warm_start.update(episodes=256, steps=20, batch_size=32)
    c.rl.update(steps=steps, group_size=4, batch_size=batch, eval_every=steps)
    c.scheduler.update(
        mode=mode,
        clock="real",
        num_slots=slots,
        window=batch,
        engine_slots=slots if engine else 0,
        env_workers=slots,
        env_latency_scale=latency,
    )
    c.admission.max_version_gap = gap
    c.checkpoint_every, c.log_every, c.report = 0, 1, False
    return c


def run(name: str, mode: str, engine: bool, args, virtual: dict | None = None) -> dict:
    """One row; ``virtual`` (gen_seconds_per_token, learner_step_time): the same workload on the
    virtual clock with those unit costs instead (the simulation's prediction)."""
    with tempfile.TemporaryDirectory() as wd:
        cfg = config(mode, args.steps, args.batch, args.slots, args.gap, engine, args.latency_scale)
        if virtual is not None:
            cfg.scheduler.update(clock="virtual", env_latency_scale=0.0, **virtual)
        summary = loop.train(cfg, wd, log=lambda s: None)
        rows = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl")) if x.strip()]
    steps = [r for r in rows if "loss/total" in r]
    rt, eng, sch = summary.get("realtime", {}), summary.get("engine", {}), summary["scheduler"]
    # Steady state: from the end of the first learner step (each run compiles its train step in
    # that step) to the end of the last; the real clock's seconds are the rows' virtual_time.
    t1, tn = steps[0]["virtual_time"], steps[-1]["virtual_time"]
    return {
        "row": name,
        "mode": mode,
        "engine": engine,
        "tokens_per_s": eng.get("tokens_per_s"),
        "slot_occupancy": eng.get("slot_occupancy"),
        "env_pool_utilisation": eng.get("env_pool", {}).get("utilisation"),
        "version_gap_hist": sch["version_gap_hist"],
        "trained": len(steps) * args.batch,
        "rl_wall_s": tn,
        "steady_wall_s": tn - t1,
        "traj_per_s": (len(steps) - 1) * args.batch / (tn - t1),
        "sampler_busy_s": rt.get("sampler_busy_s"),
        "learner_busy_s": rt.get("learner_busy_s"),
        "overlap_s": rt.get("overlap_s"),
        "rounds_per_call": rt.get("rounds_per_call"),
        "engine_totals": {
            k: eng.get(k) for k in ("tokens", "chunks", "active_slot_chunks", "generate_s", "prefill_s")
        },
        "max_version_gap": max(r["version_gap_max"] for r in steps),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--slots", type=int, default=32)
    p.add_argument("--gap", type=int, default=2)
    p.add_argument("--latency-scale", type=float, default=1.0)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "realtime.json"))
    args = p.parse_args()
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    run("warm-up", "async", True, argparse.Namespace(**{**vars(args), "steps": 2}))  # compiles
    rows = []
    for r in ROWS:  # one line as each row finishes (a long run shows its progress)
        rows.append(run(*r, args))
        print(f"{r[0]}: {rows[-1]['traj_per_s']:.2f} traj/s", flush=True)
    lock, sync = rows[0]["traj_per_s"], rows[1]["traj_per_s"]
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    print(
        f"{'row':>21} | traj/s | vs lock-step | vs engine sync | tok/s | occupancy | pool util | "
        "sampler busy | learner busy | overlap | max gap | gap histogram"
    )
    for r in rows:
        r["speedup_vs_lock_step"], r["speedup_vs_engine_sync"] = (
            r["traj_per_s"] / lock,
            r["traj_per_s"] / sync,
        )
        print(
            f"{r['row']:>21} | {r['traj_per_s']:6.2f} | {r['speedup_vs_lock_step']:11.2f}x | "
            f"{r['speedup_vs_engine_sync']:13.2f}x | {f(r['tokens_per_s'], '5.0f')} | "
            f"{f(r['slot_occupancy'], '9.2f')} | {f(r['env_pool_utilisation'], '9.2f')} | "
            f"{r['sampler_busy_s']:12.1f} | {r['learner_busy_s']:12.1f} | {r['overlap_s']:7.1f} | "
            f"{r['max_version_gap']} (bound {args.gap}) | {r['version_gap_hist'][: args.gap + 2]}"
        )
    # The virtual clock's prediction: each engine row re-run on the simulated clock, with the unit
    # costs measured on engine sync (seconds per generated token per slot; learner seconds a step)
    # and the simulated tool latency at 1x (so compare with --latency-scale 1).
    e = rows[1]["engine_totals"]
    per_token = (e["generate_s"] + e["prefill_s"]) * (e["active_slot_chunks"] / e["chunks"]) / e["tokens"]
    unit = {"gen_seconds_per_token": per_token, "learner_step_time": rows[1]["learner_busy_s"] / args.steps}
    print(f"virtual clock unit costs (from engine sync): {unit}")
    for r in rows[1:]:
        p = run(r["row"], r["mode"], True, args, virtual=unit)
        r["predicted_traj_per_s"] = p["traj_per_s"]
        r["prediction_error"] = p["traj_per_s"] / r["traj_per_s"] - 1
        print(
            f"{r['row']:>21}: simulated {p['traj_per_s']:.2f} traj/s vs measured {r['traj_per_s']:.2f} "
            f"({r['prediction_error']:+.0%})"
        )
    targets = {
        "slot engine >= 2.0x lock-step trajectories/s (sync)": rows[1]["speedup_vs_lock_step"] >= 2.0,
        "async >= 1.5x engine sync trajectories/s": rows[2]["speedup_vs_engine_sync"] >= 1.5,
        "gap bound never exceeded": all(r["max_version_gap"] <= args.gap for r in rows),
        "simulation within 25% of measurement": all(abs(r["prediction_error"]) <= 0.25 for r in rows[1:]),
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
