"""Generated tasks on disk: draw and host-validate, validate in the sandbox, cache, register.

``tasks(n, split, seed)`` returns ``n`` valid :class:`agentjax.envs.codefix.api.Task` objects of one
split. A task is used only after both passes: :func:`.check.validate` on the host (every task,
milliseconds) and :func:`sandbox_validate`, which runs the reference, the buggy original and every
known wrong fix through the verifier's own runner in the real sandbox (``verifier.run_tree``:
bubblewrap, uid 65534, type-exact encoding, expected values compared outside), many tasks per
sandbox run. A task that fails either pass is dropped with its reason (``dropped(...)``) and the
next index is drawn. Results are cached under ``$AGENTJAX_CACHE/codefix-generated/<key>/seed<seed>``
where ``key`` hashes the generator version, the template sources and the verifier's runner, and
each entry records the sha256 of the task's files: a changed task is validated again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Sequence

from agentjax.envs import sandbox
from agentjax.envs.codefix import api, verifier
from agentjax.envs.codefix.generated import catalogue, check, render, templates

BATCH = 24  # tasks per sandbox validation run
LIMITS = sandbox.Limits(wall_s=120.0, cpu_s=60, pids=64)
MAX_DRAWS = 4  # a split gives up after MAX_DRAWS * n + 16 draws


def cache_root(seed: int) -> str:
    base = os.environ.get("AGENTJAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentjax")
    h = hashlib.sha256(render.GEN_VERSION.encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for path in [
        *(os.path.join(here, f) for f in sorted(os.listdir(here)) if f.endswith(".py")),
        verifier.RUNNER,
    ]:
        with open(path, "rb") as f:
            h.update(f.read())
    return os.path.join(base, "codefix-generated", h.hexdigest()[:16], f"seed{seed}")


def pairs_for(split: str) -> list[tuple[str, str, str]]:
    """The (family, template, site) triples whose tasks belong to ``split``."""
    if split not in templates.SPLITS:
        raise ValueError(f"split={split!r} is invalid; allowed values: {templates.SPLITS}")
    reg = catalogue.registry()
    of = templates.split_of(reg)
    mine = [p for p in templates.pairs(reg) if of[p[:2]] == split]
    rank = {p: sum(q[0] == p[0] for q in mine[:i]) for i, p in enumerate(mine)}
    return sorted(mine, key=lambda p: (rank[p], p))  # families interleaved: any prefix is varied


def draw(n: int, split: str, seed: int) -> tuple[list[render.GenTask], list[render.Dropped]]:
    """The first ``n`` tasks of ``split`` that pass the host validation, and the dropped ones."""
    reg, pairs = catalogue.registry(), pairs_for(split)
    kept, dropped, index = [], [], 0
    while len(kept) < n:
        if index >= MAX_DRAWS * n + 16:
            raise RuntimeError(
                f"generated codefix: only {len(kept)} of {n} {split} tasks valid: {dropped[:3]}"
            )
        family, name, key = pairs[index % len(pairs)]
        task = render.render(reg[name], key, split, seed, index)
        reasons = [task.reason] if isinstance(task, render.Dropped) else check.validate(task)
        if reasons:
            dropped.append(render.Dropped(f"{seed}/{split}/{index}", family, name, split, "; ".join(reasons)))
        else:
            kept.append(task)
        index += 1
    return kept, dropped


def digest(task: render.GenTask) -> str:
    blob = json.dumps(dataclasses.asdict(task), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _variants(task: render.GenTask) -> list[tuple[str, dict[str, str], bool]]:
    """(label, files, must pass) for the reference, the buggy original and every wrong fix."""
    out = [("reference", {**task.files, **task.reference}, True), ("buggy", dict(task.files), False)]
    return out + [(label, {**task.files, **ov}, False) for label, ov in task.wrongs.items()]


def sandbox_validate(tasks: Sequence[render.GenTask], *, seed: int = 0) -> dict[str, list[str]]:
    """Reasons each task is invalid, judged in the sandbox by the verifier's runner (empty: valid)."""
    reasons: dict[str, list[str]] = {t.name: [] for t in tasks}
    for start in range(0, len(tasks), BATCH):
        tmp = sandbox.scratch_dir("agentjax-genval-")
        try:
            repo, cases, plan = os.path.join(tmp, "repo"), [], []
            for ti, task in enumerate(tasks[start : start + BATCH]):
                for vi, (label, files, must_pass) in enumerate(_variants(task)):
                    alias = f"v{ti}_{vi}"
                    for rel, text in files.items():
                        if rel.startswith(f"{task.package}/"):
                            path = os.path.join(repo, alias, rel.split("/", 1)[1])
                            os.makedirs(os.path.dirname(path), exist_ok=True)
                            with open(path, "w") as f:
                                f.write(text)
                    mine = [*task.cases, *({**c, "id": f"visible{i}"} for i, c in enumerate(task.visible))]
                    if label not in ("reference", "buggy"):
                        mine = list(task.cases)  # a wrong fix must fail a HIDDEN case
                    ids = [f"{alias}_{c['id']}" for c in mine]
                    cases += [
                        {**c, "id": i, "call": f"{alias}:{c['call'].split(':')[1]}"}
                        for i, c in zip(ids, mine, strict=True)
                    ]
                    plan.append((task, label, must_pass, ids))
            cases.append({**cases[0], "id": "canary_must_pass"})  # the runner's own canaries need one
            res, recs = verifier.run_tree(repo, {}, cases, seed=seed, limits=LIMITS)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        got = {r["id"]: r for r in recs if isinstance(r, dict) and r.get("kind") == "case"}
        want = {c["id"]: c["expected"] for c in cases}
        if res.timed_out or not all(i in got for i in want):
            raise RuntimeError(f"generated codefix: sandbox validation incomplete ({res.evidence()})")
        for task, label, must_pass, ids in plan:
            wrong = [i for i in ids if "value" not in got[i] or got[i]["value"] != want[i]]
            if must_pass and wrong:
                reasons[task.name].append(f"sandbox: {label} fails {wrong[:3]}")
            elif not must_pass and not wrong:
                reasons[task.name].append(f"sandbox: {label} passes every case")
            elif label == "buggy" and not any("visible" in i for i in wrong):
                reasons[task.name].append("sandbox: buggy passes every visible test")
    return reasons


def write_task(task: render.GenTask, root: str) -> str:
    """``task`` in the bundled tasks' format (repo/, reference/, wrong/, task.json) plus fix.patch."""
    d = os.path.join(root, task.name)
    try:
        with open(os.path.join(d, "task.json")) as f:
            if json.load(f)["generated"]["digest"] == digest(task):
                return d  # already written, byte for byte
    except (OSError, ValueError, KeyError):
        pass
    shutil.rmtree(d, ignore_errors=True)
    wrong_label = next(iter(task.wrongs))
    for kind, files in (
        ("repo", task.files),
        ("reference", task.reference),
        ("wrong", task.wrongs[wrong_label]),
    ):
        for rel, text in files.items():
            path = os.path.join(d, kind, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    meta = {k: getattr(task, k) for k in ("family", "template", "site", "split", "fn", "patch")}
    spec = {
        "description": task.description,
        "package": task.package,
        "editable": [check.EDITABLE.format(package=task.package)],
        "cases": list(task.cases),
        "generated": {**meta, "wrong": wrong_label, "wrong_fixes": task.wrongs, "digest": digest(task)},
    }
    with open(os.path.join(d, "task.json"), "w") as f:
        json.dump(spec, f, indent=1, sort_keys=True)
    with open(os.path.join(d, "fix.patch"), "w") as f:
        f.write(task.patch)
    return d


def tasks(n: int, split: str, seed: int, *, use_sandbox: bool = True) -> list[api.Task]:
    """``n`` validated tasks of ``split``, registered with :func:`api.register_generated`."""
    root = cache_root(seed)
    os.makedirs(root, exist_ok=True)
    ledger_path = os.path.join(root, "validated.json")
    try:
        with open(ledger_path) as f:
            ledger = json.load(f)
    except (OSError, ValueError):
        ledger = {}
    extra = 0
    while True:
        kept, _ = draw(n + extra, split, seed)  # a prefix-stable walk: more draws, same first tasks
        todo = [t for t in kept if ledger.get(t.name, {}).get("digest") != digest(t)]
        if todo and use_sandbox:
            for name, why in sandbox_validate(todo, seed=seed).items():
                ledger[name] = {"digest": digest(next(t for t in todo if t.name == name)), "reasons": why}
        ledger.update(
            {t.name: {"digest": digest(t), "reasons": [], "host_only": True} for t in todo if not use_sandbox}
        )
        good = [t for t in kept if not ledger[t.name]["reasons"]]
        if len(good) >= n or extra > n:
            break
        extra += n - len(good)
    tmp = f"{ledger_path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(ledger, f, indent=1, sort_keys=True)
    os.replace(tmp, ledger_path)
    if len(good) < n:
        bad = {t.name: ledger[t.name]["reasons"] for t in kept if ledger[t.name]["reasons"]}
        raise RuntimeError(f"generated codefix: too many {split} tasks failed the sandbox validation: {bad}")
    out = []
    for t in good[:n]:
        d = write_task(t, root)
        validation = {"quarantined": [], "generator": render.GEN_VERSION, **ledger[t.name]}
        out.append(api.register_generated(t.name, d, validation))
    return out


def dropped(n: int, split: str, seed: int) -> list[render.Dropped]:
    """The tasks the host validation dropped while drawing ``n`` of ``split`` (name, reason)."""
    return draw(n, split, seed)[1]
