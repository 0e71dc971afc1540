"""Where the time of a short codefix learning run goes (configs/codefix_learn.py, #30 item 2).

    python -m benchmarks.codefix_time --steps=2 --eval_tasks=16 --demo_tasks=16 --warm_steps=30

Builds the tiny Qwen3 + BPE (``launch.make_tiny_hf``) into ``workdir/tiny_qwen3`` if absent, runs
``configs/codefix_learn.py`` with the given sizes through ``agentjax.run.loop.train`` and times,
by wrapping the functions that do the work (every call, whichever thread makes it):

* each sandboxed tool call, per tool (``CodefixEnv._tool``: the whole setpriv + bwrap launch),
  the workspace's reset (``make_workspace``: tmpfs mount, copy, git commit) and removal, the quota
  check after each call, and each verification (``api.verify``: scans + sandboxed hidden tests);
* the phases: generated-task validation, the demonstrator's episodes, the warm start's SFT,
  held-out evaluations, the RL loop;
* from the run's summary: generation (the slot engine's generate and prefill seconds and
  tokens) and the learner's measured step seconds.

Prints a table and writes ``benchmarks/results/codefix_time.json``. Environment calls run on the
env pool's threads concurrently with generation, so the per-call figures are wall seconds of
each call under that load (the sum of a column can exceed the run's wall).
"""

from __future__ import annotations

import collections
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time

from absl import app, flags

flags.DEFINE_integer("steps", 2, "RL steps")
flags.DEFINE_integer("eval_tasks", 16, "held-out tasks evaluated (the config's 128 costs 8x)")
flags.DEFINE_integer("demo_tasks", 16, "tasks the demonstrator plays per split")
flags.DEFINE_integer("warm_steps", 30, "warm-start SFT steps")
flags.DEFINE_integer("seed", 0, "run seed")
flags.DEFINE_string("hf", "workdir/tiny_qwen3", "the tiny HF directory (built if absent)")
flags.DEFINE_string("out", "benchmarks/results/codefix_time.json", "JSON results")

_lock = threading.Lock()
_calls: dict[str, list[float]] = collections.defaultdict(list)


def _timed(owner, name: str, key):
    """Wraps ``owner.name`` so each call's wall seconds land under ``key(*args)``."""
    fn = getattr(owner, name)

    def wrapper(*args, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            dt = time.perf_counter() - t0
            with _lock:
                _calls[key(*args, **kw)].append(dt)

    setattr(owner, name, wrapper)


def _row(name: str, xs: list[float]) -> dict:
    xs = sorted(xs)
    n = len(xs)
    return {
        "what": name,
        "calls": n,
        "total_s": sum(xs),
        "mean_ms": 1e3 * sum(xs) / max(n, 1),
        "median_ms": 1e3 * xs[n // 2] if n else 0.0,
        "p90_ms": 1e3 * xs[min(int(0.9 * n), n - 1)] if n else 0.0,
    }


def main(argv):
    del argv
    f = flags.FLAGS
    if not os.path.isdir(f.hf):
        from launch import make_tiny_hf  # noqa: PLC0415

        make_tiny_hf.make(f.hf)
    os.environ.setdefault("AGENTJAX_CACHE", os.path.join(tempfile.gettempdir(), "agentjax-codefix-time"))
    from agentjax.envs.codefix import api  # noqa: PLC0415
    from agentjax.envs.codefix import env as cfenv  # noqa: PLC0415
    from agentjax.envs.codefix.generated import store  # noqa: PLC0415
    from agentjax.run import loop  # noqa: PLC0415
    from agentjax.tasks import codefix as cftask  # noqa: PLC0415
    from configs import codefix_learn  # noqa: PLC0415

    _timed(cfenv.CodefixEnv, "_tool", lambda self, name, *a, **k: f"tool call: {name}")
    _timed(cfenv, "make_workspace", lambda *a, **k: "workspace: make (reset)")
    _timed(cfenv, "remove_workspace", lambda *a, **k: "workspace: remove (close)")
    _timed(cfenv, "quota_usage", lambda *a, **k: "workspace: quota check")
    _timed(api, "verify", lambda *a, **k: "verification (scans + hidden tests)")
    _timed(store, "tasks", lambda n, split, *a, **k: f"phase: generate + validate {split} tasks")
    _timed(cftask.CodefixSuite, "_play", lambda self, split: f"phase: demonstrator episodes ({split})")
    _timed(loop, "sft_train", lambda *a, **k: "phase: warm-start SFT")
    _timed(loop, "evaluate_heldout", lambda *a, **k: "phase: held-out evaluation")

    c = codefix_learn.get_config()
    c.model.hf_path = f.hf
    c.seed = f.seed
    c.task.eval_tasks = f.eval_tasks
    c.task.kwargs = dict(c.task.kwargs, demo_tasks=f.demo_tasks)
    c.warm_start.update(steps=f.warm_steps, episodes=max(4 * f.demo_tasks, 16))
    c.rl.update(steps=f.steps, eval_every=f.steps)
    c.checkpoint_every = 0
    c.report = False
    wd = tempfile.mkdtemp(prefix="codefix_time_")
    t0 = time.perf_counter()
    # a timeout's SIGTERM still prints and writes what was measured so far (partial: true)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM"))
    summary, partial = {}, True
    try:
        summary = loop.train(
            c, wd, log=lambda s: print(f"[{time.perf_counter() - t0:6.0f}s] {s}", flush=True)
        )
        partial = False
    finally:
        _report(f, summary, time.perf_counter() - t0, wd, partial)


def _report(f, summary: dict, wall: float, wd: str, partial: bool) -> None:
    eng = summary.get("engine", {})
    ledger = summary.get("cost_ledger", {})
    rows = [_row(k, v) for k, v in sorted(_calls.items())]
    derived = {
        "generation: slot engine generate calls": {
            "total_s": eng.get("generate_s", 0.0),
            "calls": eng.get("generate_calls", 0),
            "tokens": eng.get("tokens", 0),
            "tokens_per_generate_s": eng.get("tokens", 0.0) / max(eng.get("generate_s", 0.0), 1e-9),
        },
        "generation: slot engine prefill": {"total_s": eng.get("prefill_s", 0.0)},
        "generation: engine blocked on envs": {"total_s": eng.get("env_block_s", 0.0)},
        "learner: RL steps (measured)": {"total_s": ledger.get("device_seconds", {}).get("training", 0.0)},
    }
    print(f"\nrun wall {wall:.1f} s (workdir {wd})")
    print(f"{'what':<48} {'calls':>6} {'total s':>9} {'mean ms':>9} {'median ms':>10} {'p90 ms':>9}")
    for r in rows:
        print(
            f"{r['what']:<48} {r['calls']:>6} {r['total_s']:>9.1f} {r['mean_ms']:>9.1f} "
            f"{r['median_ms']:>10.1f} {r['p90_ms']:>9.1f}"
        )
    for k, v in derived.items():
        rest = json.dumps({a: b for a, b in v.items() if a not in ("total_s", "calls")})
        print(f"{k:<48} {v.get('calls', ''):>6} {v['total_s']:>9.1f}  {rest}")
    out = {
        "config": "configs/codefix_learn.py",
        "sizes": {k: getattr(f, k) for k in ("steps", "eval_tasks", "demo_tasks", "warm_steps", "seed")},
        "run_wall_s": wall,
        "partial": partial,
        "rows": rows,
        "derived": derived,
        "engine": eng,
        "cost_ledger": ledger,
        "final_eval": summary.get("final_eval"),
        "header": {k: v for k, v in summary.get("header", {}).items() if k != "versions"},
        "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "python": platform.python_version()},
    }
    os.makedirs(os.path.dirname(f.out), exist_ok=True)
    with open(f.out, "w") as fh:
        json.dump(out, fh, indent=1, default=str)
    print(f"wrote {f.out}")


if __name__ == "__main__":
    sys.exit(app.run(main))
