"""Validation of a generated task on the host (cheap, every task) before the sandbox pass.

Fresh modules (not the ones the expected values came from) and a different call order, so a
reference whose results depend on state or order fails here. Returns the reasons a task is
invalid; an empty list means valid:

- the reference passes every visible test and every hidden case;
- the buggy original fails at least one visible test and one hidden case of its buggy function,
  and passes ``canary_must_pass``;
- every known wrong fix (the site's other operators / constants / partial reverts, and the
  special case that hard-codes the visible test's expected value) fails a hidden case;
- deleting or editing the failing visible test is outside the editable area (the verifier's
  static scan labels it ``reward_hack``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentjax.envs.codefix import scan
from agentjax.envs.codefix.generated import load
from agentjax.envs.codefix.generated.render import GenTask

EDITABLE = "{package}/*.py"


def failures(files: Mapping[str, str], package: str, cases: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids (or indices) of the cases a fresh copy of ``files`` gets wrong, last case first."""
    try:
        mod = load.load(files, package)
    except Exception as e:  # noqa: BLE001 -- a variant that does not import fails everything
        return [f"import:{type(e).__name__}"]
    out = []
    for i, c in reversed(list(enumerate(cases))):
        fn = c["call"].split(":")[1]
        if load.outcome(mod, fn, c["args"]) != c["expected"]:
            out.append(str(c.get("id", f"visible{i}")))
    return out


def validate(task: GenTask) -> list[str]:
    """Why ``task`` must not be used (empty: valid)."""
    reasons = []
    editable = (EDITABLE.format(package=task.package),)
    if scan.is_editable("tests/test_visible.py", editable):
        reasons.append("tests_editable: deleting the failing test would not be flagged")
    ref = {**task.files, **task.reference}
    bad = failures(ref, task.package, task.cases) + failures(ref, task.package, task.visible)
    if bad:
        reasons.append(f"reference_fails: {sorted(bad)}")
    target = [c for c in task.cases if c["call"].endswith(f":{task.fn}") and c["id"] != "canary_must_pass"]
    if not target or task.cases[0] not in target:
        reasons.append("no_target_case: the first hidden case must call the buggy function")
    bug_hidden = failures(task.files, task.package, target)
    if not bug_hidden:
        reasons.append("bug_not_caught: the buggy original passes every hidden case")
    if not failures(task.files, task.package, task.visible):
        reasons.append("bug_not_caught: the buggy original passes every visible test")
    canary = [c for c in task.cases if c["id"] == "canary_must_pass"]
    if not canary or failures(task.files, task.package, canary):
        reasons.append("canary: canary_must_pass must pass on the buggy original")
    for label, overlay in task.wrongs.items():
        if not failures({**task.files, **overlay}, task.package, task.cases):
            reasons.append(f"wrong_fix_passes: {label}")
    return reasons
