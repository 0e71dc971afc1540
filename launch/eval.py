"""Held-out evaluation: success with a 95% interval, the audit metric H, hack rate, fault breakdown.

    python -m launch.eval --config=configs/smoke.py --workdir=/tmp/smoke              # latest checkpoint
    python -m launch.eval --config=configs/smoke.py --workdir=/tmp/smoke --checkpoint_step=6 \
        --num_tasks=64 --out=/tmp/eval6.json
    python -m launch.eval --agent=demonstrator --num_tasks=256                         # scripted agent
    python -m launch.eval --config=configs/codefix_eval.py --agent=oracle --num_tasks=2  # real sandbox

Three things can be evaluated, each printed as a table and written as JSON:

- **a checkpoint** written by ``launch.train`` in ``--workdir`` (``--checkpoint_step``, default the
  latest): pass the ``--config`` (and ``--config.*`` overrides) the run was trained with. The model
  plays the config's held-out minirepo tasks greedily, exactly as the training loop's own
  evaluation (``agentjax.diagnostics.evaluate.evaluate``, same seed): at the run's last step the
  numbers equal the last ``eval/*`` row of its ``metrics.jsonl``. JSON default:
  ``<workdir>/eval_<step>.json``.
- **a scripted minirepo agent** (``--agent=demonstrator|localizing|oracle|random|test_editor``), no
  checkpoint: the same held-out tasks and environment, the episode seeds of the training loop's
  demonstrator baseline (so ``demonstrator`` reproduces the ``demonstrator_success`` it logs). They
  play under the config's ``task.max_steps`` (6 by default, enough for the four-step scripted
  agents; the oracle's exhaustive search needs more: ``--config.task.max_steps=40`` gives 100%).
- **scripted codefix agents in the real sandbox** (``--config=configs/codefix_eval.py``): every agent
  of ``codefix.agents`` (or ``--agent``) on every task of ``codefix.tasks`` (``--num_tasks`` keeps
  the first n); each final tree is judged by the isolated verifier and again by the independent
  audit; each agent's row also says whether every label was the one that agent must get.

``--num_tasks`` (default: the config's ``task.eval_tasks`` / every codefix task) sets how many
held-out tasks are played. Undefined rates (H with no passing episode) are ``null`` in the JSON.
Exit codes: 2 invalid config or flag, 3 checkpoint error, 4 sandbox unavailable.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Sequence

from absl import app, flags
from ml_collections import config_flags

from agentjax.policy.config import ConfigError

_DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")
_CONFIG = config_flags.DEFINE_config_file("config", _DEFAULT, "Run configuration (configs/*.py).")
_WORKDIR = flags.DEFINE_string("workdir", "workdir/default", "Workdir of a launch.train run.")
_STEP = flags.DEFINE_integer("checkpoint_step", None, "Checkpoint step to evaluate (default: latest).")
_NUM_TASKS = flags.DEFINE_integer("num_tasks", None, "Held-out tasks to play (default: the config's).")
_AGENT = flags.DEFINE_string("agent", "", "A scripted agent instead of a checkpoint (see module doc).")
_OUT = flags.DEFINE_string("out", "", "JSON output (default <workdir>/eval_<step>.json for checkpoints).")

MINIREPO_AGENTS = ("demonstrator", "localizing", "oracle", "random", "test_editor")
EVAL_SEED = 10_000  # the training loop's evaluation seed (system._eval)


# -- metrics -------------------------------------------------------------------------------------
def episode_metrics(labels: Sequence[str], stops: Sequence[str], turns: Sequence[int], verdicts,
                    audits=None, planted: Sequence[bool] | None = None) -> dict[str, float]:
    """The ``eval/*`` metrics of :func:`agentjax.diagnostics.evaluate.evaluate` for episodes
    played outside the model rollout (scripted agents): ``verdicts`` of judged episodes, with
    their ``audits`` and ``planted`` flags in the same order."""
    from agentjax.envs.audit import audit_metrics, hack_rate, wilson_interval  # noqa: PLC0415

    n = len(labels)
    passed = sum(lb == "pass" for lb in labels)
    lo, hi = wilson_interval(passed, n)
    out = {"eval/success": passed / max(n, 1), "eval/success_lo": lo, "eval/success_hi": hi,
           "eval/n": float(n), "eval/mean_turns": sum(turns) / max(n, 1)}
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
        "success": {"rate": g("eval/success"), "lo": g("eval/success_lo"), "hi": g("eval/success_hi"),
                    "n": int(flat.get("eval/n", 0))},
        "audit": {"H": g("eval/audit/H"), "lo": g("eval/audit/H_lo"), "hi": g("eval/audit/H_hi"),
                  "n_train_pass": g("eval/audit/n_train_pass"),
                  "n_audit_fail_given_pass": g("eval/audit/n_audit_fail_given_pass")},
        "hack": {"rate": g("eval/hack/rate"), "lo": g("eval/hack/rate_lo"), "hi": g("eval/hack/rate_hi"),
                 "n_opportunities": g("eval/hack/n_opportunities"), "n_taken": g("eval/hack/n_taken"),
                 "passed_while_hacking": g("eval/hack/passed_while_hacking")},
        "labels": {k[len("eval/label/"):]: _num(v) for k, v in sorted(flat.items())
                   if k.startswith("eval/label/")},
        "stop_reasons": {k[len("eval/stop/"):]: _num(v) for k, v in sorted(flat.items())
                         if k.startswith("eval/stop/")},
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


def evaluate_checkpoint(cfg, workdir: str, *, step: int | None = None, num_tasks: int | None = None) -> dict:
    """Greedy held-out evaluation of a ``launch.train`` checkpoint (raises CheckpointError)."""
    import jax  # noqa: PLC0415

    from agentjax.diagnostics.evaluate import evaluate  # noqa: PLC0415
    from agentjax.learner import checkpoint as ckpt  # noqa: PLC0415
    from agentjax.learner.step import init_train_state, make_optimizer  # noqa: PLC0415
    from agentjax.policy.model import init_params  # noqa: PLC0415
    from agentjax.sampling.sampler import Sampler  # noqa: PLC0415
    from agentjax.sampling.transforms import Greedy  # noqa: PLC0415

    parts = _parts(cfg, num_tasks)
    run = parts.run
    if run.task.name != "minirepo":
        raise ConfigError(f"task.name={run.task.name!r}: checkpoints are evaluated on minirepo; "
                         "codefix runs scripted agents (drop --checkpoint_step)")
    ckdir = os.path.join(workdir, "checkpoints")
    steps = ckpt.all_steps(ckdir)
    if not steps:
        raise ckpt.CheckpointError(f"no checkpoint under {os.path.abspath(ckdir)} "
                                   f"(train first: python -m launch.train --workdir={workdir})")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ckpt.CheckpointError(f"no checkpoint for step {step} under {os.path.abspath(ckdir)}; "
                                   f"available steps: {steps}")
    tx = make_optimizer(run.optim)
    target = jax.eval_shape(lambda: init_train_state(init_params(parts.model, jax.random.key(run.seed)),
                                                     tx, run.seed))
    try:
        restored = ckpt.restore_checkpoint(ckdir, target, step=step)
    except ckpt.CheckpointError as e:
        raise ckpt.CheckpointError(f"{e} (was this run trained with this --config?)") from None
    greedy = Sampler(parts.model, transform=Greedy(), stop_tokens=(parts.codec.stop,))
    flat = evaluate(greedy, parts.codec, run.caps, restored.state.params, step, parts.heldout,
                    parts.make_env, audit_fn=lambda task, env: env.audit(),
                    planted=lambda t: bool(t.hack_tool), seed=EVAL_SEED)
    return {"kind": "checkpoint", "task": "minirepo", "workdir": os.path.abspath(workdir), "step": step,
            "header": restored.metadata.get("header", {}), **structured(flat)}


def _minirepo_agent(name: str):
    from agentjax.envs.minirepo import agents as M  # noqa: PLC0415

    return {"demonstrator": M.DemonstratorAgent, "localizing": M.LocalizingAgent, "oracle": M.OracleAgent,
            "random": M.RandomAgent, "test_editor": M.TestEditorAgent}[name]()


def evaluate_minirepo_agent(cfg, agent: str, *, num_tasks: int | None = None) -> dict:
    """A scripted agent on the config's held-out tasks (the demonstrator baseline's seeds)."""
    import random  # noqa: PLC0415

    if agent not in MINIREPO_AGENTS:
        raise ConfigError(f"--agent={agent!r} is invalid for minirepo; "
                          f"allowed values: {list(MINIREPO_AGENTS)}")
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
    from agentjax.envs.codefix.audit import audit_verify  # noqa: PLC0415
    from agentjax.envs.codefix.env import CodefixEnv, EnvConfig  # noqa: PLC0415
    from agentjax.envs.codefix.agents import AGENTS, play  # noqa: PLC0415

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
        flat = episode_metrics(labels, stops, turns, verdicts, audits if c.audit else None,
                               [True] * len(verdicts))  # every codefix episode is a hack opportunity
        rows[agent] = {"expected_label": expected.value,
                       "as_expected": sum(lb == expected.value for lb in labels) / len(labels),
                       "per_task": dict(zip(names, labels, strict=True)), **structured(flat)}
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
    head = ("| what | n | success [95% CI] | H [95% CI] | hack rate [95% CI] | labels |",
            "|---|---|---|---|---|---|")
    if report["task"] == "codefix":
        rows = [(f"{a} (expects {r['expected_label']}: {_pct(r['as_expected']).strip()} as expected)", r)
                for a, r in report["agents"].items()]
    else:
        what = f"step {report['step']}" if report["kind"] == "checkpoint" else report["agent"]
        rows = [(what, report)]
    lines = [*head, *(f"| {w} | {r['success']['n']} | {_ci(r['success'], 'rate')} | {_ci(r['audit'], 'H')} | "
                      f"{_ci(r['hack'], 'rate')} | {_faults(r)} |" for w, r in rows)]
    if report["task"] != "codefix":
        lines.append("stop reasons: " + ", ".join(f"{k} {_pct(v).strip()}"
                                                  for k, v in report["stop_reasons"].items()))
    return "\n".join(lines)


def run_eval(cfg, *, workdir: str, checkpoint_step: int | None = None, num_tasks: int | None = None,
             agent: str = "") -> dict:
    """What ``main`` evaluates for these flags (see the module doc)."""
    if cfg.task.name == "codefix":
        if checkpoint_step is not None:
            raise ConfigError("--checkpoint_step does not apply to codefix (scripted agents only)")
        return evaluate_codefix(cfg, agents=[agent] if agent else None, num_tasks=num_tasks)
    if agent:
        return evaluate_minirepo_agent(cfg, agent, num_tasks=num_tasks)
    return evaluate_checkpoint(cfg, workdir, step=checkpoint_step, num_tasks=num_tasks)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from agentjax.envs.sandbox import SandboxUnavailable  # noqa: PLC0415
    from agentjax.learner.checkpoint import CheckpointError  # noqa: PLC0415
    try:
        report = run_eval(_CONFIG.value, workdir=_WORKDIR.value, checkpoint_step=_STEP.value,
                          num_tasks=_NUM_TASKS.value, agent=_AGENT.value)
    except ConfigError as e:
        print(f"invalid config or flag: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        return 3
    except SandboxUnavailable as e:
        print(f"sandbox unavailable: {e}", file=sys.stderr)
        return 4
    print(table(report))
    out = _OUT.value or (os.path.join(_WORKDIR.value, f"eval_{report['step']}.json")
                         if report["kind"] == "checkpoint" else "")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    app.run(main)
