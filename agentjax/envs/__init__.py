"""Environments: the protocol every environment speaks, verdicts and labels, the sandbox, fault
attribution and injection, the noise curriculum, reward audits; the built-in ``minirepo`` and
``codefix`` tasks are subpackages."""

from agentjax.envs.audit import audit_metrics, hack_rate, wilson_interval
from agentjax.envs.curriculum import CurriculumState, NoiseCurriculum, noise_curriculum
from agentjax.envs.protocol import (
    Env,
    InfraError,
    Label,
    RewardRule,
    StepResult,
    ToolCall,
    ToolCallError,
    Treatment,
    Verdict,
    attribute_step_error,
)
from agentjax.envs.sandbox import Isolation, Limits, Mount, SandboxResult, SandboxUnavailable, probe

__all__ = [
    "CurriculumState",
    "Env",
    "InfraError",
    "Isolation",
    "Label",
    "Limits",
    "Mount",
    "NoiseCurriculum",
    "RewardRule",
    "SandboxResult",
    "SandboxUnavailable",
    "StepResult",
    "ToolCall",
    "ToolCallError",
    "Treatment",
    "Verdict",
    "attribute_step_error",
    "audit_metrics",
    "hack_rate",
    "noise_curriculum",
    "probe",
    "wilson_interval",
]
