"""Shared pieces of the run report: loading a workdir, label groups, formatting, figures."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from agentjax import rundefaults

try:
    from matplotlib.figure import Figure  # no pyplot: no global backend state, no display
    from matplotlib.ticker import MaxNLocator
except ImportError:  # the tables still come out, with a note in place of each plot
    Figure = MaxNLocator = None

GROUPS = ("pass", "fail", "hack", "agent", "infra", "other")
COLORS = {
    "pass": "tab:green",
    "fail": "tab:red",
    "hack": "tab:purple",
    "agent": "tab:orange",
    "infra": "tab:gray",
    "other": "tab:brown",
}
RUN_CONFIG = "run_config.json"  # the config a run started with (agentjax.workdir.write_run_config)


def eval_set(header: dict) -> str:
    """What a run's evaluation plays, from its header: "held-out", or the suite's ``eval_set``
    (an older run's header has none)."""
    return header.get("eval_set") or "held-out"


def label_group(label: str) -> str:
    """Verdict label -> pass / fail / hack / agent (timeout, OOM, CPU, error) / infra / other."""
    label = str(label).lower()
    if label in ("pass", "fail"):
        return label
    if "hack" in label:
        return "hack"
    return "agent" if label.startswith("agent") else "infra" if label.startswith("infra") else "other"


def declared_targets(targets) -> dict[str, float]:
    """The learning targets of a config's ``targets`` (``rundefaults.TARGET_NAMES`` -> bar) that
    are known and numeric, in the names' order; ``{}`` for none (``runconfig.parse`` checks them)."""
    if not isinstance(targets, dict):
        return {}
    return {
        k: float(targets[k])
        for k in rundefaults.TARGET_NAMES
        if isinstance(targets.get(k), int | float) and not isinstance(targets.get(k), bool)
    }


def _stored_targets(workdir: str, notes: list[str]) -> dict[str, float]:
    path = os.path.join(workdir, RUN_CONFIG)
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return declared_targets(json.load(f).get("targets"))
    except (OSError, json.JSONDecodeError, AttributeError):
        notes.append(f"{RUN_CONFIG} is unreadable: no learning targets checked")
        return {}


def load(workdir: str, targets: dict | None = None) -> dict[str, Any]:
    """Header, training rows, eval rows, summary, the learning targets the run declares (given,
    else its stored config's ``targets``) and notes on anything missing or unreadable."""
    run: dict[str, Any] = {"header": {}, "train": [], "evals": [], "summary": {}, "notes": []}
    run["targets"] = (
        declared_targets(targets) if targets is not None else _stored_targets(workdir, run["notes"])
    )
    path = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            lines = f.readlines()
        for i, line in enumerate(lines):
            try:
                row = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                run["notes"].append(f"metrics.jsonl line {i + 1} is not JSON (skipped: interrupted write?)")
                continue
            if row is None:
                continue
            run["header"] = row.get("header", run["header"])
            if "eval/success" in row:
                run["evals"].append(row)
            if "loss/total" in row:
                run["train"].append(row)
    else:
        run["notes"].append("no metrics.jsonl in the workdir")
    spath = os.path.join(workdir, "summary.json")
    if os.path.exists(spath):
        with open(spath) as f:
            run["summary"] = json.load(f)
        run["header"] = run["summary"].get("header") or run["header"]
    else:
        run["notes"].append(
            "no summary.json (run still in progress or interrupted): scheduler, "
            "class-share and cost sections are partial"
        )
    return run


def _f(x, nd: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _pct(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _series(rows: list[dict], key: str) -> tuple[list, list]:
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


class _NoPlot:
    """Stands in for a figure, its axes and every call on them when matplotlib is missing."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __getitem__(self, i):
        return self

    def __iter__(self):
        return iter((self, self))


def _figure(width: float, height: float = 3.4):
    return Figure(figsize=(width, height)) if Figure is not None else _NoPlot()


def _save(fig, out: str, name: str, left: float = 0.07) -> str:
    if isinstance(fig, _NoPlot):
        return f"_({name} not drawn: matplotlib is not installed)_"
    # Fixed margins: tight_layout draws every figure twice.
    fig.subplots_adjust(left=left, right=0.98, bottom=0.14, top=0.9, wspace=0.22)
    fig.savefig(os.path.join(out, name), dpi=90)
    return f"![{name[:-4]}]({name})"


def _steps(ax, **kw) -> None:
    ax.set(xlabel="step", **kw)
    if MaxNLocator is not None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _ratio_axis(ax) -> None:
    """A ratio axis whose ticks read: logarithmic when the plotted ratios span a decade, else
    linear without an offset (ratios within a decade of 1 on a log axis all read ``10^0``)."""
    if isinstance(ax, _NoPlot):
        return
    ys = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0 and math.isfinite(y)]
    if ys and max(ys) / min(ys) >= 10:
        ax.set_yscale("log")
    else:
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")


def _ledger(summary: dict) -> dict | None:
    return summary.get("cost_ledger") or summary.get("scheduler", {}).get("cost_ledger")
