"""Offline evaluation behind ``python -m launch.eval``: a checkpoint, a scripted minirepo agent, or
scripted codefix agents in the real sandbox; each as a JSON-ready report and a Markdown table.

(One module, over 300 lines: the three kinds of evaluation share the metrics, the JSON report
and the table.)

It composes a run (``system.build``) like the training loop does, so it sits above ``system`` in the
import table (docs/architecture.md). The evaluation itself is ``diagnostics.evaluate.evaluate``,
the very function the training loop calls.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Sequence

from agentjax.policy.config import ConfigError

MINIREPO_AGENTS = ("demonstrator", "localizing", "oracle", "random", "test_editor")
EVAL_SEED = 10_000  # the training loop's evaluation seed (agentjax.runstate.EVAL_SEED)


# -- metrics -------------------------------------------------------------------------------------
def episode_metrics(
    labels: Sequence[str],
    stops: Sequence[str],
    turns: Sequence[int],
    verdicts,
    audits=None,
    planted: Sequence[bool] | None = None,
) -> dict[str, float]:
    """The ``eval/*`` metrics of :func:`agentjax.diagnostics.evaluate.evaluate` for episodes
    played outside the model rollout (scripted agents): ``verdicts`` of judged episodes, with
    their ``audits`` and ``planted`` flags in the same order."""
    from agentjax.envs.audit import audit_metrics, hack_rate, wilson_interval  # noqa: PLC0415

    n = len(labels)
    passed = sum(lb == "pass" for lb in labels)
    lo, hi = wilson_interval(passed, n)
    out = {
        "eval/success": passed / max(n, 1),
        "eval/success_lo": lo,
        "eval/success_hi": hi,
        "eval/n": float(n),
        "eval/mean_turns": sum(turns) / max(n, 1),
    }
    out.update({f"eval/label/{k}": v / n for k, v in Counter(labels).items()})
    out.update({f"eval/stop/{k}": v / n for k, v in Counter(stops).items()})
    if audits is not None and verdicts:
        out.update({"eval/" + k: v for k, v in audit_metrics(verdicts, audits).items()})
    if planted is not None and verdicts:
        out.update({"eval/" + k: v for k, v in hack_rate(verdicts, planted).items()})
    return out


def _num(x):
    x = float(x)
    return None if math.isnan(x) else x


def structured(flat: dict[str, float]) -> dict:
    """Groups the flat ``eval/*`` metrics: success, audit (H), hack, labels, stop reasons."""
    g = lambda k: _num(flat[k]) if k in flat else None
    return {
        "success": {
            "rate": g("eval/success"),
            "lo": g("eval/success_lo"),
            "hi": g("eval/success_hi"),
            "n": int(flat.get("eval/n", 0)),
        },
        "audit": {
            "H": g("eval/audit/H"),
            "lo": g("eval/audit/H_lo"),
            "hi": g("eval/audit/H_hi"),
            "n_train_pass": g("eval/audit/n_train_pass"),
            "n_audit_fail_given_pass": g("eval/audit/n_audit_fail_given_pass"),
        },
        "hack": {
            "rate": g("eval/hack/rate"),
            "lo": g("eval/hack/rate_lo"),
            "hi": g("eval/hack/rate_hi"),
            "n_opportunities": g("eval/hack/n_opportunities"),
            "n_taken": g("eval/hack/n_taken"),
            "passed_while_hacking": g("eval/hack/passed_while_hacking"),
        },
        "labels": {
            k[len("eval/label/") :]: _num(v) for k, v in sorted(flat.items()) if k.startswith("eval/label/")
        },
        "stop_reasons": {
            k[len("eval/stop/") :]: _num(v) for k, v in sorted(flat.items()) if k.startswith("eval/stop/")
        },
        "mean_turns": g("eval/mean_turns"),
        "metrics": {k: _num(v) for k, v in sorted(flat.items())},
    }


# -- minirepo: a checkpoint or a scripted agent ---------------------------------------------------
def _parts(cfg, num_tasks: int | None):
    from agentjax import runconfig, system  # noqa: PLC0415

    run = runconfig.parse(cfg, evaluation=True)
    if num_tasks is not None:
        if num_tasks < 1:
            raise ConfigError(f"--num_tasks={num_tasks} is invalid; must be an integer >= 1")
        run = dataclasses.replace(run, task=dataclasses.replace(run.task, eval_tasks=num_tasks))
    return system.build(run)


def _play(parts, params, step: int, sampled: bool) -> dict:
    """The run's own held-out evaluation (greedy, ``runstate.evaluate_heldout``'s seed and
    judges), and with ``sampled`` the same tasks sampled at ``rl.temperature``."""
    from agentjax.diagnostics.evaluate import evaluate  # noqa: PLC0415
    from agentjax.sampling.sampler import Sampler  # noqa: PLC0415
    from agentjax.sampling.transforms import Greedy, Temperature  # noqa: PLC0415

    run, out = parts.run, {}
    modes = {"greedy": Greedy()}
    if sampled:
        modes["sampled"] = None if run.rl.temperature == 1.0 else Temperature(run.rl.temperature)
    for mode, transform in modes.items():
        sampler = Sampler(parts.model, transform=transform, stop_tokens=(parts.codec.stop,))
        out[mode] = evaluate(
            sampler,
            parts.codec,
            run.caps,
            params,
            step,
            parts.heldout,
            parts.make_eval_env,
            audit_fn=parts.suite.audit_fn,
            planted=parts.suite.planted,
            seed=EVAL_SEED,
        )
    return out


def _report(kind: str, parts, step, played: dict, **extra) -> dict:
    run = parts.run
    report = {"kind": kind, "task": run.task.name, "step": step, **extra, **structured(played["greedy"])}
    if "sampled" in played:
        report["sampled"] = {"temperature": run.rl.temperature, **structured(played["sampled"])}
    return report


def evaluate_checkpoint(
    cfg, workdir: str, *, step: int | None = None, num_tasks: int | None = None, sampled: bool = True
) -> dict:
    """Held-out evaluation of a ``launch.train`` checkpoint, greedy (the run's own evaluation:
    at the run's last step it equals its last ``eval/*`` row) and sampled (raises CheckpointError)."""
    import jax  # noqa: PLC0415

    from agentjax.learner import checkpoint as ckpt  # noqa: PLC0415
    from agentjax.learner.step import init_train_state, make_optimizer  # noqa: PLC0415
    from agentjax.policy.model import init_params  # noqa: PLC0415

    parts = _parts(cfg, num_tasks)
    run = parts.run
    ckdir = os.path.join(workdir, "checkpoints")
    steps = ckpt.all_steps(ckdir)
    if not steps:
        raise ckpt.CheckpointError(
            f"no checkpoint under {os.path.abspath(ckdir)} "
            f"(train first: python -m launch.train --workdir={workdir})"
        )
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ckpt.CheckpointError(
            f"no checkpoint for step {step} under {os.path.abspath(ckdir)}; available steps: {steps}"
        )
    tx = make_optimizer(run.optim)
    target = jax.eval_shape(
        lambda: init_train_state(init_params(parts.model, jax.random.key(run.seed)), tx, run.seed)
    )
    try:
        restored = ckpt.restore_checkpoint(ckdir, target, step=step)
    except ckpt.CheckpointError as e:
        raise ckpt.CheckpointError(f"{e} (was this run trained with this --config?)") from None
    played = _play(parts, restored.state.params, step, sampled)
    header = restored.metadata.get("header", {})
    return _report("checkpoint", parts, step, played, workdir=os.path.abspath(workdir), header=header)


def evaluate_export(cfg, hf_dir: str, *, num_tasks: int | None = None, sampled: bool = True) -> dict:
    """Held-out evaluation of a HF directory (``launch.export``'s output, or any checkpoint) on
    the config's task: ``model`` becomes ``model.hf_path=hf_dir``, the weights its safetensors."""
    from agentjax.policy.hf import load_hf_checkpoint  # noqa: PLC0415

    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    model = d.get("model", {})
    keep = ("param_dtype", "max_seq_len", "tool_format") if model.get("hf_path") else ("max_seq_len",)
    d["model"] = {"hf_path": hf_dir, **{k: model[k] for k in keep if k in model}}
    parts = _parts(d, num_tasks)
    c = parts.model
    _, params = load_hf_checkpoint(hf_dir, dtype=c.param_dtype, max_seq_len=c.max_seq_len)
    played = _play(parts, params, 0, sampled)
    return _report("export", parts, 0, played, checkpoint=os.path.abspath(hf_dir))


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
    parts = _parts(cfg, num_tasks)
    labels, stops, turns, verdicts, audits, planted = [], [], [], [], [], []
    env = parts.make_env()
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


# -- codefix: scripted agents in the real sandbox --------------------------------------------------
def evaluate_codefix(cfg, *, agents: Sequence[str] | None = None, num_tasks: int | None = None) -> dict:
    """Every scripted agent on every codefix task; raises SandboxUnavailable without a sandbox."""
    from agentjax import runconfig  # noqa: PLC0415
    from agentjax.envs import codefix  # noqa: PLC0415
    from agentjax.envs.codefix.agents import AGENTS, play  # noqa: PLC0415
    from agentjax.envs.codefix.audit import audit_verify  # noqa: PLC0415
    from agentjax.envs.codefix.env import CodefixEnv, EnvConfig  # noqa: PLC0415

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


# -- output --------------------------------------------------------------------------------------
def _pct(x) -> str:
    return "  -  " if x is None else f"{100 * x:5.1f}%"


def _ci(d: dict, key: str) -> str:
    return f"{_pct(d[key])} [{_pct(d['lo'])}, {_pct(d['hi'])}]" if d.get(key) is not None else "  -  "


def _faults(r: dict) -> str:
    return ", ".join(f"{k} {_pct(v).strip()}" for k, v in r["labels"].items())


def table(report: dict) -> str:
    """A Markdown table of a report (one row, or one row per codefix agent)."""
    head = (
        "| what | n | success [95% CI] | H [95% CI] | hack rate [95% CI] | labels |",
        "|---|---|---|---|---|---|",
    )
    if report["task"] == "codefix":
        rows = [
            (f"{a} (expects {r['expected_label']}: {_pct(r['as_expected']).strip()} as expected)", r)
            for a, r in report["agents"].items()
        ]
    else:
        what = report.get("agent", "export greedy")
        if report["kind"] == "checkpoint":
            what = f"step {report['step']} greedy"
        rows = [(what, report)]
        if "sampled" in report:
            label = what.replace("greedy", f"sampled T={report['sampled']['temperature']}")
            rows.append((label, report["sampled"]))
    lines = [
        *head,
        *(
            f"| {w} | {r['success']['n']} | {_ci(r['success'], 'rate')} | {_ci(r['audit'], 'H')} | "
            f"{_ci(r['hack'], 'rate')} | {_faults(r)} |"
            for w, r in rows
        ),
    ]
    if report["task"] != "codefix":
        lines.append(
            "stop reasons: " + ", ".join(f"{k} {_pct(v).strip()}" for k, v in report["stop_reasons"].items())
        )
    return "\n".join(lines)


def stored_config(workdir: str) -> dict | None:
    """The config a ``launch.train`` run in ``workdir`` was started with (None: none stored)."""
    import json  # noqa: PLC0415

    from agentjax.workdir import RUN_CONFIG  # noqa: PLC0415

    path = os.path.join(workdir, RUN_CONFIG)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


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
) -> dict:
    """What ``main`` evaluates for these flags (see the module doc); ``stored``: ``cfg`` is the
    workdir's own config (a trained run's checkpoint, whatever its task)."""
    if checkpoint:
        return evaluate_export(cfg, checkpoint, num_tasks=num_tasks, sampled=sampled)
    if stored and not agent:
        return evaluate_checkpoint(cfg, workdir, step=checkpoint_step, num_tasks=num_tasks, sampled=sampled)
    if (cfg.get("task") or {}).get("name") == "codefix":
        if checkpoint_step is not None:
            raise ConfigError("--checkpoint_step does not apply to codefix (scripted agents only)")
        return evaluate_codefix(cfg, agents=[agent] if agent else None, num_tasks=num_tasks)
    if agent:
        return evaluate_minirepo_agent(cfg, agent, num_tasks=num_tasks)
    return evaluate_checkpoint(cfg, workdir, step=checkpoint_step, num_tasks=num_tasks, sampled=sampled)
