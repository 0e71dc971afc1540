"""One generated codefix task from (seed, split, index): seeded, deterministic, no I/O.

The drawn (family, template) pair is ``pairs_in(split)[index % len]``; the rest (package name,
which bug of the site, inputs) comes from ``random.Random(sha256(version|seed|split|index))``, so
the same arguments give byte-identical files. Expected values are the reference's outputs
(:mod:`.load`); the visible tests hold one input the bug gets wrong, the hidden cases other inputs,
at least two the bug gets wrong and, for every known wrong fix, one it gets wrong.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import random
from collections.abc import Mapping
from typing import Any

from agentjax.envs.codefix.generated import load
from agentjax.envs.codefix.generated.templates import Template

GEN_VERSION = "codefix-gen/1"
POOL = 40  # inputs drawn per function
HIDDEN_TARGET = 6  # hidden cases of the buggy function (plus those that catch wrong fixes)
HIDDEN_OTHER = 2  # hidden cases of each other function (regressions)


@dataclasses.dataclass(frozen=True)
class GenTask:
    name: str
    family: str
    template: str
    site: str
    split: str
    package: str
    fn: str
    description: str
    files: Mapping[str, str]  # the pristine repository (buggy), tests/test_visible.py included
    reference: Mapping[str, str]  # overlay: the fix
    wrongs: Mapping[str, Mapping[str, str]]  # known wrong fixes: label -> overlay
    cases: tuple[Mapping[str, Any], ...]  # hidden cases, expected values encoded
    visible: tuple[Mapping[str, Any], ...]  # the visible tests' calls, expected values encoded
    patch: str  # unified diff from the buggy tree to the reference


@dataclasses.dataclass(frozen=True)
class Dropped:
    name: str
    family: str
    template: str
    split: str
    reason: str


def _rng(seed: int, split: str, index: int) -> random.Random:
    digest = hashlib.sha256(f"{GEN_VERSION}|{seed}|{split}|{index}".encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


def _pool(t: Template, fn: str, rng: random.Random) -> list[list]:
    seen, out = set(), []
    for _ in range(POOL):
        a = t.args[fn](rng)
        key = json.dumps(a, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def _call_text(fn: str, args: list) -> str:
    return f"{fn}({', '.join(repr(a) for a in args)})"


def _visible_tests(package: str, fns: list[str], calls: list[tuple[str, list, Any]]) -> str:
    lines = [f"from {package} import {', '.join(sorted(fns))}\n"]
    for i, (fn, args, val) in enumerate(calls):
        lines.append(f"\n\ndef test_{fn}_{i}():\n    assert {_call_text(fn, args)} == {val!r}\n")
    return "".join(lines)


def _hardcode(core: str, fn: str, args: list, val: Any) -> str:
    """The buggy module plus a special case returning the visible test's expected value."""
    return (
        f"{core}\n\n_{fn}_unfixed = {fn}\n\n\ndef {fn}(*args):\n"
        f"    if list(args) == {args!r}:\n        return {val!r}\n    return _{fn}_unfixed(*args)\n"
    )


def render(t: Template, site_key: str, split: str, seed: int, index: int) -> GenTask | Dropped:
    site, rng = t.sites[site_key], _rng(seed, split, index)
    package, bug = rng.choice(t.packages), rng.choice(site.bugs)
    name = f"gen{seed}-{split}{index:04d}-{site.family}-{t.name}"
    fns = list(t.args)
    init = f'"""{package}: a generated package with one bug."""\n\n'
    init += f"from .core import {', '.join(sorted(f for f in fns if f + '(' in t.core))}\n"
    helper_fns = sorted(f for f in fns if f + "(" not in t.core)
    if helper_fns:
        init += f"from .helpers import {', '.join(helper_fns)}\n"
    base = {f"{package}/__init__.py": init, f"{package}/helpers.py": t.helpers}
    core_path = f"{package}/core.py"
    ref_core, bug_core = t.core_with({}), t.core_with({site_key: bug})
    alts = [a for a in (*site.bugs, *site.others) if a != bug]
    ref, buggy = (
        load.load({**base, core_path: ref_core}, package),
        load.load({**base, core_path: bug_core}, package),
    )
    wrong_mods = [load.load({**base, core_path: t.core_with({site_key: a})}, package) for a in alts]

    pools = {fn: [a for a in _pool(t, fn, rng) if "exc" not in _safe(load.outcome(ref, fn, a))] for fn in fns}
    fn = site.fn
    differs = [a for a in pools[fn] if load.outcome(ref, fn, a) != load.outcome(buggy, fn, a)]
    if not differs:
        return Dropped(
            name,
            site.family,
            t.name,
            split,
            "bug_not_caught: no drawn input tells the bug from the reference",
        )
    same = [a for a in pools[fn] if a not in differs]
    visible = [(fn, differs[0]), *[(fn, a) for a in same[:1]]]
    visible += [(f, pools[f][0]) for f in fns if f != fn and pools[f]]
    used = {json.dumps(a) for f, a in visible if f == fn}
    rest = [a for a in pools[fn] if json.dumps(a) not in used]
    hidden = [a for a in rest if a in differs][:2]
    hidden += [a for a in rest if a not in hidden][: max(0, HIDDEN_TARGET - len(hidden))]
    for mod in wrong_mods:  # every known wrong fix gets one hidden input it answers wrongly
        if all(load.outcome(mod, fn, a) == load.outcome(ref, fn, a) for a in hidden):
            hidden += [a for a in rest if load.outcome(mod, fn, a) != load.outcome(ref, fn, a)][:1]
    cases = [{"call": f"{package}:{fn}", "args": a, "expected": load.outcome(ref, fn, a)} for a in hidden]
    canary = None
    for f in (f for f in fns if f != fn):
        extra = [a for a in pools[f] if a != pools[f][0]]
        cases += [
            {"call": f"{package}:{f}", "args": a, "expected": load.outcome(ref, f, a)}
            for a in extra[:HIDDEN_OTHER]
        ]
        ok = [a for a in extra[HIDDEN_OTHER:] if load.outcome(ref, f, a) == load.outcome(buggy, f, a)]
        if canary is None and ok:
            canary = {"call": f"{package}:{f}", "args": ok[0], "expected": load.outcome(ref, f, ok[0])}
    if canary is None:
        return Dropped(
            name, site.family, t.name, split, "no_canary: no working function unaffected by the bug"
        )
    cases = [{"id": f"h{i}", **c} for i, c in enumerate(cases)] + [{"id": "canary_must_pass", **canary}]
    calls = [(f, a, load.value(ref, f, a)) for f, a in visible]
    files = {**base, core_path: bug_core, "tests/test_visible.py": _visible_tests(package, fns, calls)}
    wrongs = {f"alt:{a.strip() or '<removed>'}": {core_path: t.core_with({site_key: a})} for a in alts}
    wrongs["hardcode_visible"] = {core_path: _hardcode(bug_core, fn, differs[0], calls[0][2])}
    patch = "".join(
        difflib.unified_diff(
            bug_core.splitlines(True), ref_core.splitlines(True), f"a/{core_path}", f"b/{core_path}"
        )
    )
    return GenTask(
        name=name,
        family=site.family,
        template=t.name,
        site=site_key,
        split=split,
        package=package,
        fn=fn,
        description=f"A visible test fails: {t.docs[fn]} Fix the bug in {package}/ without "
        "breaking the other functions.",
        files=files,
        reference={core_path: ref_core},
        wrongs=wrongs,
        cases=tuple(cases),
        visible=tuple(
            {"call": f"{package}:{f}", "args": a, "expected": load.outcome(ref, f, a)} for f, a in visible
        ),
        patch=patch,
    )


def _safe(v: Any) -> Any:
    return v if isinstance(v, dict) else {}
