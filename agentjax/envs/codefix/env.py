"""The agent-facing codefix environment: tools run in the sandbox, the verifier judges on submit.

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
written by the agent is resolved inside the sandbox, where it is harmless). The workspace (a
one-commit copy of the pristine repository), its disk quota and its cleanup:
:mod:`agentjax.envs.codefix.workspace`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from agentjax.envs import sandbox
from agentjax.envs.codefix import api, scan, verifier
from agentjax.envs.codefix.workspace import Quota, make_workspace, quota_usage, remove_workspace
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
class EnvConfig:
    max_steps: int = 30
    max_obs_chars: int = 4000
    tool_limits: sandbox.Limits = sandbox.Limits(wall_s=20.0, cpu_s=10)
    verify_limits: sandbox.Limits = api.DEFAULT_LIMITS
    inject: str | None = None  # a fault class injected into the final verification
    unsafe: bool = False  # run agent code WITHOUT isolation when the sandbox is unavailable
    quota: Quota | None = Quota()  # None: no quota (only with unsafe=True, e.g. without root)


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
