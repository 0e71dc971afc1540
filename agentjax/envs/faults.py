"""Fault taxonomy, evidence-based attribution, fault injection, retries and env fingerprints.

PROBLEMS.md s8: correct code judged wrong because the host killed it teaches the policy the opposite
of the truth, and a host-caused timeout and an agent's infinite loop must not share a mask. So every
resource or infrastructure label here is decided from evidence gathered OUTSIDE the sandbox
(:class:`agentjax.envs.sandbox.SandboxResult`), in a fixed order:

``infra_fault`` needs POSITIVE evidence that the agent's code cannot produce:

1. the sandbox never started (our launch marker, written before any agent code, is missing):
   ``host_starvation`` when it timed out with the in-run signs of 4. (no canary: no agent code
   ran that could fake them), else ``sandbox_start``;
   the kernel OOM killer took a task of our memory cgroup although the cgroup never reached its
   limit (``failcnt`` 0: the host ran out of memory, not the agent);
2. the agent's own resource use: the pids cgroup refused a fork (fork bomb -> ``agent_error``), our
   memory cgroup OOM-killed at its limit or the address-space limit raised ``MemoryError``
   (``agent_oom``); this cgroup evidence is read BEFORE a kill is blamed on the host, because the
   cgroup OOM killer may pick the outer process;
3. the outer process (outside the pid namespace, unreachable from inside) was killed by a signal
   we did not send (``host_kill``); ``SIGXCPU`` from ``RLIMIT_CPU`` (``agent_cpu``);
4. the wall timeout: ``infra_fault`` (host starvation) only when, DURING the run, the tree's tasks
   were runnable-but-off-CPU for at least half the wall time (sampled from ``/proc/<tid>/stat``
   and ``schedstat``, see :class:`agentjax.envs.accounting.Monitor`) AND the host
   CPU pressure (PSI "some") grew by at least a quarter of the wall time AND the tree had not used
   its CPU budget AND -- the part a swarm of the agent's own processes cannot fake -- a fresh canary
   process started with the same priority and CPU placement after the tree was killed got less
   than 10% of a CPU (:func:`agentjax.envs.accounting.cpu_canary`); otherwise ``agent_timeout``.
   A sleeper has no run-queue wait, so a busy neighbour cannot excuse it.

Static hack flags outrank all of these (a hack that also burns CPU is still a hack); the verifier
applies them first. Retries assume independence (``q^k``); a correlated root cause does not shrink
with retries, so :func:`retry_update` stops retrying a root-cause fingerprint after a few attempts.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from agentjax.envs import accounting
from agentjax.envs.protocol import Label, Verdict
from agentjax.envs.sandbox import Limits, SandboxResult

# Injectable infrastructure fault classes (each must come out labelled ``infra_fault``).
FAULT_CLASSES = ("sandbox_start", "verifier_crash", "host_kill", "host_starvation", "flaky_test")
STARVED_WAIT_FRACTION = accounting.STARVED_WAIT_FRACTION
STARVED_PSI_FRACTION = accounting.STARVED_PSI_FRACTION


def attribute(
    run: SandboxResult, limits: Limits, *, memory_error_seen: bool = False
) -> tuple[Label | None, str]:
    """Resource/infra label of one sandboxed run, or (None, "") when the run ended normally.

    ``infra_fault`` only on positive evidence the agent's code cannot produce (see the module
    docstring); the agent's own cgroup evidence is read before any kill is blamed on the host.
    """
    if not run.started:  # the launch marker is written before any agent code runs
        # no agent code ran, so no swarm of its processes can fake the in-run signs: the canary
        # (which a loaded host may not starve after the kill) is not needed to name the cause
        signs = (run.starved_s, run.runq_wait_s, run.psi_cpu_some_s, run.wall_s)
        if run.timed_out and accounting.starvation_suspected(*signs):
            return Label.INFRA_FAULT, "host_starvation: starved before the command could start"
        return Label.INFRA_FAULT, "sandbox_start: bwrap never launched the command"
    oom, failcnt = run.cgroup.get("mem_oom_kill", 0), run.cgroup.get("mem_failcnt", 1)
    if oom > 0 and failcnt == 0:
        return Label.INFRA_FAULT, "host_oom: kernel OOM kill in our cgroup while under its limit"
    if run.cgroup.get("pids_max_events", 0) > 0:
        return Label.AGENT_ERROR, "fork bomb: pids cgroup refused forks"
    if oom > 0 or memory_error_seen:
        return Label.AGENT_OOM, "memory limit hit (cgroup OOM kill or RLIMIT_AS MemoryError)"
    if run.returncode < 0 and not run.killed_by_us:
        return Label.INFRA_FAULT, f"host_kill: outer process killed by signal {-run.returncode}"
    in_sig = run.signal
    hard_cpu_kill = in_sig == signal.SIGKILL and not run.killed_by_us and run.cpu_s >= limits.cpu_s
    if in_sig == signal.SIGXCPU or hard_cpu_kill:
        return Label.AGENT_CPU, f"RLIMIT_CPU exceeded ({run.cpu_s:.2f}s CPU)"
    if run.timed_out:
        if starved(run, limits):
            return Label.INFRA_FAULT, "host_starvation: runnable but denied CPU during the run"
        return Label.AGENT_TIMEOUT, f"wall timeout ({run.wall_s:.1f}s) with CPU available"
    return None, ""


def starved(run: SandboxResult, limits: Limits) -> bool:
    """Host starvation: in-run signs AND a starved canary after the kill (see module docstring)."""
    canary_starved = 0.0 <= run.host_canary_cpu_s < accounting.CANARY_MIN_SHARE * accounting.CANARY_WINDOW_S
    return (
        canary_starved
        and run.cpu_s < limits.cpu_s
        and accounting.starvation_suspected(run.starved_s, run.runq_wait_s, run.psi_cpu_some_s, run.wall_s)
    )


# ---------------------------------------------------------------------------------------------
# Fault injection: per-class rates (e.g. from a noise curriculum), one draw per episode.


def draw_fault(rates: Mapping[str, float], rng: random.Random) -> str | None:
    """Draws at most one fault class; ``rates[c]`` is the probability of class ``c``.

    Rates must be non-negative with sum <= 1; unknown classes are an error (a typo would silently
    inject nothing).
    """
    unknown = set(rates) - set(FAULT_CLASSES)
    if unknown:
        raise ValueError(f"unknown fault classes {sorted(unknown)}; known: {FAULT_CLASSES}")
    if any(r < 0 for r in rates.values()) or sum(rates.values()) > 1 + 1e-9:
        raise ValueError(f"rates must be >= 0 and sum to <= 1, got {dict(rates)}")
    u, acc = rng.random(), 0.0
    for c in FAULT_CLASSES:
        acc += rates.get(c, 0.0)
        if u < acc:
            return c
    return None


def injection_hooks(kind: str | None, *, kill_after_s: float = 0.15, hogs: int = 3) -> dict[str, Any]:
    """Keyword arguments for :func:`agentjax.envs.sandbox.run` that REALLY cause a fault.

    * ``sandbox_start``: bwrap is given a bind source that does not exist, so it fails to start.
    * ``host_kill``: a timer SIGKILLs the outer sandbox process from outside (as the host OOM
      killer or an operator would).
    * ``host_starvation``: the tree is pinned to one CPU at nice 19 while ``hogs`` busy processes at
      nice -20 are pinned to the same CPU for the whole run.
    * ``verifier_crash`` and ``flaky_test`` are raised by the verifier itself (no sandbox hook).
    """
    if kind in (None, "verifier_crash", "flaky_test"):
        return {}
    if kind == "sandbox_start":
        return {"bwrap_extra": ["--ro-bind", "/nonexistent/agentjax-injected-fault", "/x"]}
    if kind == "host_kill":

        def kill_later(proc: subprocess.Popen) -> Callable[[], None]:
            t = threading.Timer(kill_after_s, lambda: _signal(proc.pid, signal.SIGKILL))
            t.start()
            return t.cancel

        return {"on_start": kill_later}
    if kind == "host_starvation":
        cpu = str(min(os.sched_getaffinity(0)))

        def start_hogs(proc: subprocess.Popen) -> Callable[[], None]:
            # With sched autogroup, nice only ranks tasks inside one session: set the session
            # (autogroup) nice too, low for the sandbox's session, high for each hog's.
            _autogroup_nice(proc.pid, 19)
            hog = [sys.executable, "-c", "while True: pass"]
            ps = [
                subprocess.Popen(["nice", "-n", "-20", "taskset", "-c", cpu, *hog], start_new_session=True)
                for _ in range(hogs)
            ]
            for p in ps:
                _autogroup_nice(p.pid, -20)

            def stop() -> None:
                for p in ps:
                    p.kill()
                    p.wait()

            return stop

        return {"on_start": start_hogs, "launch_prefix": ["nice", "-n", "19", "taskset", "-c", cpu]}
    raise ValueError(f"unknown fault class {kind!r}")


def _autogroup_nice(pid: int, nice: int) -> None:
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Correlated-failure-aware retries as an optax-style (init, update) pair.


class RetryState(NamedTuple):
    attempts: int
    root_causes: tuple[str, ...]  # fingerprint of each infra failure so far


def root_cause(verdict: Verdict) -> str:
    """Fingerprint of a failure's root cause: label, fault kind and environment."""
    kind = str(verdict.evidence.get("attribution", "")).split(":")[0]
    key = f"{verdict.label.value}|{kind}|{verdict.env_fingerprint}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def retry_init() -> RetryState:
    return RetryState(0, ())


def retry_update(
    state: RetryState, verdict: Verdict, *, max_attempts: int = 4, max_same_cause: int = 2
) -> tuple[RetryState, bool]:
    """Records one verdict; returns (new state, retry?).

    Only ``infra_fault`` is retried. A root cause already seen ``max_same_cause`` times is not
    retried again: failures sharing a cause are correlated, so another try is unlikely to succeed
    and would only waste compute (and hide a broken environment).
    """
    if verdict.label is not Label.INFRA_FAULT:
        return RetryState(state.attempts + 1, state.root_causes), False
    rc = root_cause(verdict)
    causes = (*state.root_causes, rc)
    new = RetryState(state.attempts + 1, causes)
    return new, new.attempts < max_attempts and causes.count(rc) < max_same_cause


# ---------------------------------------------------------------------------------------------
# Environment fingerprints.


@functools.lru_cache(maxsize=8)
def tool_versions(python: str = "/usr/bin/python3") -> tuple[tuple[str, str], ...]:
    """Versions of everything the verdict depends on besides the task files."""

    def out(argv: list[str]) -> str:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            return (r.stdout or r.stderr).strip().splitlines()[0] if r.returncode == 0 else "absent"
        except (OSError, subprocess.SubprocessError, IndexError):
            return "absent"

    return (
        ("python", out([python, "-c", "import sys; print(sys.version.split()[0])"])),
        ("pytest", out([python, "-c", "import pytest; print(pytest.__version__)"])),
        ("bwrap", out(["bwrap", "--version"])),
        ("git", out(["git", "--version"])),
        ("kernel", platform.release()),
    )


def env_fingerprint(
    files: Iterable[tuple[str, bytes]],
    tools: Iterable[tuple[str, str]],
    extra: Mapping[str, Any] | None = None,
) -> str:
    """sha256 over sorted (path, content) pairs, tool versions and extra settings."""
    h = hashlib.sha256()
    for path, data in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    for k, v in sorted(tools):
        h.update(f"{k}={v}\0".encode())
    for k, v in sorted((extra or {}).items()):
        h.update(f"{k}={v!r}\0".encode())
    return h.hexdigest()[:24]
