"""A local process sandbox: unprivileged uid, bubblewrap namespaces, rlimits, cgroup limits.

(One module, over 300 lines: the launch chain, limits and cleanup are one security boundary, read
together; kernel accounting is in ``accounting.py``.)

Launch chain (each step ``exec``s the next, so one process tree, one process group)::

    sh (root, started with ONLY ``LAUNCH_ENV``: joins fresh cgroup v1 memory/pids/cpuacct groups)
      -> prlimit (RLIMIT_CPU soft < hard, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE)
      -> setpriv --reuid=65534 --regid=65534 --clear-groups   (drop root BEFORE bwrap)
      -> bwrap --unshare-all (no network, new pid/ipc/uts/cgroup ns) --die-with-parent
               read-only /usr and /etc, tmpfs /tmp, fresh /proc and /dev, only chosen binds writable
      -> the command

No level of the chain sees the trainer's environment (API keys, tokens): the outer ``sh`` is
started with the explicit allow-list :data:`LAUNCH_ENV`, which every later step inherits, so
bwrap's own pid 1 (readable at ``/proc/1/environ`` inside, same uid) holds only that; the command
gets ``--clearenv`` plus the explicit ``env`` of :func:`run`.

Bubblewrap started as root is no boundary (measured: the agent remounted ``/`` read-write), hence
the uid drop first. cgroup v2 here has no memory controller; v1 ``memory`` and ``pids`` work and
are used when mounted; otherwise the run goes on with rlimits only and ``limits_held`` says so.

Evidence the agent cannot forge is gathered outside the sandbox: the exit status of the outer
process (a signal there came from outside the pid namespace), a launch marker written inside the
sandbox before the command starts, cgroup counters, the tree's CPU use and starvation sampled
DURING the run (``/proc/<tid>/stat`` and ``schedstat``), and the host CPU pressure (PSI) counter
bracketing the run.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentjax.envs import accounting
from agentjax.envs.protocol import InfraError

SANDBOX_UID = 65534
SYSTEM_RO = ("/usr", "/etc")
_KEEP = 64 * 1024  # bytes of stdout/stderr kept from each end
# The whole environment of the launcher chain (sh, prlimit, setpriv, bwrap and bwrap's pid 1):
# an explicit allow-list, never the trainer's environment.
LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class SandboxUnavailable(InfraError):
    """Isolation is missing and the caller did not opt into the unsafe mode (the host's failure)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed process tree."""

    wall_s: float = 30.0
    cpu_s: int = 10  # RLIMIT_CPU soft limit (SIGXCPU, exit 152); hard = soft + 1 (SIGKILL)
    as_bytes: int = 1 << 30  # RLIMIT_AS
    fsize_bytes: int = 16 << 20  # RLIMIT_FSIZE
    nofile: int = 256  # RLIMIT_NOFILE
    mem_bytes: int = 768 << 20  # cgroup v1 memory.limit_in_bytes
    pids: int = 64  # cgroup v1 pids.max
    tmp_bytes: int = 64 << 20  # size of the sandbox's private tmpfs /tmp


@dataclasses.dataclass(frozen=True)
class Mount:
    src: str
    dst: str
    writable: bool = False


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What this host can enforce (probed once per process)."""

    ok: bool
    reason: str
    bwrap: str | None
    cgroups: tuple[str, ...]  # v1 controllers usable here (memory, pids, cpuacct)


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    returncode: int  # outer process; negative = killed by a signal from outside the sandbox
    stdout: str
    stderr: str
    wall_s: float
    started: bool  # our launcher inside the sandbox marked that setup succeeded (before agent code)
    timed_out: bool  # our wall timeout fired and we killed the tree
    killed_by_us: bool
    cpu_s: float  # CPU time of the whole tree (cgroup cpuacct, else sampled schedstat)
    runq_wait_s: float  # schedstat run-queue delay booked by the tree's tasks (sampled)
    starved_s: float  # wall time the tree was runnable but off-CPU (sampled, see accounting.Monitor)
    psi_cpu_some_s: float  # host CPU pressure stall accumulated during the run
    cgroup: dict[str, int]
    host_oom_kills: int  # kernel OOM kills anywhere on the host during the run (/proc/vmstat)
    limits_held: dict[str, bool]
    isolation: str  # "bwrap+setpriv" or "UNSAFE"
    # CPU s a fresh canary got in accounting.CANARY_WINDOW_S after a timed-out tree that looked
    # starved was killed; -1 = not measured (no timeout, or no sign of starvation)
    host_canary_cpu_s: float = -1.0

    @property
    def signal(self) -> int | None:
        """Signal that ended the command inside (bwrap reports 128+sig) or the outer process."""
        if self.returncode < 0:
            return -self.returncode
        return self.returncode - 128 if self.returncode > 128 else None

    def evidence(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("stdout", "stderr"):
            d[k] = d[k][-2000:]
        return d


def scratch_dir(prefix: str) -> str:
    """A fresh host directory that uid 65534 can traverse (bind sources must be reachable by it).

    Under ``$AGENTJAX_SANDBOX_TMP`` (default ``/tmp``), never under ``$TMPDIR``, which may sit in a
    root-only directory such as ``/root``.
    """
    d = tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("AGENTJAX_SANDBOX_TMP", "/tmp"))
    os.chmod(d, 0o755)
    return d


def _run_ok(argv: Sequence[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20, env=LAUNCH_ENV).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """Checks that an unprivileged, namespaced sandbox really starts here."""
    bwrap, setpriv, prlimit = (shutil.which(b) for b in ("bwrap", "setpriv", "prlimit"))
    if not (bwrap and setpriv and prlimit):
        missing = [n for n, p in (("bwrap", bwrap), ("setpriv", setpriv), ("prlimit", prlimit)) if not p]
        return Isolation(False, f"missing {missing} (apt-get install bubblewrap util-linux)", bwrap, ())
    if os.geteuid() != 0:
        return Isolation(False, "must run as root to drop to uid 65534 and manage cgroups", bwrap, ())
    probe_cmd = [
        setpriv,
        f"--reuid={SANDBOX_UID}",
        f"--regid={SANDBOX_UID}",
        "--clear-groups",
        *_bwrap_args(bwrap, [], "/"),
        "/usr/bin/true",
    ]
    if not _run_ok(probe_cmd):
        return Isolation(False, "bwrap could not create namespaces as an unprivileged user", bwrap, ())
    cgs = tuple(
        c
        for c in ("memory", "pids", "cpuacct")
        if os.access(os.path.join(accounting.CGROUP_ROOT, c, "cgroup.procs"), os.W_OK)
    )
    return Isolation(True, "ok", bwrap, cgs)


def _bwrap_args(bwrap: str, mounts: Sequence[Mount], chdir: str, tmp_bytes: int = 64 << 20) -> list[str]:
    args = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        "--clearenv",
    ]
    for d in SYSTEM_RO:
        args += ["--ro-bind", d, d]
    for name in ("lib", "lib64", "bin", "sbin"):  # merged-/usr layout
        if os.path.isdir(f"/usr/{name}"):
            args += ["--symlink", f"usr/{name}", f"/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    for m in mounts:
        args += ["--bind" if m.writable else "--ro-bind", m.src, m.dst]
    return args + ["--remount-ro", "/", "--chdir", chdir]  # the root tmpfs too: only binds+/tmp


def _tail(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) > 2 * _KEEP:
        data = data[:_KEEP] + b"\n...[output cut]...\n" + data[-_KEEP:]
    return data.decode("utf-8", "replace")


def run(
    argv: Sequence[str],
    *,
    mounts: Sequence[Mount] = (),
    chdir: str = "/tmp",
    limits: Limits = Limits(),
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    unsafe: bool = False,
    on_start: Callable[[subprocess.Popen], Callable[[], None] | None] | None = None,
    bwrap_extra: Sequence[str] = (),
    launch_prefix: Sequence[str] = (),
    stdin_data: bytes | None = None,
) -> SandboxResult:
    """Runs ``argv`` in the sandbox and returns the outcome with its evidence.

    Args:
      argv: command inside the sandbox (absolute paths as seen inside).
      mounts: binds; only ``writable`` ones can be written.
      unsafe: run WITHOUT isolation (rlimits only) when the sandbox is unavailable. Never default.
      on_start: called with the Popen right after launch (fault injection); may return a
        cleanup callable run after the tree is gone.
      bwrap_extra: extra bwrap arguments (fault injection of start failures).
      launch_prefix: commands run as root before ``prlimit`` (e.g. ``nice``, ``taskset``).
      stdin_data: bytes fed to the command's stdin (tool bodies such as file contents).
    """
    iso = probe()
    if not iso.ok and not unsafe:
        raise SandboxUnavailable(
            f"refusing to run agent code without isolation: {iso.reason}. "
            "Pass unsafe=True to run it unisolated at your own risk."
        )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(env or {}),
    }
    tmp = tempfile.mkdtemp(prefix="agentjax-sbx-")
    out_path, err_path, mark_path, in_path = (os.path.join(tmp, n) for n in ("out", "err", "mark", "in"))
    with open(in_path, "wb") as f:
        f.write(stdin_data or b"")
    rl = [
        *launch_prefix,
        "prlimit",
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={limits.as_bytes}",
        f"--fsize={limits.fsize_bytes}",
        f"--nofile={limits.nofile}",
    ]
    cg = accounting.Cgroup(iso.cgroups, limits) if iso.ok else None
    proc: subprocess.Popen | None = None
    monitor: accounting.Monitor | None = None
    try:
        mark_fd = os.open(mark_path, os.O_WRONLY | os.O_CREAT, 0o600)
        # Launch marker: our bash writes one byte to an fd only it holds and closes it, then execs the
        # command. No byte = the sandbox never got as far as the command; the command cannot forge it.
        launch = ["/bin/bash", "-c", f'printf x >&{mark_fd}; exec {mark_fd}>&-; exec "$@"', "launch"]
        if iso.ok:
            inner = [a for kv in env.items() for a in ("--setenv", *kv)]
            chain = [
                *rl,
                "--",
                "setpriv",
                f"--reuid={SANDBOX_UID}",
                f"--regid={SANDBOX_UID}",
                "--clear-groups",
                *_bwrap_args(iso.bwrap, mounts, chdir, limits.tmp_bytes),
                *inner,
                *bwrap_extra,
                "--",
                *launch,
                *argv,
            ]
            isolation = "bwrap+setpriv"
        else:
            chain = [*rl, "--", *launch, *argv]
            isolation = "UNSAFE"
        script = (cg.join_script() if cg else "") + 'exec "$@"'
        psi0, oom0 = accounting.psi_cpu_some_us(), accounting.host_oom_kills()
        t0 = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err, open(in_path, "rb") as inp:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "sh", *chain],
                stdout=out,
                stderr=err,
                stdin=inp,
                start_new_session=True,
                pass_fds=(mark_fd, *pass_fds),
                env=LAUNCH_ENV if iso.ok else env,
                cwd=None if iso.ok else chdir,
            )
        os.close(mark_fd)
        monitor = accounting.Monitor(
            lambda: sorted(set(accounting.tree_tids(proc.pid)) | set(cg.tids() if cg else ()))
        )
        monitor.start()
        cleanup = _once(on_start(proc) if on_start is not None else None)
        fired, canary = threading.Event(), [-1.0]

        def on_timeout() -> None:  # a timer, not Popen.wait(timeout): that polls with up to 50 ms sleeps
            fired.set()
            _kill_tree(proc, cg)  # first: the agent's tree must not compete with the canary
            psi = accounting.psi_cpu_some_us()
            psi_s = (psi - psi0) / 1e6 if psi is not None and psi0 is not None else -1.0
            if accounting.starvation_suspected(*monitor.live, psi_s, time.monotonic() - t0):
                canary[0] = accounting.cpu_canary(launch_prefix, LAUNCH_ENV)
            cleanup()  # then end an injected fault: a starved tree is slow to die
            _kill_tree(proc, cg)

        timer = threading.Timer(limits.wall_s, on_timeout)
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
            timer.join()
            cleanup()
        timed_out = fired.is_set()
        wall = time.monotonic() - t0
        cpu_sampled, sched_wait_s, deficit_s = monitor.finish()
        psi1 = accounting.psi_cpu_some_us()
        if cg:
            cg.kill_all()
        counters = cg.counters() if cg else {}
        started = os.path.getsize(mark_path) > 0
        stdout, stderr = _tail(out_path), _tail(err_path)
        held = {
            "uid_drop": iso.ok,
            "namespaces": iso.ok,
            "rlimits": True,
            "cgroup_memory": bool(cg and "memory" in cg.paths),
            "cgroup_pids": bool(cg and "pids" in cg.paths),
            "wall_timeout": True,
        }
        return SandboxResult(
            returncode=proc.returncode,
            stdout=stdout,
            stderr=stderr,
            wall_s=wall,
            started=started,
            timed_out=timed_out,
            killed_by_us=timed_out,
            cpu_s=counters.get("cpuacct_ns", cpu_sampled * 1e9) / 1e9,
            runq_wait_s=sched_wait_s,
            starved_s=deficit_s,
            psi_cpu_some_s=(psi1 - psi0) / 1e6 if psi0 is not None and psi1 is not None else -1.0,
            cgroup=counters,
            host_oom_kills=accounting.host_oom_kills() - oom0,
            limits_held=held,
            isolation=isolation,
            host_canary_cpu_s=canary[0],
        )
    finally:  # also on an exception: no stray tree, thread, cgroup or scratch directory is left
        if monitor is not None and monitor.is_alive():
            monitor.finish()
        if proc is not None and proc.poll() is None:
            _kill_tree(proc, cg)
            proc.wait()
        if cg:
            cg.remove()
        shutil.rmtree(tmp, ignore_errors=True)


def _once(fn: Callable[[], None] | None) -> Callable[[], None]:
    lock, done = threading.Lock(), []

    def call() -> None:
        with lock:
            if fn is not None and not done:
                done.append(True)
                fn()

    return call


def _kill_tree(proc: subprocess.Popen, cg: accounting.Cgroup | None) -> None:
    """Kills the process group (bwrap's pid-ns init then takes every descendant with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if cg:
        cg.kill_all()
