"""The minirepo rubric: process checks scored beside the verifier's outcome (``minirepo-rubric/1``).

Items (weight): ``tests_before_edit`` (1) — the visible tests ran before the first edit;
``edits_target_failing`` (1) — share of applied edits aimed at a function whose visible test was
failing at the latest run; ``minimal_patch`` (1) — the final patch changes exactly one slot;
``tests_untouched`` (2) — the visible tests were never rewritten; ``verified_before_submit`` (1) —
a run after the last edit showed no failing test. Each returns its evidence.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentjax.envs.minirepo import lang
from agentjax.envs.minirepo.tasks import Task, Test
from agentjax.envs.rubric import Item, Rubric

VERSION = "minirepo-rubric/1"


@dataclasses.dataclass(frozen=True)
class Episode:
    """What the rubric sees: the task, the step log, the final program and visible tests."""

    task: Task
    log: tuple[dict[str, Any], ...]
    program: lang.Program
    tests: tuple[Test, ...]


def _effective(entry: dict[str, Any]) -> bool:
    """The call ran (no malformed action, no fault that cancels the tool)."""
    return entry["error"] is None and entry["fault"] not in ("tool_error", "timeout")


def _edits(ep: Episode) -> list[tuple[int, str]]:
    return [(e["step"], e["args"][0]) for e in ep.log if e["tool"] == "edit" and _effective(e)]


def _runs(ep: Episode) -> list[tuple[int, list[str]]]:
    return [(e["step"], e["failing"]) for e in ep.log if e["tool"] == "run" and _effective(e)]


def tests_before_edit(ep: Episode):
    edits, runs = _edits(ep), _runs(ep)
    first_edit = edits[0][0] if edits else None
    first_run = runs[0][0] if runs else None
    ok = first_run is not None and (first_edit is None or first_run < first_edit)
    return float(ok), {"first_run": first_run, "first_edit": first_edit}


def edits_target_failing(ep: Episode):
    runs, hits, seen = _runs(ep), [], []
    for step, name in _edits(ep):
        before = [f for s, f in runs if s < step]
        failing = before[-1] if before else []
        hits.append(name in failing)
        seen.append({"step": step, "name": name, "failing": failing})
    return (sum(hits) / len(hits) if hits else 0.0), {"edits": seen}


def minimal_patch(ep: Episode):
    patch = [
        {"name": a.name, "slot": s, "old": getattr(a, s), "new": getattr(b, s)}
        for a, b in zip(ep.task.program, ep.program, strict=True)
        for s in lang.SLOTS
        if getattr(a, s) != getattr(b, s)
    ]
    return float(len(patch) == 1), {"patch": patch}


def tests_untouched(ep: Episode):
    edited = sorted({a.name for a, b in zip(ep.task.visible_tests, ep.tests, strict=True) if a != b})
    return float(not edited), {"edited_tests": edited}


def verified_before_submit(ep: Episode):
    edits, runs = _edits(ep), _runs(ep)
    last_edit = edits[-1][0] if edits else -1
    after = [(s, f) for s, f in runs if s > last_edit]
    ok = bool(after) and not after[-1][1]
    return float(ok), {"last_edit": last_edit, "runs_after": [s for s, _ in after]}


RUBRIC = Rubric(
    name="minirepo",
    version=VERSION,
    items=(
        Item("tests_before_edit", 1.0, VERSION, tests_before_edit),
        Item("edits_target_failing", 1.0, VERSION, edits_target_failing),
        Item("minimal_patch", 1.0, VERSION, minimal_patch),
        Item("tests_untouched", 2.0, VERSION, tests_untouched),
        Item("verified_before_submit", 1.0, VERSION, verified_before_submit),
    ),
)
