"""The agent-facing codefix environment: tools run in the sandbox, the verifier judges on submit.

(One module, over 300 lines: the agent-facing tools and the episode state machine share the
workspace, quota and sandbox handles.)

Tools (protocol text format: first line ``<tool> [args]``, the rest is the body):

==========================  ==================================================================
``ls [dir]``                list files (``.git`` hidden)
``read <path>``             print a file
``write <path>`` + body     replace a file with the body
``patch`` + body            apply a unified diff (``git apply``; paths relative to the repo root)
``edit <path> <old...>`` + body  replace the one occurrence of ``old`` (the rest of the first line)
                            in the file with the body (str-replace editing, as SWE-agent's and
                            OpenHands' editors do; ``old`` found 0 or 2+ times changes nothing)
``run <command...>`` (+body) run a shell command (body appended as further lines)
``test``                    run the visible tests (``python3 -m pytest -q tests``)
``submit``                  end the episode; the isolated verifier judges the tree
==========================  ==================================================================

Every tool, reads and writes included, runs inside the sandbox as uid 65534 with only the
workspace writable: the host never follows a path the agent controls (a symlink to ``/etc/passwd``
written by the agent is resolved inside the sandbox, where it is harmless). The workspace is a copy
of the pristine repository committed as ONE git commit with no reflog, tags or remotes.

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
import warnings
from typing import Any

from agentjax.envs import sandbox
from agentjax.envs.codefix import api, scan, verifier
from agentjax.envs.protocol import (
    Label,
    StepResult,
    ToolCallError,
    Verdict,
    parse_tool_call,
    truncate_observation,
)
from agentjax.trajectory import StopReason

TOOLS = ("ls", "read", "write", "patch", "edit", "run", "test", "submit")
# edit, run inside the sandbox like every tool (argv: path, old; stdin: the new text)
_EDIT = (
    "import sys\n"
    "p, old, new = sys.argv[1], sys.argv[2], sys.stdin.read()\n"
    "s = open(p).read()\n"
    "n = s.count(old)\n"
    "if n != 1:\n"
    "    sys.exit(f'edit: {old!r} occurs {n} times in {p}; it must occur exactly once')\n"
    "open(p, 'w').write(s.replace(old, new))\n"
    "print(f'edited {p}')\n"
)
_STOP = {
    Label.REWARD_HACK: StopReason.REWARD_HACK,
    Label.INFRA_FAULT: StopReason.INFRA_FAULT,
    Label.AGENT_ERROR: StopReason.AGENT_ERROR,
    Label.AGENT_QUOTA: StopReason.AGENT_ERROR,
}


@dataclasses.dataclass(frozen=True)
class Quota:
    """Kernel-enforced workspace limits (a tmpfs ``size=`` and ``nr_inodes=``)."""

    bytes: int = 64 << 20
    inodes: int = 4096


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    max_steps: int = 30
    max_obs_chars: int = 4000
    tool_limits: sandbox.Limits = sandbox.Limits(wall_s=20.0, cpu_s=10)
    verify_limits: sandbox.Limits = api.DEFAULT_LIMITS
    inject: str | None = None  # a fault class injected into the final verification
    unsafe: bool = False  # run agent code WITHOUT isolation when the sandbox is unavailable
    quota: Quota | None = Quota()  # None: no quota (only with unsafe=True, e.g. without root)


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


class CodefixEnv:
    """One episode at a time; implements :class:`agentjax.envs.protocol.Env`."""

    def __init__(self, config: EnvConfig = EnvConfig()):
        self.config = config
        self.task: api.Task | None = None
        self.workspace: str | None = None
        self.steps = 0
        self.verdict = None
        self.cleanup_failures: list[str] = []  # workspaces left behind (each reset uses a new one)

    def reset(self, task: Any, seed: int = 0) -> str:
        if not sandbox.probe().ok and not self.config.unsafe:
            raise sandbox.SandboxUnavailable(
                f"codefix refuses to run agent code: {sandbox.probe().reason}. "
                "Set EnvConfig(unsafe=True) to run WITHOUT isolation."
            )
        self.close()
        self.task = api.load_task(task) if isinstance(task, str) else task
        self.workspace, self.steps, self.verdict, self.seed = (
            make_workspace(self.task, self.config.quota),
            0,
            None,
            seed,
        )
        listing = "\n".join(f"./{rel}" for rel in sorted(scan.walk_tree(self.task.repo_dir)))
        return (
            f"Task {self.task.name}: {self.task.description}\n"
            f"Editable files: {', '.join(self.task.editable)}\n"
            f"Tools: {', '.join(TOOLS)} (first line '<tool> [args]', body on later lines)\n"
            f"Files:\n{listing}"
        )

    def close(self) -> None:
        if self.workspace:
            ws, self.workspace = self.workspace, None  # never reused, removed or not
            err = remove_workspace(ws)
            if err:
                self.cleanup_failures.append(err)
                warnings.warn(err, RuntimeWarning, stacklevel=2)

    def _sbx(self, argv: list[str], stdin: bytes | None = None) -> str:
        res = sandbox.run(
            argv,
            mounts=[sandbox.Mount(self.workspace, "/work", writable=True)],
            chdir="/work",
            limits=self.config.tool_limits,
            unsafe=self.config.unsafe,
            stdin_data=stdin,
        )
        tail = "" if res.returncode == 0 else f"\n[exit {res.returncode}]"
        if res.timed_out:
            tail += f" [killed after {self.config.tool_limits.wall_s}s wall]"
        return (res.stdout + res.stderr).rstrip("\n") + tail

    def _tool(self, name: str, args: tuple[str, ...], body: str) -> str:
        py = "/usr/bin/python3"
        if name == "ls":
            return self._sbx(
                [
                    "/usr/bin/find",
                    args[0] if args else ".",
                    "-path",
                    "*/.git",
                    "-prune",
                    "-o",
                    "-type",
                    "f",
                    "-print",
                ]
            )
        if name == "read":
            return self._sbx(["/usr/bin/cat", "--", *args[:1]]) if args else "usage: read <path>"
        if name == "write":
            if not args:
                return "usage: write <path> + body"
            script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && echo "wrote $1"'
            return self._sbx(["/bin/sh", "-c", script, "sh", args[0]], (body + "\n").encode())
        if name == "patch":
            return self._sbx(
                ["/usr/bin/git", "apply", "--whitespace=nowarn", "-v", "-"],
                body.encode() if body.endswith("\n") else (body + "\n").encode(),
            )
        if name == "edit":
            if len(args) < 2:
                return "usage: edit <path> <old text> + body (the new text)"
            return self._sbx([py, "-c", _EDIT, args[0], " ".join(args[1:])], body.encode())
        if name == "run":
            cmd = " ".join(args) + ("\n" + body if body else "")
            return self._sbx(["/bin/sh", "-c", cmd])
        if name == "test":
            return self._sbx([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        raise ToolCallError(f"unknown tool {name!r}; tools: {', '.join(TOOLS)}")

    def step(self, action_text: str) -> StepResult:
        if self.task is None or self.workspace is None or self.verdict is not None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self.steps += 1
        try:
            call = parse_tool_call(action_text)
            if call.name == "submit":
                return self._finish(StopReason.FINISHED)
            text = self._tool(call.name, call.args, call.body)
            ev: dict[str, Any] = {"tool": call.name}
            if self.config.quota is not None:
                usage = quota_usage(self.workspace, self.config.quota)
                if usage["bytes_free"] == 0 or usage["inodes_free"] == 0:
                    return self._quota_exceeded(text, usage)
        except ToolCallError as e:
            text, ev = f"error: {e}", {"tool": None, "agent_error": str(e)}
        obs, cut = truncate_observation(text, self.config.max_obs_chars)
        ev["truncation"] = cut
        if self.steps >= self.config.max_steps:
            return self._finish(StopReason.TASK_CAP, obs)
        return StepResult(observation=obs, reward=0.0, done=False, evidence=ev)

    def _quota_exceeded(self, text: str, usage: dict[str, int]) -> StepResult:
        what = "bytes" if usage["bytes_free"] == 0 else "inodes"
        why = (
            f"workspace_quota: {what} exhausted ({usage['bytes_used']}/{usage['bytes_limit']} "
            f"bytes, {usage['inodes_used']}/{usage['inodes_limit']} inodes)"
        )
        v = Verdict(
            reward=0.0,
            label=Label.AGENT_QUOTA,
            tests_expected=0,
            tests_run=0,
            tests_passed=0,
            tests_skipped=0,
            evidence={"attribution": why, "quota": usage, "hack_detected": False},
            verifier_version=verifier.VERIFIER_VERSION,
            env_fingerprint=self.task.fingerprint,
        )
        self.verdict = v
        obs, _ = truncate_observation(f"{text}\n[{why}]", self.config.max_obs_chars)
        return StepResult(
            observation=obs,
            reward=0.0,
            done=True,
            stop_reason=StopReason.AGENT_ERROR.value,
            evidence={"steps": self.steps, "quota": usage},
            verdict=v,
        )

    def _finish(self, stop: StopReason, obs: str = "") -> StepResult:
        v = api.verify(
            self.task,
            self.workspace,
            limits=self.config.verify_limits,
            inject=self.config.inject,
            seed=self.seed,
            unsafe=self.config.unsafe,
        )
        self.verdict = v
        reason = _STOP.get(v.label, stop)
        text = obs + f"\n[submitted: {v.label.value}]" if obs else f"[submitted: {v.label.value}]"
        return StepResult(
            observation=text,
            reward=v.reward,
            done=True,
            stop_reason=reason.value,
            evidence={"steps": self.steps},
            verdict=v,
        )
