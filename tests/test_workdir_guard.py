"""The workdir is checked and locked before any work (issue #31): a second run on a workdir a live
run holds refuses, naming the first's pid; a lock left by a killed run is taken over; a workdir that
cannot be written, or lacks the space a run needs, is one error at start (before: a raw OSError at
the first write, after minutes of warm start)."""

import errno
import os
import signal
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from agentjax.run import files as files
from tests.runs import ROOT, run_module

_HOLD = textwrap.dedent(
    """
    import sys, time
    from agentjax.run.files import RunLock
    RunLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)


def _holder(wd):
    """A process that holds ``wd``'s run lock (as a live run does) until it is killed."""
    p = subprocess.Popen([sys.executable, "-c", _HOLD, wd], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_a_live_run_holds_its_workdir_and_a_dead_ones_lock_is_taken_over(tmp_path):
    wd = str(tmp_path)
    first = _holder(wd)
    try:
        with pytest.raises(files.WorkdirError, match=rf"in use by another run \(pid {first.pid}\b"):
            files.RunLock(wd).acquire()
    finally:
        first.send_signal(signal.SIGKILL)  # dies holding it: the lock file still names it
        first.wait()
    logs = []
    lock = files.RunLock(wd).acquire(logs.append)
    assert any("stale lock" in x and str(first.pid) in x for x in logs), logs
    with pytest.raises(files.WorkdirError, match=rf"pid {os.getpid()}\b"):  # held by us now
        files.RunLock(wd).acquire()
    lock.release()
    files.RunLock(wd).acquire().release()  # released cleanly: free, and no stale owner
    logs.clear()
    files.RunLock(wd).acquire(logs.append).release()
    assert not logs


def test_an_unwritable_or_full_workdir_is_named_at_start(tmp_path, monkeypatch):
    wd = str(tmp_path / "wd")
    files.check_workdir(wd, 1 << 20)  # creatable, writable, space enough
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: SimpleNamespace(free=10 << 20))
    with pytest.raises(
        files.WorkdirError, match=r"has 10\.0 MiB free but this run needs at least 2048\.0 MiB"
    ):
        files.check_workdir(wd, 2 << 30)
    monkeypatch.undo()
    real_open = os.open

    def read_only(path, *a, **k):
        if ".write-probe" in os.fspath(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(files.os, "open", read_only)
    with pytest.raises(
        files.WorkdirError, match=rf"--workdir={wd} is not writable \(Read-only file system\)"
    ):
        files.check_workdir(wd, 1)
    monkeypatch.undo()
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(files.WorkdirError, match=r"cannot be created"):
        files.check_workdir(str(blocker / "wd"), 1)


@pytest.mark.parametrize("case", ["locked", "not_a_directory"])
def test_train_refuses_a_held_or_unusable_workdir_before_any_work(tmp_path, case):
    wd = str(tmp_path / "wd")
    holder = None
    if case == "locked":
        os.makedirs(wd)
        holder = _holder(wd)
    else:
        (tmp_path / "file").write_text("")
        wd = str(tmp_path / "file" / "wd")
    try:
        out = run_module("launch.train", "--config=configs/smoke.py", f"--workdir={wd}", timeout=300)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("workdir error: --workdir=") and "Traceback" not in out.stderr
    if holder is not None:
        assert f"pid {holder.pid}" in lines[-1]
    assert "warm start" not in out.stdout  # refused before any work
