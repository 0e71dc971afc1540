"""Several processes on this machine (the CPU devices split between them), the default task at
smoke size, side by side, one run each (issue #33):

* trained trajectories per wall second, async (windowed FIFO) vs sync, on the real clock, for 1
  (a plain run), 2 and 4 processes (target: async >= 1.5x sync, the single-host figure);
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

    python benchmarks/multihost.py [--steps 8] [--processes 2 4]
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
    procs = [subprocess.Popen(c, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in cmds]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        if p.returncode:
            raise RuntimeError(out[-4000:])
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl")) if x.strip()]
    return {"summary": json.load(open(os.path.join(workdir, "summary.json"))), "rows": rows}


def row(n: int, mode: str, clock: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as wd:
        engine = "8" if clock == "real" else "0"
        r = train(
            n, os.path.join(wd, "run"), f"--config.scheduler.clock={clock}", f"--config.scheduler.mode={mode}",
            f"--config.scheduler.engine_slots={engine}", f"--config.rl.steps={steps}", f"--config.rl.eval_every={steps}",
        )  # fmt: skip
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


def sync_row(n: int) -> dict:
    port = _port()
    cmd = lambda i: [sys.executable, "benchmarks/multihost_sync.py", "--coordinator", f"127.0.0.1:{port}",  # noqa: E731
                     "--processes", str(n), "--process_id", str(i)]  # fmt: skip
    procs = [subprocess.Popen(cmd(i), cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(n)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    return json.loads(next(ln for ln in outs[0].splitlines() if ln.startswith("{")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    args = ap.parse_args()
    rows = []
    for n in [0, *args.processes]:
        for mode in ("sync", "windowed_fifo"):
            rows.append(row(n, mode, "real", args.steps))
            print(json.dumps(rows[-1]), flush=True)
        if n:
            rows.append(row(n, "windowed_fifo", "virtual", args.steps))  # the exchange: "before"
            print(json.dumps(rows[-1]), flush=True)
    syncs = [sync_row(n) for n in args.processes]
    print("\nprocesses | sync traj/s | async traj/s | async/sync | held-out (sync, async) | KV B/step before -> after (x less)")
    for n in [1, *args.processes]:
        real = {r["mode"]: r for r in rows if r["processes"] == n and r["clock"] == "real"}
        virt = next((r for r in rows if r["processes"] == n and r["clock"] == "virtual"), None)
        a, s = real["windowed_fifo"], real["sync"]
        kv = "-" if virt is None else (
            f"{virt['kv_bytes_per_step']:.0f} -> {a['kv_bytes_per_step']:.0f} "
            f"({virt['kv_bytes_per_step'] / max(a['kv_bytes_per_step'], 1):.1f}x)"
        )  # fmt: skip
        print(
            f"{n:9d} | {s['traj_per_s']:11.2f} | {a['traj_per_s']:12.2f} | {a['traj_per_s'] / s['traj_per_s']:9.2f}x | "
            f"{s['heldout_success']:.3f}, {a['heldout_success']:.3f} | {kv}"
        )
    print("\nweight sync across processes (all-gather onto each sampler): ours vs a raw all-gather of the same bytes")
    for r in syncs:
        print(f"{r['processes']} processes: {r['bytes']} B, {r['sync_s'] * 1e3:.2f} ms vs raw {r['raw_s'] * 1e3:.2f} ms ({r['ratio']:.2f}x)")
    out = {"machine": platform.machine(), "cpus": os.cpu_count(), "steps": args.steps, "rows": rows, "weight_sync": syncs}
    path = os.path.join(ROOT, "benchmarks", "results", "multihost.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
