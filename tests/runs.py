"""Shared helpers for tests that run an entry point (``python -m launch.*``) in a subprocess or read
a run's workdir. In-process, the launchers' absl flags would clash with each other."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# compile options of every test process (see tests/conftest.py): LLVM at -O0, compile-bound suite
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"


def cli_env(host_devices: int | None = None, **extra: str) -> dict[str, str]:
    """The environment a launcher runs with in tests: CPU, unbuffered output, the suite's shared
    compilation cache and compile options, and one CPU device unless ``host_devices`` asks for
    more (the suite's own 8 fake devices are not inherited).

    Every program goes to the cache, however fast it compiled: a launcher's programs at -O0
    compile in 0.01-0.5 s each, under JAX's 1 s default, and a later launcher loading them
    instead spends about a third less CPU (smoke run: 17 -> 12 s; 4 processes: 120 -> 72 s)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
        "JAX_COMPILATION_CACHE_DIR": os.path.join(ROOT, ".jax_cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        **extra,
    }
    env["XLA_FLAGS"] = TEST_XLA_FLAGS  # the suite's own 8 fake devices are not inherited
    if host_devices:
        env["XLA_FLAGS"] += f" --xla_force_host_platform_device_count={host_devices}"
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


def train_dataset_task(workdir, verifier: str, *flags: str) -> None:
    """``launch.train`` on ``configs/smoke.py`` with the dataset task judged by ``verifier``, no
    checkpoints and no report; ``flags`` name the records and size the run. Asserts it exits 0."""
    out = run_module(
        "launch.train",
        "--config=configs/smoke.py",
        "--config.task.name=dataset",
        f"--config.task.kwargs.verifier={verifier}",
        "--config.checkpoint_every=0",
        "--config.report=False",
        *flags,
        f"--workdir={workdir}",
    )
    assert out.returncode == 0, tail(out)


def tail(out) -> str:
    """The end of a finished process's stdout and stderr, for assertion messages."""
    return out.stdout[-3000:] + out.stderr[-3000:]


def read_metrics(workdir, *, drop_wall: bool = False) -> list[dict]:
    """The rows of ``<workdir>/metrics.jsonl`` (with ``drop_wall``, the fields measured on the
    wall clock removed: ``tbevents.WALL_CLOCK``, ``wall`` and the generated tokens/s)."""
    rows = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl")) if ln.strip()]
    if drop_wall:
        for r in rows:
            for k in WALL_CLOCK:
                r.pop(k, None)
    return rows


# tbevents.WALL_CLOCK, spelled out: this module imports no jax (conftest imports it first)
WALL_CLOCK = ("wall", "throughput/trained_tokens_per_s", "throughput/generated_tokens_per_s")


def tiny_config(name="default", steps=2, **overrides):
    """``configs/<name>.py`` at smoke size (runs share compiled steps through the cache);
    ``overrides`` as ``section__field=value``."""
    import importlib

    c = importlib.import_module(f"configs.{name}").get_config()
    c.model.update(
        d_model=32,
        n_layers=1,
        n_heads=2,
        n_kv_heads=1,
        head_dim=16,
        d_ff=32 if c.model.get("n_experts", 0) else 64,
    )
    c.task.eval_tasks = 8
    c.warm_start.update(episodes=64, steps=2, batch_size=16)
    c.rl.update(steps=steps, group_size=4, batch_size=16, eval_every=steps)
    # a 2-step warm start passes nothing: every group is uniform, and dropping them would only
    # sample drop_budget x more (dynamic sampling has its own tests; configs/smoke.py keeps it)
    # and the virtual clock on lock-step Rollout: deterministic (the real-time default and the
    # slot engine are asked for by the tests that check them)
    c.scheduler.update(num_slots=32, window=16, uniform_groups="keep", clock="virtual", engine_slots=0)
    c.checkpoint_every, c.log_every, c.report = 0, 1, False
    for path, v in overrides.items():
        *sections, field = path.split("__")
        d = c
        for sec in sections:
            if sec not in d:  # a sub-section the config file does not write (loss.gspo)
                d[sec] = {}
            d = d[sec]
        d[field] = v
    return c


def run_cases_in_own_process(path: str, timeout: float = 3600, allow_skips: bool = False) -> str:
    """Runs the pytest file ``path`` in a child pytest; fails with its failures' output.

    For cases that must not share the suite's process: the TPU compiler (libtpu and jaxlib's CPU
    compiler in one process aborted it), and the biggest programs (after 90% of the suite, the
    codefix HF run's compile aborted the process in an allocation)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", path]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{out[-12000:]}"
    assert " passed" in out or allow_skips, out[-4000:]
    assert allow_skips or " skipped" not in out, out[-4000:]
    return out


def train_until_killed(args, ckdir: str, min_step: int, *, env=None, jitter: float = 0.0):
    """Starts ``python -m launch.train args`` and SIGKILLs it once ``ckdir`` holds a checkpoint at
    step >= ``min_step`` (after up to ``jitter`` more seconds: an arbitrary point of a later
    step); returns the newest checkpoint step left behind."""
    import random
    import signal
    import time

    from agentjax.learner import checkpoint as ckpt

    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.train", *args],
        cwd=ROOT,
        env=cli_env() if env is None else env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        if os.path.isdir(ckdir) and (ckpt.latest_step(ckdir) or 0) >= min_step:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run finished before it could be killed"
    time.sleep(random.Random(os.getpid()).uniform(0.0, jitter))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return ckpt.latest_step(ckdir)
