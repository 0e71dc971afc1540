"""The environment protocol: tasks, tool calls, step results and verdicts.

Host-side Python only (no JAX). Environments speak text; the rollout loop owns tokenisation.

Tool-call text format (one format for every environment):

        <tool_name> [arg1 arg2 ...]
        [body: every following line, passed verbatim as the ``body`` argument]

The first line is split on whitespace: the first word names the tool, the rest are positional
arguments. Everything after the first newline is the body (file contents, a unified diff, ...).
A text that does not parse is an agent error, never an environment crash.

Observation text longer than an environment's limit is cut by :func:`truncate_observation`, which
keeps the head and the tail and records in the evidence exactly what was cut.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Protocol

# the plain tool-call text environments read (defined in the leaf unit every side imports)
from agentjax.toolcall.text import ToolCall as ToolCall
from agentjax.toolcall.text import ToolCallError as ToolCallError
from agentjax.toolcall.text import format_tool_call as format_tool_call
from agentjax.toolcall.text import parse_tool_call as parse_tool_call


class Label(str, enum.Enum):
    """Verdict labels. Every finished episode gets exactly one."""

    PASS = "pass"
    FAIL = "fail"
    REWARD_HACK = "reward_hack"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_OOM = "agent_oom"
    AGENT_CPU = "agent_cpu"
    AGENT_ERROR = "agent_error"
    AGENT_QUOTA = "agent_quota"  # the agent filled its workspace's disk quota (bytes or inodes)
    INFRA_FAULT = "infra_fault"


class Treatment(str, enum.Enum):
    """What the learner does with a trajectory, by verdict label."""

    USE = "use"  # train on the verdict's reward
    ZERO = "zero"  # train with reward 0 (a real failure of the agent)
    PENALTY = "penalty"  # train with a negative reward and flag for audit
    MASK_AND_RETRY = "mask_and_retry"  # exclude from the loss (never zero it); retry the task


@dataclasses.dataclass(frozen=True)
class RewardRule:
    treatment: Treatment
    reward: float | None  # the reward the learner uses; None = the verdict's own / not trained on
    audit: bool  # flag the trajectory for the audit sample
    why: str


# The reward-treatment table the learner follows (documented in README and docs/envs.md).
REWARD_TREATMENT: dict[Label, RewardRule] = {
    Label.PASS: RewardRule(Treatment.USE, None, False, "verified outcome"),
    Label.FAIL: RewardRule(Treatment.USE, None, False, "verified outcome (may be partial credit)"),
    Label.REWARD_HACK: RewardRule(
        Treatment.PENALTY, -1.0, True, "the agent attacked the grader: penalise and audit the hole"
    ),
    Label.AGENT_TIMEOUT: RewardRule(Treatment.ZERO, 0.0, False, "the agent's own loop or sleep"),
    Label.AGENT_OOM: RewardRule(Treatment.ZERO, 0.0, False, "the agent's own memory blow-up"),
    Label.AGENT_CPU: RewardRule(Treatment.ZERO, 0.0, False, "the agent exhausted its CPU limit"),
    Label.AGENT_ERROR: RewardRule(
        Treatment.ZERO, 0.0, False, "malformed action or crash caused by the agent"
    ),
    Label.AGENT_QUOTA: RewardRule(Treatment.ZERO, 0.0, False, "the agent filled its workspace disk quota"),
    Label.INFRA_FAULT: RewardRule(
        Treatment.MASK_AND_RETRY,
        None,
        True,
        "not the agent's doing: a zero would teach the opposite of the truth",
    ),
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The isolated verifier's decision on one episode."""

    reward: float
    label: Label
    tests_expected: int
    tests_run: int
    tests_passed: int
    tests_skipped: int
    evidence: dict[str, Any]
    verifier_version: str
    env_fingerprint: str

    @property
    def rule(self) -> RewardRule:
        return REWARD_TREATMENT[self.label]

    @property
    def trained_reward(self) -> float | None:
        """The reward the learner uses, or None when the trajectory is masked out of the loss."""
        rule = self.rule
        if rule.treatment is Treatment.MASK_AND_RETRY:
            return None
        return self.reward if rule.reward is None else rule.reward


@dataclasses.dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    stop_reason: str | None = None  # a StopReason value when done
    evidence: dict[str, Any] = dataclasses.field(default_factory=dict)
    verdict: Verdict | None = None  # set on the final step


class InfraError(RuntimeError):
    """A step failed for a reason the agent's action cannot produce, with the evidence: the
    sandbox could not start, the host timed out or died, an injected fault. Only this exception
    (and its subclasses) makes a raising ``step`` an ``infra_fault``; see :func:`attribute_step_error`."""

    def __init__(self, message: str, evidence: dict[str, Any] | None = None):
        super().__init__(message)
        self.evidence = dict(evidence or {})


MAX_ERROR_CHARS = 2000  # an exception's text can carry the agent's input: bounded in the evidence


def attribute_step_error(err: BaseException) -> tuple[Label, dict[str, Any]]:
    """Who an exception raised by ``Env.step`` is charged to, and the evidence (docs/reliability.md).

    The action text reached the code that raised, so an exception is the agent's
    (``agent_error``, reward 0, trained on) unless it is an :class:`InfraError`, which carries
    positive evidence of an infrastructure failure (``infra_fault``, masked and retried).
    Otherwise an agent could escape its reward by making its environment raise.
    """
    text = repr(err)
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + f"...[{len(text) - MAX_ERROR_CHARS} chars cut]"
    if isinstance(err, InfraError):
        why = f"infra: {type(err).__name__} raised with infrastructure evidence"
        return Label.INFRA_FAULT, {**err.evidence, "env_error": text, "attribution": why}
    why = "agent_input: the environment raised on the agent's action"
    return Label.AGENT_ERROR, {"env_error": text, "attribution": why}


def truncate_observation(text: str, max_chars: int) -> tuple[str, dict[str, Any]]:
    """Keeps the first and last halves of an over-long observation; records what was cut."""
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    if len(text) <= max_chars:
        return text, {"truncated": False, "chars": len(text)}
    marker = "\n...[truncated]...\n"
    keep = max(max_chars - len(marker), 2)
    head, tail = keep // 2, keep - keep // 2
    cut = text[:head] + marker + text[len(text) - tail :]
    return cut, {"truncated": True, "chars": len(text), "kept_head": head, "kept_tail": tail}


class Env(Protocol):
    """A host-side, multi-turn environment. The verifier is a separate object the agent cannot reach."""

    def reset(self, task: Any, seed: int) -> str:
        """Starts an episode on ``task`` and returns the first observation."""

    def step(self, action_text: str) -> StepResult:
        """Executes one tool call. The final step carries the verifier's ``Verdict``."""
