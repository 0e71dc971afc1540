"""What every kind of offline evaluation shares: the ``eval/*`` metrics of scripted episodes, the
JSON report's structure, the run's parts, and the Markdown table."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

from agentjax.diagnostics.episodes import KEY as SAMPLES_KEY
from agentjax.policy.config import ConfigError


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


def structured(flat: dict) -> dict:
    """Groups the flat ``eval/*`` metrics: success, audit (H), hack, labels, stop reasons; the
    numbers as ``metrics``, and an evaluation's sample episodes (``eval/samples``, rendered text
    with verdicts) as ``samples`` where it has them."""
    samples = flat.get(SAMPLES_KEY)
    flat = {k: v for k, v in flat.items() if k != SAMPLES_KEY}
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
        **({"samples": samples} if samples is not None else {}),
    }


def run_parts(cfg, num_tasks: int | None):
    from agentjax.run import build as runbuild  # noqa: PLC0415
    from agentjax.run import config as runconfig  # noqa: PLC0415

    run = runconfig.parse(cfg, evaluation=True)
    if num_tasks is not None:
        if num_tasks < 1:
            raise ConfigError(f"--num_tasks={num_tasks} is invalid; must be an integer >= 1")
        run = dataclasses.replace(run, task=dataclasses.replace(run.task, eval_tasks=num_tasks))
    return runbuild.build(run)


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
    if "agents" in report:  # scripted codefix agents (a codefix checkpoint is one row, as any task's)
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
