"""Records a run's learning curve in docs/learning.md (made from the run's own metrics.jsonl).

python -m launch.train --workdir=workdir/default
python benchmarks/learning_curve.py workdir/default
"""

from __future__ import annotations

import json
import os
import sys


def main(workdir: str, out: str = "docs/learning.md") -> None:
    rows = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl")) if ln.strip()]
    header = rows[0]["header"]
    evals = [r for r in rows if "eval/success" in r]
    train = {r["step"]: r for r in rows if "loss/total" in r}
    summary_path = os.path.join(workdir, "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
    final = evals[-1]["eval/success"] if evals else float("nan")
    start, demo = header["rl_start_success"], header["demonstrator_success"]
    lines = [
        "# Learning curve of the default run",
        "",
        f"Made by `python benchmarks/learning_curve.py {workdir}` from that run's `metrics.jsonl`.",
        f"Wall time inside `system.train` (summary.json): {summary.get('wall_seconds', float('nan')):.0f} s "
        f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores).",
        "",
        f"- scripted imperfect demonstrator, greedy held-out success: **{demo:.3f}**",
        f"- its own success on the warm-start demonstrations (train split): "
        f"{header.get('warm_start/demo_train_success', float('nan')):.3f}",
        f"- after the warm start (= RL start): **{start:.3f}**",
        f"- final held-out success: **{final:.3f}** "
        f"({final - start:+.3f} over the RL start, {final - demo:+.3f} over the demonstrator)",
        "",
        "| step | held-out success | 95% interval | batch reward (train, sampled) | version gap |",
        "|---|---|---|---|---|",
    ]
    for e in evals:
        t = train.get(e["step"], {})
        ci = f"{e['eval/success_lo']:.3f}-{e['eval/success_hi']:.3f}"
        reward, gap = t.get("batch/reward_mean", float("nan")), t.get("version_gap_mean", float("nan"))
        lines.append(f"| {e['step']} | {e['eval/success']:.3f} | {ci} | {reward:.3f} | {gap:.2f} |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:])
