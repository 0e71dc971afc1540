"""What the kernel says a sandboxed process tree did: cgroup v1 groups and counters, and /proc.

Used by :mod:`agentjax.envs.sandbox`, which launches the tree; this module only creates and reads
the accounting around it: fresh memory/pids/cpuacct leaf groups with their limits and counters
(:class:`Cgroup`), the tree's CPU time and starvation sampled during the run (:class:`Monitor`),
the tree's task ids (:func:`tree_tids`), and the host's OOM-kill and CPU-pressure counters that
bracket a run. Every read tolerates a vanished file (the tree may exit at any moment).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

CGROUP_ROOT = "/sys/fs/cgroup"
# Starvation: the tree was runnable-but-off-CPU for this fraction of the wall time, AND the host's
# CPU pressure grew by this fraction of it ... (both measured during the run, both inflatable by a
# swarm of the agent's own processes competing with each other) ...
STARVED_WAIT_FRACTION = 0.5
STARVED_PSI_FRACTION = 0.25
# ... AND, the positive evidence nothing in the tree can fake, a fresh busy canary process started
# with the tree's priority and CPU placement AFTER the tree was killed got less than this share of
# one CPU during CANARY_WINDOW_S.
CANARY_WINDOW_S = 1.0
CANARY_MIN_SHARE = 0.1


class Cgroup:
    """Fresh cgroup v1 leaf groups for one run; counters read after; removed with a retry loop."""

    def __init__(self, controllers: Sequence[str], limits: Any):  # sandbox.Limits (not imported: no cycle)
        name = f"agentjax-{uuid.uuid4().hex[:12]}"
        self.paths = {c: os.path.join(CGROUP_ROOT, c, name) for c in controllers}
        for c, p in self.paths.items():
            os.mkdir(p)
            if c == "memory":
                _write(p, "memory.limit_in_bytes", str(limits.mem_bytes))
                _write(p, "memory.swappiness", "0", ok_fail=True)
            elif c == "pids":
                _write(p, "pids.max", str(limits.pids))

    def join_script(self) -> str:
        return "".join(f'echo $$ > "{p}/cgroup.procs" && ' for p in self.paths.values())

    def tids(self) -> list[int]:
        p = self.paths.get("cpuacct") or self.paths.get("pids") or self.paths.get("memory")
        if p is None:
            return []
        try:
            with open(os.path.join(p, "tasks")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if "memory" in self.paths:
            p = self.paths["memory"]
            out["mem_failcnt"] = int(_read(p, "memory.failcnt") or 0)
            out["mem_max_usage"] = int(_read(p, "memory.max_usage_in_bytes") or 0)
            oc = dict(line.split() for line in (_read(p, "memory.oom_control") or "").splitlines())
            out["mem_oom_kill"] = int(oc.get("oom_kill", 0))
        if "pids" in self.paths:
            ev = (_read(self.paths["pids"], "pids.events") or "max 0").split()
            out["pids_max_events"] = int(ev[1]) if len(ev) > 1 else 0
        if "cpuacct" in self.paths:
            out["cpuacct_ns"] = int(_read(self.paths["cpuacct"], "cpuacct.usage") or 0)
        return out

    def kill_all(self) -> None:
        for tid in self.tids():
            try:
                os.kill(tid, signal.SIGKILL)
            except OSError:
                pass

    def remove(self) -> None:
        for p in self.paths.values():
            # the kernel needs a moment after the last task exits
            for _ in range(50 if os.path.isdir(p) else 0):
                try:
                    os.rmdir(p)
                    break
                except OSError:
                    self.kill_all()
                    time.sleep(0.02)


def _read(d: str, f: str) -> str | None:
    try:
        with open(os.path.join(d, f)) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _write(d: str, f: str, v: str, ok_fail: bool = False) -> None:
    try:
        with open(os.path.join(d, f), "w") as fh:
            fh.write(v)
    except OSError:
        if not ok_fail:
            raise


def host_oom_kills() -> int:
    for line in (_read("/proc", "vmstat") or "").splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def psi_cpu_some_us() -> int | None:
    text = _read("/proc/pressure", "cpu")
    if not text:
        return None
    fields = dict(kv.split("=") for kv in text.splitlines()[0].split()[1:])
    return int(fields["total"])


class Monitor(threading.Thread):
    """Samples the tree every 50 ms DURING the run: CPU used, and CPU wanted but not granted.

    ``/proc/<tid>/schedstat`` gives each task's CPU time and run-queue delay, but the delay is only
    booked when the task finally runs, so a task starved for the whole run would show none. Hence
    the starvation estimate also counts, per sample interval in which some task of the tree was
    runnable (state ``R`` in ``/proc/<tid>/stat``), the part of the interval the tree did not get
    on a CPU: ``max(0, dt - d(cpu))``. A sleeping tree is never runnable, so it accrues nothing.
    """

    def __init__(self, tids: Callable[[], list[int]]):
        super().__init__(daemon=True)
        self._tids, self._halt, self.seen = tids, threading.Event(), {}
        self.deficit_s = 0.0
        self.live = (0.0, 0.0)  # (deficit s, run-queue wait s) so far; replaced whole, thread-safe

    def _sample(self) -> tuple[bool, float]:
        runnable = False
        for tid in self._tids():
            text = _read(f"/proc/{tid}", "schedstat")
            st = _read(f"/proc/{tid}", "stat")
            if text:
                cpu, wait = (int(x) for x in text.split()[:2])
                old = self.seen.get(tid, (0, 0))
                self.seen[tid] = (max(cpu, old[0]), max(wait, old[1]))
            if st and st[st.rfind(")") + 2 :][:1] == "R":
                runnable = True
        return runnable, sum(c for c, _ in self.seen.values()) / 1e9

    def run(self) -> None:
        t_prev, (run_prev, cpu_prev) = time.monotonic(), self._sample()
        while not self._halt.wait(0.05):
            t, (runnable, cpu) = time.monotonic(), self._sample()
            if runnable or run_prev:
                self.deficit_s += max(0.0, (t - t_prev) - (cpu - cpu_prev))
            t_prev, run_prev, cpu_prev = t, runnable, cpu
            self.live = (self.deficit_s, sum(w for _, w in list(self.seen.values())) / 1e9)

    def finish(self) -> tuple[float, float, float]:
        """(sampled CPU s, schedstat run-queue delay s, sampled starvation deficit s)."""
        self._halt.set()
        self.join()
        return (
            sum(c for c, _ in self.seen.values()) / 1e9,
            sum(w for _, w in self.seen.values()) / 1e9,
            self.deficit_s,
        )


def starvation_suspected(deficit_s: float, runq_wait_s: float, psi_s: float, wall_s: float) -> bool:
    """The in-run measures alone (a swarm can fake them: confirm with :func:`cpu_canary`)."""
    return (
        wall_s > 0
        and max(deficit_s, runq_wait_s) >= STARVED_WAIT_FRACTION * wall_s
        and psi_s >= STARVED_PSI_FRACTION * wall_s
    )


def cpu_canary(prefix: Sequence[str], env: dict[str, str], window_s: float = CANARY_WINDOW_S) -> float:
    """CPU seconds a fresh busy process (ours, started with ``prefix``) got in ``window_s``.

    A host that gives a newcomer less than :data:`CANARY_MIN_SHARE` of a CPU is starved, whatever
    the agent's tree did before it was killed.
    """
    p = subprocess.Popen(
        [*prefix, "/bin/sh", "-c", "while :; do :; done"],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(window_s)
        text = _read(f"/proc/{p.pid}", "schedstat")
        return int(text.split()[0]) / 1e9 if text else 0.0
    finally:
        p.kill()
        p.wait()


def tree_tids(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        out += tids
        for t in tids:
            kids = _read(f"/proc/{pid}/task/{t}", "children") or ""
            todo += [int(k) for k in kids.split()]
    return out
