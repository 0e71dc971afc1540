"""Public API of the codefix environment: bundled tasks, validation at load, ``verify``.

Each bundled task (``tasks/<name>/``) is a tiny Python package with one bug: ``repo/`` (the pristine
repository with visible tests), ``reference/`` (the fix), ``wrong/`` (a plausible known-bad fix)
and ``task.json`` (description, editable globs, hidden cases with expected values).

``load_task`` validates a task before anyone trains on it, with the real sandbox: the buggy
original must fail (while ``canary_must_pass`` passes and the other canaries fail), the reference
must pass ``REFERENCE_RUNS`` times with different seeds (cases that flip are quarantined as flaky),
and the known-bad fix must fail. Results are cached on disk by task+tools fingerprint.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import traceback
from collections.abc import Mapping
from typing import Any

from agentjax.envs import faults, sandbox
from agentjax.envs.codefix import scan, verifier
from agentjax.envs.protocol import Label, Verdict

TASKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")
REFERENCE_RUNS = 3
DEFAULT_LIMITS = sandbox.Limits(wall_s=20.0, cpu_s=5)


class TaskInvalid(RuntimeError):
    """A bundled task failed validation (reference fails, bug not caught, canary misbehaves)."""


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    description: str
    package: str
    repo_dir: str
    editable: tuple[str, ...]
    reference: Mapping[str, str]
    wrong: Mapping[str, str]
    cases: tuple[Mapping[str, Any], ...]
    quarantined: frozenset[str]
    fingerprint: str
    validation: Mapping[str, Any]
    generated: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # family, split, patch...


_GENERATED: dict[str, Task] = {}  # generated tasks by name (agentjax.envs.codefix.generated.store)


def list_tasks() -> list[str]:
    return sorted(d for d in os.listdir(TASKS_DIR) if os.path.isfile(os.path.join(TASKS_DIR, d, "task.json")))


def _overlay(task_dir: str, kind: str) -> dict[str, str]:
    root = os.path.join(task_dir, kind)
    return {rel: data.decode() for rel, data in scan.editable_files(root, ["*"]).items()}


def _fingerprint(task_dir: str, extra: Mapping[str, Any]) -> str:
    files = [
        (os.path.relpath(os.path.join(d, n), task_dir), open(os.path.join(d, n), "rb").read())
        for d, _, ns in os.walk(task_dir)
        for n in ns
        if "__pycache__" not in d
    ]
    code = os.path.dirname(os.path.abspath(__file__))
    files += [
        (f"<verifier>/{n}", open(os.path.join(code, n), "rb").read())
        for n in ("verifier.py", "_runner.py", "scan.py", "api.py")
    ]
    return faults.env_fingerprint(
        files, faults.tool_versions(verifier.SANDBOX_PYTHON), {"verifier": verifier.VERIFIER_VERSION, **extra}
    )


def _cache_path(fp: str) -> str:
    root = os.environ.get("AGENTJAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentjax")
    return os.path.join(root, "codefix", f"{fp}.json")


def _bytes(m: Mapping[str, str]) -> dict[str, bytes]:
    return {k: v.encode() for k, v in m.items()}


def _check(task: Task, files: Mapping[str, bytes], seed: int, tries: int = 3) -> Verdict:
    """One validation run; an infra fault (e.g. a starved host) is retried, never believed."""
    for _ in range(tries):
        res, recs = verifier.run_tree(task.repo_dir, files, task.cases, seed=seed, limits=DEFAULT_LIMITS)
        v = verifier.decide(
            task.cases,
            res,
            recs,
            hack_flags=(),
            quarantined=frozenset(),
            limits=DEFAULT_LIMITS,
            env_fingerprint=task.fingerprint,
            nonce=verifier.new_nonce(),
        )
        if v.label is not Label.INFRA_FAULT:
            break
    return v


def validate(task: Task) -> dict[str, Any]:
    """Runs the validation protocol; returns ``{"quarantined": [...], ...}`` or raises TaskInvalid."""
    buggy = _check(task, {}, seed=0)
    ev = buggy.evidence
    if buggy.label is not Label.FAIL or "canary_must_pass" in ev["failed_cases"]:
        raise TaskInvalid(
            f"{task.name}: buggy original should fail on bug cases only: "
            f"{buggy.label} {ev['attribution']} failed={ev['failed_cases']}"
        )
    outcomes: dict[str, set[bool]] = {}
    for seed in range(REFERENCE_RUNS):
        ref = _check(task, _bytes(task.reference), seed=seed)
        if ref.label not in (Label.PASS, Label.FAIL) or ref.tests_run != ref.tests_expected:
            raise TaskInvalid(f"{task.name}: reference run {seed}: {ref.label} {ref.evidence['attribution']}")
        for c in task.cases:
            outcomes.setdefault(c["id"], set()).add(c["id"] not in ref.evidence["failed_cases"])
    flaky = sorted(k for k, o in outcomes.items() if len(o) > 1)
    broken = sorted(k for k, o in outcomes.items() if o == {False})
    if broken or "canary_must_pass" in flaky:
        raise TaskInvalid(f"{task.name}: reference fails {broken} (flaky: {flaky})")
    wrong = _check(task, _bytes(task.wrong), seed=0)
    if wrong.label is not Label.FAIL:
        raise TaskInvalid(f"{task.name}: known-bad fix should fail, got {wrong.label}")
    return {
        "quarantined": flaky,
        "buggy_failed": ev["failed_cases"],
        "wrong_failed": wrong.evidence["failed_cases"],
        "reference_runs": REFERENCE_RUNS,
    }


def _build(
    name: str,
    cases: tuple[Mapping[str, Any], ...] | None = None,
    tag: str = "",
    task_dir: str | None = None,
    validation: Mapping[str, Any] | None = None,
) -> Task:
    d = task_dir or (
        _GENERATED[name].generated["dir"] if name in _GENERATED else os.path.join(TASKS_DIR, name)
    )
    with open(os.path.join(d, "task.json")) as f:
        spec = json.load(f)
    cases = cases if cases is not None else tuple(spec["cases"])
    fp = _fingerprint(d, {"tag": tag, "cases": json.dumps(cases, sort_keys=True)})
    task = Task(
        name=name,
        description=spec["description"],
        package=spec["package"],
        repo_dir=os.path.join(d, "repo"),
        editable=tuple(spec["editable"]),
        reference=_overlay(d, "reference"),
        wrong=_overlay(d, "wrong"),
        cases=cases,
        quarantined=frozenset(),
        fingerprint=fp,
        validation={},
        generated={**spec["generated"], "dir": d} if "generated" in spec else {},
    )
    if validation is not None:  # validated by its generator (agentjax.envs.codefix.generated)
        return dataclasses.replace(task, validation=validation)
    path = _cache_path(fp)
    try:
        with open(path) as f:
            val = json.load(f)
    except (OSError, ValueError):
        val = validate(task)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"  # concurrent test workers may validate the same task
        with open(tmp, "w") as f:
            json.dump(val, f)
        os.replace(tmp, path)
    return dataclasses.replace(task, quarantined=frozenset(val["quarantined"]), validation=val)


@functools.lru_cache(maxsize=64)
def load_task(name: str) -> Task:
    """Loads and validates a bundled task (validation cached on disk by fingerprint), or returns a
    generated task registered with :func:`register_generated`."""
    if name in _GENERATED:
        return _GENERATED[name]
    if name not in list_tasks():
        raise KeyError(f"unknown codefix task {name!r}; known: {list_tasks()}")
    tools = dict(faults.tool_versions(verifier.SANDBOX_PYTHON))
    if "absent" in (tools["python"], tools["pytest"]):
        raise RuntimeError(
            f"the sandbox interpreter {verifier.SANDBOX_PYTHON} needs pytest "
            f"(apt-get install -y python3-pytest); found {tools}"
        )
    return _build(name)


def register_generated(name: str, task_dir: str, validation: Mapping[str, Any]) -> Task:
    """A generated task in the bundled tasks' format under ``task_dir``, already validated by its
    generator; ``load_task(name)`` returns it from now on (the audit and fault injection load by
    name)."""
    task = _build(name, task_dir=task_dir, validation=validation)
    _GENERATED[name] = task
    return task


@functools.lru_cache(maxsize=64)
def with_flaky_case(name: str) -> Task:
    """The task plus a seed-dependent (flaky) hidden case; validation quarantines it."""
    base = load_task(name)
    mp = next(c for c in base.cases if c["id"] == "canary_must_pass")
    flaky = {**mp, "id": "flaky_env", "flaky": True}
    return _build(name, cases=(*base.cases, flaky), tag="flaky")


def infra_verdict(task: Task, evidence: dict[str, Any]) -> Verdict:
    """An ``infra_fault`` verdict on ``task`` (reward NaN: masked and retried, never trained on)
    whose ``evidence`` says what failed on the host side."""
    return Verdict(
        reward=float("nan"),
        label=Label.INFRA_FAULT,
        tests_expected=0,
        tests_run=0,
        tests_passed=0,
        tests_skipped=0,
        evidence=evidence,
        verifier_version=verifier.VERIFIER_VERSION,
        env_fingerprint=task.fingerprint,
    )


def verify(
    task: Task,
    workspace_dir: str,
    *,
    limits: sandbox.Limits = DEFAULT_LIMITS,
    inject: str | None = None,
    seed: int | None = None,
    unsafe: bool = False,
    run_flagged: bool = False,
) -> Verdict:
    """Judges the agent's final tree in ``workspace_dir`` in a fresh sandbox.

    Args:
      inject: a fault class from :data:`agentjax.envs.faults.FAULT_CLASSES` to inject for real.
      seed: seed visible to the tests (``AGENTJAX_SEED``); random when None.
      unsafe: run without isolation if the sandbox is unavailable (never the default).
      run_flagged: still run the tests when the static scans already found a hack (for audits).
    """
    if inject is not None and inject not in faults.FAULT_CLASSES:  # a typo must not pass as infra
        raise ValueError(f"unknown fault class {inject!r}; known: {faults.FAULT_CLASSES}")
    seed = random.randrange(1 << 30) if seed is None else seed
    if inject == "flaky_test":
        task, seed = with_flaky_case(task.name), seed | 1  # odd seeds make the flaky case fail
    try:
        files, flags = scan.scan_tree(task.repo_dir, workspace_dir, task.editable)
        if flags and not run_flagged and inject is None:
            return verifier.static_hack_verdict(task.cases, flags, task.fingerprint)
        res, recs = verifier.run_tree(
            task.repo_dir,
            files,
            task.cases,
            seed=seed,
            limits=limits,
            unsafe=unsafe,
            hooks=faults.injection_hooks(inject),
        )
        if inject == "verifier_crash":
            raise RuntimeError("injected fault: verifier crashed while parsing results")
        v = verifier.decide(
            task.cases,
            res,
            recs,
            hack_flags=flags,
            quarantined=task.quarantined,
            limits=limits,
            env_fingerprint=task.fingerprint,
            nonce=verifier.new_nonce(),
        )
    except sandbox.SandboxUnavailable:
        raise
    except Exception as e:  # the verifier's own failure is never the agent's: the scans and the
        # results parser are total (agent input yields flags or garbage records, never raises), so
        # what reaches here is positive evidence of a host-side failure
        evidence = {
            "attribution": f"verifier_crash: {type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-3000:],
            "hack_detected": False,
            **({"injected": inject} if inject else {}),
        }
        return infra_verdict(task, evidence)
    if inject:
        v.evidence["injected"] = inject
    return v
