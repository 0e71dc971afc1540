"""One front door to the benchmark scripts in ``benchmarks/``.

    python -m launch.bench --list
    python -m launch.bench --bench=scheduling -- --steps 20 --out /tmp/bench
    python -m launch.bench --bench=weight_sync --args="--reps 10 --warmup 2"
    python -m launch.bench --bench=grpo_step --python=.venv-anchors/bin/python   # needs the anchors

Every ``benchmarks/<name>.py`` (a plain ``argparse`` script with a ``main()``, documented in its
module docstring) is a benchmark named ``<name>``; ``--list`` prints each with the first line of its
docstring, read without importing it. ``--bench=<name>`` runs the script in a **subprocess**
(``<python> benchmarks/<name>.py <args>``, working directory the repository root, the repository
on ``PYTHONPATH``), because the scripts set process-wide state before JAX starts (e.g.
``weight_sync`` asks XLA for 8 host devices) and some run in another interpreter (``sampler`` and
``grpo_step`` compare against google-tunix and transformers, installed in the anchors venv by
``benchmarks/setup_anchors.sh``: pass ``--python``). The script's arguments follow ``--`` or come
in one ``--args`` string (shell-split); both may be given (``--args`` first). Each script's own
``--help`` lists them, e.g. ``python -m launch.bench --bench=scheduling -- --help``. Most scripts
write their results under ``benchmarks/results/`` unless given ``--out``. The exit code is the
script's.
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(ROOT, "benchmarks")

_LIST = flags.DEFINE_bool("list", False, "List the benchmarks with one-line descriptions.")
_BENCH = flags.DEFINE_string("bench", None, "The benchmark to run (see --list).")
_ARGS = flags.DEFINE_string("args", "", "Arguments for the benchmark, as one shell-quoted string.")
_PYTHON = flags.DEFINE_string("python", sys.executable, "Interpreter that runs the benchmark.")


def benchmarks() -> dict[str, str]:
    """``{name: first line of its docstring}`` for every ``benchmarks/<name>.py``, sorted."""
    out = {}
    for fn in sorted(os.listdir(BENCH_DIR)):
        if fn.endswith(".py") and not fn.startswith("_"):
            with open(os.path.join(BENCH_DIR, fn)) as f:
                doc = ast.get_docstring(ast.parse(f.read())) or ""
            out[fn[:-3]] = doc.strip().splitlines()[0] if doc.strip() else ""
    return out


def command(name: str, args: list[str], python: str = sys.executable) -> list[str]:
    """The command line that runs benchmark ``name`` with ``args`` (raises ValueError if unknown)."""
    known = benchmarks()
    if name not in known:
        raise ValueError(f"--bench={name!r} is invalid; allowed values: {list(known)}")
    return [python, os.path.join(BENCH_DIR, f"{name}.py"), *args]


def run(name: str, args: list[str], python: str = sys.executable) -> int:
    cmd = command(name, args, python)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    print("+ " + shlex.join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def main(argv):
    if _LIST.value:
        known = benchmarks()
        width = max(map(len, known))
        for name, line in known.items():
            print(f"{name:<{width}}  {line}")
        return 0
    if not _BENCH.value:
        raise app.UsageError("pass --bench=<name> (or --list)")
    try:
        return run(_BENCH.value, [*shlex.split(_ARGS.value), *argv[1:]], _PYTHON.value)
    except ValueError as e:
        print(f"invalid flag: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    app.run(main)
