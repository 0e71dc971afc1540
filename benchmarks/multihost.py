"""Several processes on this machine (the CPU devices split between them), the default task at
smoke size, side by side, one run each (issue #33):

* trained trajectories per wall second, async (windowed FIFO) vs sync, on the real clock, for 1
  (a plain run), 2 and 4 processes (target: async >= 1.5x sync, the single-host figure), every
  tool call waiting its simulated long-tailed latency x ``--latency-scale`` in real time (as
  ``benchmarks/realtime.py``: what async hides);
* bytes each step puts through the coordinator's key-value store: the virtual clock's exchange
  (every finished trajectory, to every process: "before") against the real clock's control plane
  (the rounds' metadata and the delivery order: "after");
* the held-out success of each run (the same figure as one process, within noise);
* weight sync across processes: every learner step all-gathers the FSDP-sharded parameters onto
  each process's sampler (``multihost.local_view``): bytes and seconds per sync in the runs, and
  ``benchmarks/multihost_sync.py``'s comparison with a raw all-gather of the same bytes.

Steady-state trajectories/s run from the end of the first learner step (each run compiles its
train step there) to the end of the last, on the rows' ``virtual_time`` (the real clock's
seconds). Every process gets one CPU device; all runs share the 2-core machine, so N processes
contend for it: the figures are this machine's, not a pod's. Writes
``benchmarks/results/multihost.json``.

    python benchmarks/multihost.py [--steps 8] [--processes 2 4] [--latency-scale 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 16  # configs/smoke.py's learner batch


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "XLA_FLAGS": ""}


def train(n: int, workdir: str, *flags: str) -> dict:
    """``launch.train`` of the smoke config on ``n`` processes (0: a plain run); the summary and
    the metrics rows."""
    base = [
        sys.executable, "-m", "launch.train", "--config=configs/smoke.py", f"--workdir={workdir}",
        "--config.report=False", "--config.placement.host_devices=1",
        f"--config.placement.learner_mesh.fsdp={max(n, 1)}", "--config.checkpoint_every=0", *flags,
    ]  # fmt: skip
    port = _port()
    dist = lambda i: [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={n}", f"--process_id={i}"]  # noqa: E731
    cmds = [base + dist(i) for i in range(n)] if n else [base]
    procs = [
        subprocess.Popen(c, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in cmds
    ]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        if p.returncode:
            raise RuntimeError(out[-4000:])
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl")) if x.strip()]
    return {"summary": json.load(open(os.path.join(workdir, "summary.json"))), "rows": rows}


def row(n: int, mode: str, clock: str, steps: int, latency: float) -> dict:
    with tempfile.TemporaryDirectory() as wd:
        engine = "8" if clock == "real" else "0"
        r = train(
            n,
            os.path.join(wd, "run"),
            f"--config.scheduler.clock={clock}",
            f"--config.scheduler.mode={mode}",
            f"--config.scheduler.engine_slots={engine}",
            f"--config.rl.steps={steps}",
            f"--config.rl.eval_every={steps}",
            f"--config.scheduler.env_latency_scale={latency if clock == 'real' else 0.0}",
        )
    s, steps_rows = r["summary"], [x for x in r["rows"] if "loss/total" in x]
    t1, tn = steps_rows[0]["virtual_time"], steps_rows[-1]["virtual_time"]
    kv = sum(s.get("processes", {}).get("kv_bytes_sent", [0]))
    ws = s["weight_sync"]
    return {
        "processes": n or 1,
        "distributed": bool(n),
        "mode": mode,
        "clock": clock,
        "traj_per_s": (len(steps_rows) - 1) * BATCH / (tn - t1) if clock == "real" else None,
        "kv_bytes_per_step": kv / len(steps_rows),
        "heldout_success": (s.get("final_eval") or {}).get("eval/success"),
        "rounds_assigned": s.get("realtime", {}).get("rounds_assigned"),
        "overlap_s": s.get("realtime", {}).get("overlap_s"),
        "gather_bytes_per_sync": ws["gather_bytes"] / max(ws["gathers"], 1),
        "gather_s_per_sync": ws["gather_seconds"] / max(ws["gathers"], 1),
    }


def sync_row(n: int, placement: str) -> dict:
    port = _port()
    cmd = lambda i: [sys.executable, "benchmarks/multihost_sync.py", "--coordinator", f"127.0.0.1:{port}",  # noqa: E731
                     "--processes", str(n), "--process_id", str(i), "--placement", placement]  # fmt: skip
    procs = [
        subprocess.Popen(
            cmd(i), cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        for i in range(n)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    return json.loads(next(ln for ln in outs[0].splitlines() if ln.startswith("{")))


def sync_rows(processes) -> list[dict]:
    """Weight sync across processes, colocated and disaggregated, against the raw transfer."""
    rows = [sync_row(n, p) for p in ("colocated", "disaggregated") for n in processes]
    print("\nweight sync across processes, per sync: ours (one all-gather per dtype, flat) | previous "
          "(one gather per leaf) | raw (one flat array, the same bytes and steps)")  # fmt: skip
    for r in rows:
        print(
            f"{r['processes']} processes {r['placement']:>13}: {r['bytes']} B in {r['leaves']} leaves | "
            f"{r['sync_s'] * 1e3:.2f} ms ({r['ratio']:.2f}x raw) | {r['per_leaf_s'] * 1e3:.2f} ms "
            f"({r['per_leaf_ratio']:.2f}x) | {r['raw_s'] * 1e3:.2f} ms"
        )
    return rows


def encoding(lengths=(64, 2048, 32768)) -> list[dict]:
    """Bytes one finished round puts into the store, by episode length: the whole round result
    (the virtual clock's exchange) against the metadata message the real clock sends; an episode
    of four turns with random tokens and log-probs (pickled as the store gets them)."""
    import pickle  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    sys.path.insert(0, ROOT)
    from agentjax.sampling.queue import RoundResult  # noqa: PLC0415
    from agentjax.sampling.spread import metadata  # noqa: PLC0415
    from agentjax.trajectory import StopReason, Trajectory, Turn  # noqa: PLC0415

    rng, out = np.random.default_rng(0), []
    for n in lengths:
        turns, ctx, per = [], rng.integers(0, 32000, 64).astype(np.int32), n // 4
        for _ in range(4):
            act = rng.integers(0, 32000, per // 2).astype(np.int32)
            lp = rng.normal(size=act.size).astype(np.float32)
            obs = rng.integers(0, 32000, per - act.size).astype(np.int32)
            turns.append(Turn(ctx, act, lp, lp, np.zeros(act.size, np.int32), obs))
            ctx = np.concatenate([ctx, act, obs])
        t = Trajectory(
            "task", "default", turns, StopReason.FINISHED, [0.0] * 4, 1.0, "pass", timings={"env": 1.0}
        )
        full = len(pickle.dumps((0, RoundResult(None, t, 1.0)), protocol=pickle.HIGHEST_PROTOCOL))
        meta = len(
            pickle.dumps((0, metadata(RoundResult(None, t, 1.0), 0)), protocol=pickle.HIGHEST_PROTOCOL)
        )
        out.append({"tokens": n, "trajectory_bytes": full, "metadata_bytes": meta, "ratio": full / meta})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--latency-scale", type=float, default=1.0)
    ap.add_argument(
        "--encoding-only", action="store_true", help="only the bytes-by-length table (updates the JSON)"
    )
    ap.add_argument("--sync-only", action="store_true", help="only the weight-sync rows (updates the JSON)")
    args = ap.parse_args()
    path = os.path.join(ROOT, "benchmarks", "results", "multihost.json")
    if args.sync_only:
        syncs = sync_rows(args.processes)
        with open(path) as f:
            old = json.load(f)
        with open(path, "w") as f:
            json.dump({**old, "weight_sync": syncs}, f, indent=1)
        return
    enc = encoding()
    print(
        "tokens per episode | bytes per round: trajectory (virtual clock) -> metadata (real clock) (x less)"
    )
    for e in enc:
        print(f"{e['tokens']:18d} | {e['trajectory_bytes']} -> {e['metadata_bytes']} ({e['ratio']:.0f}x)")
    if args.encoding_only:
        with open(path) as f:
            old = json.load(f)
        with open(path, "w") as f:
            json.dump({**old, "encoding": enc}, f, indent=1)
        return
    rows = []
    for n in [0, *args.processes]:
        for mode in ("sync", "windowed_fifo"):
            rows.append(row(n, mode, "real", args.steps, args.latency_scale))
            print(json.dumps(rows[-1]), flush=True)
        if n:
            rows.append(row(n, "windowed_fifo", "virtual", args.steps, 0.0))  # the exchange: "before"
            print(json.dumps(rows[-1]), flush=True)
    print(
        "\nprocesses | sync traj/s | async traj/s | async/sync | held-out (sync, async) "
        "| KV B/step before -> after (x less)"
    )
    for n in [1, *args.processes]:
        real = {r["mode"]: r for r in rows if r["processes"] == n and r["clock"] == "real"}
        virt = next((r for r in rows if r["processes"] == n and r["clock"] == "virtual"), None)
        a, s = real["windowed_fifo"], real["sync"]
        kv = "-" if virt is None else (
            f"{virt['kv_bytes_per_step']:.0f} -> {a['kv_bytes_per_step']:.0f} "
            f"({virt['kv_bytes_per_step'] / max(a['kv_bytes_per_step'], 1):.1f}x)"
        )  # fmt: skip
        ratio = a["traj_per_s"] / s["traj_per_s"]
        print(
            f"{n:9d} | {s['traj_per_s']:11.2f} | {a['traj_per_s']:12.2f} | {ratio:9.2f}x | "
            f"{s['heldout_success']:.3f}, {a['heldout_success']:.3f} | {kv}"
        )
    syncs = sync_rows(args.processes)
    out = {
        "machine": platform.machine(), "cpus": os.cpu_count(), "steps": args.steps,
        "latency_scale": args.latency_scale, "rows": rows, "weight_sync": syncs, "encoding": enc,
    }  # fmt: skip
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
