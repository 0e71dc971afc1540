"""The run report: ``report/report.md`` plus matplotlib PNGs from a workdir's outputs.

Reads ``metrics.jsonl`` (header row, training rows, held-out eval rows) and ``summary.json``
(scheduler summary, weight sync, cost ledger) written by ``agentjax.run.loop.train`` and draws
the eight problems' diagnostics: reward and held-out success, verdict labels over time, the
version-gap histogram, ESS, delta statistics (``delta_t = log pi_train - log mu_infer``, seen
in training as the ratio ``r_t = exp(delta_t)`` on fresh batches), masked fractions by reason,
admitted share per task class and the cost ledger
``C = generation + environment + verification + training + retry/waste``; it shows a few of the
final evaluation's episodes as text ("Sample episodes", ``eval/samples`` of its metrics row) and
checks the learning targets the run declares (its config's ``targets``, stored in
``run_config.json``; a run without them gets no such check). Every section works
on whatever is present and says what is missing instead of failing (a run still in progress has
no ``summary.json``; a run before its first step has no training rows).
"""

from __future__ import annotations

import os

from agentjax.report.common import declared_targets, label_group, load
from agentjax.report.outcome import curves, episodes, headline, labels
from agentjax.report.systems import classes, cost, delta, masked, staleness

__all__ = ["declared_targets", "label_group", "load", "write_report"]


def write_report(workdir: str, targets: dict | None = None) -> str:
    """Writes ``<workdir>/report/report.md`` and its PNGs; returns the markdown's path.

    ``targets``: the learning targets the run declares (its config's ``targets``), checked in the
    headline; None reads them from the workdir's ``run_config.json``; none: no such check."""
    out = os.path.join(workdir, "report")
    os.makedirs(out, exist_ok=True)
    run = load(workdir, targets)
    body = [
        headline(run),
        curves(run, out),
        labels(run, out),
        episodes(run),
        staleness(run, out),
        delta(run, out, workdir),
        masked(run, out),
        classes(run, out),
        cost(run, out),
    ]
    notes = [f"> note: {n}" for n in run["notes"]]
    text = "\n".join(
        [f"# agentjax run report: `{os.path.abspath(workdir)}`", "", *notes, ""]
        + ["\n".join(s) + "\n" for s in body]
    )
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write(text)
    return path
