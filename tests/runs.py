"""Shared helpers for tests that run an entry point (``python -m launch.*``) in a subprocess or read
a run's workdir. In-process, the launchers' absl flags would clash with each other."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli_env(host_devices: int | None = None, **extra: str) -> dict[str, str]:
    """The environment a launcher runs with in tests: CPU, unbuffered output, the suite's shared
    compilation cache, and one CPU device unless ``host_devices`` asks for more (the suite's own
    8 fake devices are not inherited)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
        "JAX_COMPILATION_CACHE_DIR": os.path.join(ROOT, ".jax_cache"),
        **extra,
    }
    env.pop("XLA_FLAGS", None)
    if host_devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={host_devices}"
    return env


def run_module(module: str, *args: str, env: dict | None = None, timeout: float = 900):
    """``python -m module args...`` from the repository root; the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=cli_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tail(out) -> str:
    """The end of a finished process's stdout and stderr, for assertion messages."""
    return out.stdout[-3000:] + out.stderr[-3000:]


def read_metrics(workdir, *, drop_wall: bool = False) -> list[dict]:
    """The rows of ``<workdir>/metrics.jsonl`` (``wall`` removed with ``drop_wall``)."""
    rows = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl")) if ln.strip()]
    if drop_wall:
        for r in rows:
            r.pop("wall", None)
    return rows
