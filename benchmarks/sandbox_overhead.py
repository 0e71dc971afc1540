"""Sandbox overhead per tool call: the full isolation stack vs a plain subprocess, side by side.

The full stack is ``sh`` (joins cgroup v1 memory/pids/cpuacct groups) -> ``prlimit`` -> ``setpriv``
(uid 65534) -> ``bwrap`` (namespaces, read-only binds) -> ``bash`` launch marker -> the command,
plus the outside-the-sandbox monitor thread and cgroup setup/teardown. The plain baseline is
``subprocess.run`` of the same command with no isolation at all. Each row is the median (and p90) of
``--reps`` runs of the same tool call; the ratio is sandbox / plain. A codefix verification (one
pytest session in a fresh sandbox) is timed too, since that is what each episode ends with.

Writes ``benchmarks/results/sandbox_overhead.json``.

    python benchmarks/sandbox_overhead.py [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import time

from agentjax.envs import codefix, faults, sandbox
from agentjax.envs.codefix.workspace import make_workspace

PY = "/usr/bin/python3"


def _calls(ws: str, pkg: str) -> dict[str, list[str]]:
    return {
        "true (exec only)": ["/usr/bin/true"],
        "cat a file (read tool)": ["/usr/bin/cat", f"{ws}/{pkg}/core.py"],
        "sh write a file (write tool)": ["/bin/sh", "-c", f"echo x > {ws}/tmp_out.txt"],
        "python3 -c pass": [PY, "-c", "pass"],
        "pytest visible tests (test tool)": [
            PY,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{ws}/tests",
        ],
    }


def _time(fn, reps: int) -> tuple[float, float]:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return statistics.median(ts), ts[min(len(ts) - 1, int(0.9 * len(ts)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--task", default="clamp")
    ap.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results", "sandbox_overhead.json")
    )
    args = ap.parse_args()
    iso = sandbox.probe()
    if not iso.ok:
        raise SystemExit(f"sandbox unavailable: {iso.reason}")
    task = codefix.load_task(args.task)
    ws = make_workspace(task)
    rows = []
    try:
        mounts = [sandbox.Mount(ws, "/work", writable=True)]
        host_env = {"PYTHONPATH": ws, "PYTHONDONTWRITEBYTECODE": "1"}  # as inside the sandbox
        for name, argv in _calls("/work", task.package).items():
            host_argv = [a.replace("/work", ws) for a in argv]
            plain = _time(
                lambda a=host_argv: subprocess.run(a, cwd=ws, capture_output=True, env=host_env), args.reps
            )
            boxed = _time(
                lambda a=argv: sandbox.run(a, mounts=mounts, chdir="/work", env={"PYTHONPATH": "/work"}),
                args.reps,
            )
            rows.append(
                {
                    "call": name,
                    "plain_median_ms": plain[0] * 1e3,
                    "plain_p90_ms": plain[1] * 1e3,
                    "sandbox_median_ms": boxed[0] * 1e3,
                    "sandbox_p90_ms": boxed[1] * 1e3,
                    "overhead_ms": (boxed[0] - plain[0]) * 1e3,
                    "ratio": boxed[0] / plain[0],
                }
            )
        os.remove(f"{ws}/tmp_out.txt")
        for rel, text in task.reference.items():
            with open(os.path.join(ws, rel), "w") as f:
                f.write(text)
        verdicts = []
        verify = _time(lambda: verdicts.append(codefix.verify(task, ws)), max(3, args.reps // 5))
        assert all(v.label.value == "pass" for v in verdicts), verdicts[0].evidence["attribution"]
    finally:
        shutil.rmtree(os.path.dirname(ws), ignore_errors=True)
    w = max(len(r["call"]) for r in rows)
    print(f"{'tool call':<{w}}  {'plain ms':>9}  {'sandbox ms':>10}  {'overhead ms':>11}  {'ratio':>6}")
    for r in rows:
        print(
            f"{r['call']:<{w}}  {r['plain_median_ms']:9.1f}  {r['sandbox_median_ms']:10.1f}  "
            f"{r['overhead_ms']:11.1f}  {r['ratio']:6.2f}"
        )
    print(
        f"codefix verify (fresh sandbox + pytest, task {args.task}): median {verify[0] * 1e3:.0f} ms,"
        f" p90 {verify[1] * 1e3:.0f} ms"
    )
    result = {
        "reps": args.reps,
        "rows": rows,
        "verify_median_ms": verify[0] * 1e3,
        "verify_p90_ms": verify[1] * 1e3,
        "cgroups": list(iso.cgroups),
        "tools": dict(faults.tool_versions()),
        "cpus": os.cpu_count(),
        "loadavg_1m_at_end": os.getloadavg()[0],
        "machine": platform.machine(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
