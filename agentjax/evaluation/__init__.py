"""Offline evaluation behind ``python -m launch.eval``: a checkpoint, a scripted minirepo agent, or
scripted codefix agents in the real sandbox; each as a JSON-ready report and a Markdown table.

It composes a run (``system.build``) like the training loop does, so it sits above ``system`` in the
import table (docs/architecture.md). The evaluation itself is ``diagnostics.evaluate.evaluate``,
the very function the training loop calls.
"""

from __future__ import annotations

from agentjax.evaluation.checkpoint import evaluate_checkpoint, evaluate_export, stored_config
from agentjax.evaluation.common import episode_metrics, run_parts, structured, table
from agentjax.evaluation.scripted import MINIREPO_AGENTS, evaluate_codefix, evaluate_minirepo_agent
from agentjax.policy.config import ConfigError
from agentjax.run.build import EVAL_SEED


def run_eval(
    cfg,
    *,
    workdir: str,
    checkpoint_step: int | None = None,
    num_tasks: int | None = None,
    agent: str = "",
    checkpoint: str = "",
    sampled: bool = True,
    stored: bool = False,
    workdir_given: bool = False,
) -> dict:
    """What ``main`` evaluates for these flags (see the module doc); ``stored``: ``cfg`` is the
    workdir's own config (a trained run's checkpoint, whatever its task); ``workdir_given``: the
    user named ``--workdir``, so a codefix config evaluates its checkpoint under ``cfg`` (e.g.
    another split) rather than the scripted agents."""
    if checkpoint:
        return evaluate_export(cfg, checkpoint, num_tasks=num_tasks, sampled=sampled)
    if (stored or workdir_given) and not agent:
        return evaluate_checkpoint(cfg, workdir, step=checkpoint_step, num_tasks=num_tasks, sampled=sampled)
    if (cfg.get("task") or {}).get("name") == "codefix":
        if checkpoint_step is not None:
            raise ConfigError("--checkpoint_step does not apply to codefix (scripted agents only)")
        return evaluate_codefix(cfg, agents=[agent] if agent else None, num_tasks=num_tasks)
    if agent:
        return evaluate_minirepo_agent(cfg, agent, num_tasks=num_tasks)
    return evaluate_checkpoint(cfg, workdir, step=checkpoint_step, num_tasks=num_tasks, sampled=sampled)


__all__ = [
    "EVAL_SEED",
    "MINIREPO_AGENTS",
    "episode_metrics",
    "evaluate_checkpoint",
    "evaluate_codefix",
    "evaluate_export",
    "evaluate_minirepo_agent",
    "run_eval",
    "run_parts",
    "stored_config",
    "structured",
    "table",
]
