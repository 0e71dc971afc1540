"""Applies each mutation of the catalogue in a scratch copy of the tree and runs its tests.

    python -m tests.mutations.run                      # all
    python -m tests.mutations.run --only window_ignored --only tis_cap_ignored

Either updates the rows of the mutations it ran in ``docs/mutations.md``'s table.

A mutation is *killed* when one of its tests fails (pytest exit 1), *survived* when they all
pass, and an *error* when pytest could not run them (collection error, exit 2-5): a patch that
breaks the import proves nothing. The copy is the working tree as git sees it (tracked and
untracked-not-ignored files); it shares this tree's compilation cache. Not run in CI (each
mutation trains); run it before calling a feature's tests proven.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from tests.mutations.catalogue import MUTATIONS, Mutation
from tests.runs import ROOT


def tree_files(root: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return [f for f in out.stdout.splitlines() if os.path.isfile(os.path.join(root, f))]


def apply(m: Mutation, root: str) -> None:
    path = os.path.join(root, m.path)
    text = open(path).read()
    if text.count(m.find) != 1:
        raise ValueError(f"mutation {m.name}: its find text occurs {text.count(m.find)} times in {m.path}")
    open(path, "w").write(text.replace(m.find, m.replace))


def run_one(m: Mutation, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"mutation-{m.name}-") as copy:
        for f in tree_files(ROOT):
            os.makedirs(os.path.dirname(os.path.join(copy, f)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), os.path.join(copy, f))
        os.makedirs(os.path.join(ROOT, ".jax_cache"), exist_ok=True)
        os.symlink(os.path.join(ROOT, ".jax_cache"), os.path.join(copy, ".jax_cache"))
        apply(m, copy)
        t0 = time.time()
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n0", "-p", "no:cacheprovider", *m.tests]
        try:
            r = subprocess.run(cmd, cwd=copy, capture_output=True, text=True, timeout=timeout)
            code, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            code, out = -1, ""
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    verdict = {0: "survived", 1: "killed", -1: "timeout"}.get(code, "error")
    return {
        "name": m.name,
        "verdict": verdict,
        "killed_by": failed[:1],
        "seconds": time.time() - t0,
        "tail": out[-1500:],
    }


def table_row(r: dict) -> str:
    m = {m.name: m for m in MUTATIONS}[r["name"]]
    killer = r["killed_by"][0].split("::", 1)[-1] if r["killed_by"] else "-"
    return f"| `{m.name}` | {m.feature} | `{m.path}` | {r['verdict']} | `{killer}` | {r['seconds']:.0f} |"


def merge_table(doc: str, rows: list[dict]) -> str:
    """``doc`` with its table's rows for ``rows``' mutations replaced (the others kept), in the
    catalogue's order; the text before ``<!-- table -->`` is kept."""
    head, _, old = doc.partition("<!-- table -->")
    lines = {}
    for ln in old.splitlines():
        name = re.match(r"\| `([^`]+)` \|", ln)
        if name:
            lines[name.group(1)] = ln
    lines.update({r["name"]: table_row(r) for r in rows})
    body = [lines[m.name] for m in MUTATIONS if m.name in lines]
    hdr = ["| mutation | feature | file | verdict | killed by | s |", "|---|---|---|---|---|---|"]
    return head + "<!-- table -->\n" + "\n".join(hdr + body) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="mutation names (default: all)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "mutations.md"))
    a = ap.parse_args(argv)
    chosen = [m for m in MUTATIONS if not a.only or m.name in a.only]
    unknown = set(a.only) - {m.name for m in MUTATIONS}
    if unknown:
        ap.error(f"unknown mutations {sorted(unknown)}; known: {[m.name for m in MUTATIONS]}")
    rows = []
    for m in chosen:
        rows.append(run_one(m, a.timeout))
        r = rows[-1]
        print(f"{r['name']}: {r['verdict']} {r['killed_by']} {r['seconds']:.0f}s", flush=True)
        if r["verdict"] != "killed":
            print(r["tail"], flush=True)
    doc = open(a.out).read() if os.path.exists(a.out) else ""
    open(a.out, "w").write(merge_table(doc, rows))
    return 0 if all(r["verdict"] == "killed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
