"""The sandbox's isolation and limits, measured with the real bubblewrap + setpriv stack."""

import os
import pathlib
import shutil
import signal
import uuid

import pytest

from agentjax.envs import accounting, sandbox
from agentjax.envs.sandbox import Limits, Mount

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)
PY = "/usr/bin/python3"
QUICK = Limits(wall_s=15.0, cpu_s=4)


def _py(code, limits=QUICK, **kw):
    return sandbox.run([PY, "-c", code], limits=limits, **kw)


def test_probe_reports_working_isolation():
    iso = sandbox.probe()
    assert iso.ok, iso.reason  # bubblewrap is installed, so it must work
    assert set(iso.cgroups) >= {"memory", "pids"} or not os.path.isdir("/sys/fs/cgroup/memory")


def test_unprivileged_uid_and_no_capabilities():
    r = _py(
        "import os; print(os.getuid(), os.getgid(), os.getgroups());"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])"
    )
    uid_line, cap = r.stdout.split("\n")[:2]
    assert uid_line == "65534 65534 []"
    assert int(cap, 16) == 0
    assert r.started and r.isolation == "bwrap+setpriv"


def test_read_only_system_and_no_host_paths(tmp_path):
    secret = tmp_path / "host_secret.txt"
    secret.write_text("s3cret")
    code = (
        f"import os\nfor p in ('/usr/x', '/etc/x', '/x'):\n"
        f"    try:\n        open(p, 'w'); print('WROTE', p)\n    except OSError as e:\n"
        f"        print('denied', p, e.errno)\n"
        f"print(os.path.exists({str(secret)!r}), os.path.exists('/root'), os.path.exists('/work'))\n"
    )
    r = _py(code)
    assert "WROTE" not in r.stdout
    assert r.stdout.count("denied") == 3
    assert r.stdout.strip().splitlines()[-1] == "False False False"


def test_remount_root_read_write_fails():
    r = sandbox.run(
        ["/bin/sh", "-c", "mount -o remount,rw / 2>&1; touch /usr/pwned 2>&1; echo rc=$?"], limits=QUICK
    )
    assert "rc=0" not in r.stdout
    assert not os.path.exists("/usr/pwned")


@pytest.fixture
def ws():
    """A sandbox-owned workspace (pytest's tmp_path sits in a root-only directory)."""
    d = pathlib.Path(sandbox.scratch_dir("agentjax-test-"))
    os.chown(d, sandbox.SANDBOX_UID, sandbox.SANDBOX_UID)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_only_workspace_writable_and_tmp_is_private(ws):
    m = [Mount(str(ws), "/work", writable=True)]
    r1 = sandbox.run(
        ["/bin/sh", "-c", "echo hi > /work/out.txt && echo t > /tmp/leak && echo ok"],
        mounts=m,
        chdir="/work",
        limits=QUICK,
    )
    assert r1.stdout.strip() == "ok"
    assert (ws / "out.txt").read_text() == "hi\n"
    r2 = sandbox.run(["/bin/sh", "-c", "cat /tmp/leak 2>&1 || echo gone"], limits=QUICK)
    assert "gone" in r2.stdout  # a fresh tmpfs /tmp per run


def test_sandboxed_code_cannot_reach_the_network():
    r = _py(
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), 2); print('CONNECTED')\n"
        "except OSError as e:\n    print('errno', e.errno)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))"
    )
    assert "CONNECTED" not in r.stdout
    assert r.stdout.strip().splitlines()[-1] == "['lo']"


def test_pid_namespace_hides_host_processes():
    r = _py("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid())")
    assert r.stdout.strip() == "[1, 2] 2"  # bwrap's init and the command; no host process


def test_rlimit_cpu_gives_sigxcpu():
    r = _py("while True: pass", limits=Limits(wall_s=30.0, cpu_s=1))
    assert r.signal == signal.SIGXCPU and r.returncode == 152
    assert not r.timed_out and r.cpu_s >= 0.7  # tick-based accounting: ~1 s give or take


def test_rlimit_as_and_fsize_and_nofile(ws):
    r = _py("bytearray(2 * 1024**3)")
    assert "MemoryError" in r.stderr
    r = sandbox.run(
        [
            PY,
            "-c",
            "import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "try:\n    open('/work/big', 'wb').write(b'x' * (2 << 20)); print('BIG')\n"
            "except OSError as e:\n    print('fsize', e.errno)",
        ],
        mounts=[Mount(str(ws), "/work", writable=True)],
        limits=Limits(wall_s=15.0, cpu_s=4, fsize_bytes=1 << 20),
    )
    assert r.stdout.startswith("fsize 27")  # EFBIG
    r = _py(
        "import os\nfds = []\ntry:\n    while True: fds.append(os.open('/dev/null', 0))\n"
        "except OSError as e:\n    print(len(fds) < 40, e.errno)",
        limits=Limits(nofile=32),
    )
    assert r.stdout.strip() == "True 24"  # EMFILE


def test_cgroup_memory_and_pids_limits():
    if not {"memory", "pids"} <= set(sandbox.probe().cgroups):
        pytest.skip("cgroup v1 memory/pids controllers not mounted here; rlimits only")
    r = _py(
        "x = []\nwhile True: x.append(b'a' * (8 << 20))",
        limits=Limits(wall_s=20.0, cpu_s=10, as_bytes=4 << 30, mem_bytes=128 << 20),
    )
    assert r.cgroup["mem_oom_kill"] >= 1 and r.signal == signal.SIGKILL
    assert r.limits_held["cgroup_memory"]
    r = _py(
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        "            time.sleep(30)\n        n += 1\nexcept OSError:\n    print('forks', n)",
        limits=Limits(wall_s=20.0, pids=16),
    )
    assert r.cgroup["pids_max_events"] >= 1
    assert r.stdout.strip().startswith("forks ") and int(r.stdout.split()[-1]) < 16


def test_wall_timeout_kills_escaped_grandchildren():
    token = uuid.uuid4().hex
    r = sandbox.run(
        ["/bin/sh", "-c", f"setsid sh -c 'exec -a {token} sleep 300' & sleep 300"], limits=Limits(wall_s=1.0)
    )
    assert r.timed_out and r.killed_by_us
    alive = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        alive.append(p)
            except OSError:
                pass
    assert alive == []


def test_start_failure_is_evident():
    r = sandbox.run(["/usr/bin/true"], limits=QUICK, bwrap_extra=["--ro-bind", "/nonexistent/agentjax", "/x"])
    assert not r.started and r.returncode != 0
    r = sandbox.run(["/bin/sh", "-c", "echo 'bwrap: fake' >&2; exit 1"], limits=QUICK)
    assert r.started  # the command cannot forge a start failure


def test_refuses_without_isolation_unless_unsafe(monkeypatch):
    broken = sandbox.Isolation(False, "bubblewrap missing (simulated)", None, ())
    monkeypatch.setattr(sandbox, "probe", lambda: broken)
    with pytest.raises(sandbox.SandboxUnavailable, match="unsafe=True"):
        sandbox.run(["/usr/bin/true"])
    r = sandbox.run(["/bin/sh", "-c", "echo unsafe-ok"], unsafe=True, limits=QUICK)
    assert r.isolation == "UNSAFE" and r.stdout.strip() == "unsafe-ok"
    assert not r.limits_held["namespaces"]


def test_exception_mid_run_leaves_nothing_behind(monkeypatch):
    token = uuid.uuid4().hex
    monkeypatch.setattr(accounting.uuid, "uuid4", lambda: uuid.UUID(token))  # a known cgroup name

    def boom(proc):
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        sandbox.run(["/bin/sh", "-c", f"exec -a {token} sleep 300"], limits=QUICK, on_start=boom)
    for c in sandbox.probe().cgroups:
        assert not os.path.exists(f"/sys/fs/cgroup/{c}/agentjax-{token[:12]}")
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    assert token.encode() not in f.read()
            except OSError:
                pass
