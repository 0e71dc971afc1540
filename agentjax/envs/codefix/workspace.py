"""The codefix workspace: a fresh, agent-owned copy of a task's pristine repository, on its own
quota-limited tmpfs, and its removal.

The workspace is a copy of the pristine repository committed as ONE git commit with no reflog,
tags or remotes, owned by the sandbox's uid.

Disk quota: the workspace is its own tmpfs mount limited in bytes AND inodes
(:class:`Quota`, enforced by the kernel: a write past it fails with ``ENOSPC``, nothing reaches the
host disk). A tool call that leaves it full ends the episode with ``agent_quota`` and the usage as
evidence. Cleanup detaches the mount (whatever the agent built inside, e.g. a directory nested
thousands deep); a workspace that still cannot be removed is recorded in ``cleanup_failures`` and
the next ``reset()`` starts on a fresh one.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

from agentjax.envs import sandbox
from agentjax.envs.codefix import api


@dataclasses.dataclass(frozen=True)
class Quota:
    """Kernel-enforced workspace limits (a tmpfs ``size=`` and ``nr_inodes=``)."""

    bytes: int = 64 << 20
    inodes: int = 4096


def _mount_quota(root: str, quota: Quota) -> None:
    opts = f"size={quota.bytes},nr_inodes={quota.inodes},mode=0755,nosuid,nodev"
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "agentjax-ws", root],
        capture_output=True,
        text=True,
        env=sandbox.LAUNCH_ENV,
    )
    if r.returncode != 0:
        os.rmdir(root)
        raise sandbox.SandboxUnavailable(
            f"cannot mount the workspace quota tmpfs on {root}: {r.stderr.strip()} (needs root); "
            "set EnvConfig(quota=None, unsafe=True) to run without a disk quota"
        )


def make_workspace(task: api.Task, quota: Quota | None = None) -> str:
    """A fresh, agent-owned copy of the pristine repository with flattened git history.

    With ``quota`` the workspace's parent directory is a tmpfs of that size and inode count;
    remove it with :func:`remove_workspace`.
    """
    root = sandbox.scratch_dir("agentjax-ws-")
    if quota is not None:
        _mount_quota(root, quota)
    ws = os.path.join(root, "repo")
    shutil.copytree(task.repo_dir, ws)
    git = [
        "git",
        "-c",
        "user.name=agentjax",
        "-c",
        "user.email=agentjax@localhost",
        "-c",
        "init.defaultBranch=main",
        "-c",
        "commit.gpgsign=false",
    ]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "task snapshot"]):
        subprocess.run([*git, *argv], cwd=ws, check=True, capture_output=True)
    shutil.rmtree(os.path.join(ws, ".git", "logs"), ignore_errors=True)  # no reflog
    shutil.rmtree(os.path.join(ws, ".git", "hooks"), ignore_errors=True)
    os.chmod(root, 0o755)
    for d, dirs, files in os.walk(ws):
        for n in (d, *(os.path.join(d, x) for x in dirs + files)):
            os.lchown(n, sandbox.SANDBOX_UID, sandbox.SANDBOX_UID)
    return ws


def remove_workspace(ws: str) -> str | None:
    """Removes a workspace, whatever the agent built in it; None on success, else why not.

    A quota workspace is detached first (``umount --lazy``: its tree is never walked). The rest
    is removed by ``rm -rf --one-file-system``, which walks iteratively (``shutil.rmtree``
    recurses: a tree nested ~1,000 deep raised ``RecursionError`` and wedged the env).
    """
    root = os.path.dirname(ws)
    for argv in (["umount", "--lazy", root], ["rm", "-rf", "--one-file-system", "--", root]):
        if argv[0] == "rm" or os.path.ismount(root):
            subprocess.run(argv, capture_output=True, env=sandbox.LAUNCH_ENV)
    return f"could not remove workspace {root}" if os.path.lexists(root) else None


def quota_usage(ws: str, quota: Quota) -> dict[str, int]:
    """Bytes and inodes in use on the workspace's tmpfs, with the limits."""
    st = os.statvfs(os.path.dirname(ws))
    return {
        "bytes_used": (st.f_blocks - st.f_bfree) * st.f_frsize,
        "bytes_limit": quota.bytes,
        "inodes_used": st.f_files - st.f_ffree,
        "inodes_limit": quota.inodes,
        "bytes_free": st.f_bavail * st.f_frsize,
        "inodes_free": st.f_favail,
    }
