"""The agent-facing codefix environment: tools run in the sandbox, the verifier judges on submit.

Tools (protocol text format: first line ``<tool> [args]``, the rest is the body):

==========================  ==================================================================
``ls [dir]``                list files (``.git`` hidden)
``read <path>``             print a file
``write <path>`` + body     replace a file with the body
``patch`` + body            apply a unified diff (``git apply``; paths relative to the repo root)
``run <command...>`` (+body) run a shell command (body appended as further lines)
``test``                    run the visible tests (``python3 -m pytest -q tests``)
``submit``                  end the episode; the isolated verifier judges the tree
==========================  ==================================================================

Every tool, reads and writes included, runs inside the sandbox as uid 65534 with only the
workspace writable: the host never follows a path the agent controls (a symlink to ``/etc/passwd``
written by the agent is resolved inside the sandbox, where it is harmless). The workspace is a copy
of the pristine repository committed as ONE git commit with no reflog, tags or remotes.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from typing import Any

from agentjax.envs import sandbox
from agentjax.envs.codefix import api, scan
from agentjax.envs.protocol import (
    Label,
    StepResult,
    ToolCallError,
    parse_tool_call,
    truncate_observation,
)
from agentjax.trajectory import StopReason

TOOLS = ("ls", "read", "write", "patch", "run", "test", "submit")
_STOP = {Label.REWARD_HACK: StopReason.REWARD_HACK, Label.INFRA_FAULT: StopReason.INFRA_FAULT,
         Label.AGENT_ERROR: StopReason.AGENT_ERROR}


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    max_steps: int = 30
    max_obs_chars: int = 4000
    tool_limits: sandbox.Limits = sandbox.Limits(wall_s=20.0, cpu_s=10)
    verify_limits: sandbox.Limits = api.DEFAULT_LIMITS
    inject: str | None = None  # a fault class injected into the final verification
    unsafe: bool = False  # run agent code WITHOUT isolation when the sandbox is unavailable


def make_workspace(task: api.Task) -> str:
    """A fresh, agent-owned copy of the pristine repository with flattened git history."""
    root = sandbox.scratch_dir("agentjax-ws-")
    ws = os.path.join(root, "repo")
    shutil.copytree(task.repo_dir, ws)
    git = ["git", "-c", "user.name=agentjax", "-c", "user.email=agentjax@localhost",
           "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "task snapshot"]):
        subprocess.run([*git, *argv], cwd=ws, check=True, capture_output=True)
    shutil.rmtree(os.path.join(ws, ".git", "logs"), ignore_errors=True)  # no reflog
    shutil.rmtree(os.path.join(ws, ".git", "hooks"), ignore_errors=True)
    os.chmod(root, 0o755)
    for d, dirs, files in os.walk(ws):
        for n in (d, *(os.path.join(d, x) for x in dirs + files)):
            os.lchown(n, sandbox.SANDBOX_UID, sandbox.SANDBOX_UID)
    return ws


class CodefixEnv:
    """One episode at a time; implements :class:`agentjax.envs.protocol.Env`."""

    def __init__(self, config: EnvConfig = EnvConfig()):
        self.config = config
        self.task: api.Task | None = None
        self.workspace: str | None = None
        self.steps = 0
        self.verdict = None

    def reset(self, task: Any, seed: int = 0) -> str:
        if not sandbox.probe().ok and not self.config.unsafe:
            raise sandbox.SandboxUnavailable(
                f"codefix refuses to run agent code: {sandbox.probe().reason}. "
                "Set EnvConfig(unsafe=True) to run WITHOUT isolation.")
        self.close()
        self.task = api.load_task(task) if isinstance(task, str) else task
        self.workspace, self.steps, self.verdict, self.seed = make_workspace(self.task), 0, None, seed
        listing = "\n".join(f"./{rel}" for rel in sorted(scan.walk_tree(self.task.repo_dir)))
        return (f"Task {self.task.name}: {self.task.description}\n"
                f"Editable files: {', '.join(self.task.editable)}\n"
                f"Tools: {', '.join(TOOLS)} (first line '<tool> [args]', body on later lines)\n"
                f"Files:\n{listing}")

    def close(self) -> None:
        if self.workspace:
            shutil.rmtree(os.path.dirname(self.workspace), ignore_errors=True)
            self.workspace = None

    def _sbx(self, argv: list[str], stdin: bytes | None = None) -> str:
        res = sandbox.run(argv, mounts=[sandbox.Mount(self.workspace, "/work", writable=True)],
                          chdir="/work", limits=self.config.tool_limits, unsafe=self.config.unsafe,
                          stdin_data=stdin)
        tail = "" if res.returncode == 0 else f"\n[exit {res.returncode}]"
        if res.timed_out:
            tail += f" [killed after {self.config.tool_limits.wall_s}s wall]"
        return (res.stdout + res.stderr).rstrip("\n") + tail

    def _tool(self, name: str, args: tuple[str, ...], body: str) -> str:
        py = "/usr/bin/python3"
        if name == "ls":
            return self._sbx(["/usr/bin/find", args[0] if args else ".", "-path", "*/.git",
                              "-prune", "-o", "-type", "f", "-print"])
        if name == "read":
            return self._sbx(["/usr/bin/cat", "--", *args[:1]]) if args else "usage: read <path>"
        if name == "write":
            if not args:
                return "usage: write <path> + body"
            script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && echo "wrote $1"'
            return self._sbx(["/bin/sh", "-c", script, "sh", args[0]], (body + "\n").encode())
        if name == "patch":
            return self._sbx(["/usr/bin/git", "apply", "--whitespace=nowarn", "-v", "-"],
                             body.encode() if body.endswith("\n") else (body + "\n").encode())
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
        except ToolCallError as e:
            text, ev = f"error: {e}", {"tool": None, "agent_error": str(e)}
        obs, cut = truncate_observation(text, self.config.max_obs_chars)
        ev["truncation"] = cut
        if self.steps >= self.config.max_steps:
            return self._finish(StopReason.TASK_CAP, obs)
        return StepResult(observation=obs, reward=0.0, done=False, evidence=ev)

    def _finish(self, stop: StopReason, obs: str = "") -> StepResult:
        v = api.verify(self.task, self.workspace, limits=self.config.verify_limits,
                       inject=self.config.inject, seed=self.seed, unsafe=self.config.unsafe)
        self.verdict = v
        reason = _STOP.get(v.label, stop)
        text = obs + f"\n[submitted: {v.label.value}]" if obs else f"[submitted: {v.label.value}]"
        return StepResult(observation=text, reward=v.reward, done=True, stop_reason=reason.value,
                          evidence={"steps": self.steps}, verdict=v)
