"""Scripted agents, no checkpoint: minirepo's on the config's held-out tasks, codefix's in the real
sandbox."""

from __future__ import annotations

from collections.abc import Sequence

from agentjax.evaluation.common import episode_metrics, run_parts, structured
from agentjax.policy.config import ConfigError

MINIREPO_AGENTS = ("demonstrator", "localizing", "oracle", "random", "test_editor")


def _minirepo_agent(name: str):
    from agentjax.envs.minirepo import agents as M  # noqa: PLC0415

    return {
        "demonstrator": M.DemonstratorAgent,
        "localizing": M.LocalizingAgent,
        "oracle": M.OracleAgent,
        "random": M.RandomAgent,
        "test_editor": M.TestEditorAgent,
    }[name]()


def evaluate_minirepo_agent(cfg, agent: str, *, num_tasks: int | None = None) -> dict:
    """A scripted agent on the config's held-out tasks (the demonstrator baseline's seeds)."""
    import random  # noqa: PLC0415

    if agent not in MINIREPO_AGENTS:
        raise ConfigError(
            f"--agent={agent!r} is invalid for minirepo; allowed values: {list(MINIREPO_AGENTS)}"
        )
    parts = run_parts(cfg, num_tasks)
    labels, stops, turns, verdicts, audits, planted = [], [], [], [], [], []
    env = parts.make_eval_env()  # held-out tasks: never injected faults (as the run's baseline)
    for i, task in enumerate(parts.heldout):
        a, obs, final, n = _minirepo_agent(agent), env.reset(task, i), None, 0
        a.reset()
        rng = random.Random(f"agent:{i}")  # as agentjax.envs.minirepo.agents.run_episode
        while final is None or not final.done:
            final, n = env.step(a.act(obs, rng)), n + 1
            obs = final.observation
        turns.append(n)
        verdict = final.verdict
        labels.append(verdict.label.value)
        stops.append(str(final.stop_reason))
        verdicts.append(verdict)
        audits.append(env.audit())
        planted.append(bool(task.hack_tool))
    flat = episode_metrics(labels, stops, turns, verdicts, audits, planted)
    return {"kind": "scripted", "task": "minirepo", "agent": agent, **structured(flat)}


def evaluate_codefix(cfg, *, agents: Sequence[str] | None = None, num_tasks: int | None = None) -> dict:
    """Every scripted agent on every codefix task; raises SandboxUnavailable without a sandbox."""
    from agentjax.envs import codefix  # noqa: PLC0415
    from agentjax.envs.codefix.agents import AGENTS, play  # noqa: PLC0415
    from agentjax.envs.codefix.audit import audit_verify  # noqa: PLC0415
    from agentjax.envs.codefix.env import CodefixEnv, EnvConfig  # noqa: PLC0415
    from agentjax.run import config as runconfig  # noqa: PLC0415

    run = runconfig.parse(cfg, evaluation=True)
    c = run.codefix
    names = list(c.tasks or codefix.list_tasks())
    if num_tasks is not None:
        if num_tasks < 1:
            raise ConfigError(f"--num_tasks={num_tasks} is invalid; must be an integer >= 1")
        names = names[:num_tasks]
    agents = list(agents or c.agents)
    for a in agents:
        if a not in AGENTS:
            raise ConfigError(f"--agent={a!r} is invalid for codefix; allowed values: {sorted(AGENTS)}")
    rows = {}
    for agent in agents:
        fn, expected = AGENTS[agent]
        labels, stops, turns, verdicts, audits = [], [], [], [], []
        for i, name in enumerate(names):
            task = codefix.load_task(name)
            env = CodefixEnv(EnvConfig(inject=c.inject or None))
            try:
                observations, final = play(env, task, fn, seed=i)
                if c.audit:
                    audits.append(audit_verify(task, env.workspace))
            finally:
                env.close()
            labels.append(final.verdict.label.value)
            stops.append(str(final.stop_reason))
            turns.append(len(observations) - 1)
            verdicts.append(final.verdict)
        flat = episode_metrics(
            labels, stops, turns, verdicts, audits if c.audit else None, [True] * len(verdicts)
        )  # every codefix episode is a hack opportunity
        rows[agent] = {
            "expected_label": expected.value,
            "as_expected": sum(lb == expected.value for lb in labels) / len(labels),
            "per_task": dict(zip(names, labels, strict=True)),
            **structured(flat),
        }
    return {"kind": "scripted", "task": "codefix", "tasks": names, "inject": c.inject, "agents": rows}
