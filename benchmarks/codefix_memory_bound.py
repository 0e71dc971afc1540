"""How much of codefix's held-out split can a model pass by recalling lines it trained on? (#30)

    python -m benchmarks.codefix_memory_bound --train=256 --heldout=128 --seed=0

A held-out (family, template) pair is never trained on, but its template may be: the training
tasks of the template's OTHER sites show the held-out site's line as written in the reference. A
model that memorises the training files could then "fix" the held-out bug by writing the line it
remembers, without generalising the family's fix. For each held-out task this script asks whether
every line the reference fix adds (whitespace-stripped) occurs verbatim in some training task's
buggy files; per held-out pair it prints the task count and that share. The total is an upper
bound on held-out success by recall alone; the rest needs the family's fix applied to a template
never seen (a generalisation the tiny 2 x 64 model is not expected to make). Writes
``benchmarks/results/codefix_memory_bound.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--train", type=int, default=256)
    p.add_argument("--heldout", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/codefix_memory_bound.json")
    f = p.parse_args()
    from agentjax.envs.codefix.edits import read_pristine  # noqa: PLC0415
    from agentjax.envs.codefix.generated import store  # noqa: PLC0415

    seen = set()
    for t in store.tasks(f.train, "train", f.seed):
        for rel in t.reference:
            seen.update(line.strip() for line in read_pristine(t, rel).splitlines())
    tasks, recall = collections.Counter(), collections.Counter()
    for t in store.tasks(f.heldout, "heldout", f.seed):
        pair = "/".join(t.name.split("-")[2:])  # gen<seed>-heldout<i>-<family>-<template>
        added = set()
        for rel, new in t.reference.items():
            old = {line.strip() for line in read_pristine(t, rel).splitlines()}
            added |= {line.strip() for line in new.splitlines()} - old
        tasks[pair] += 1
        recall[pair] += bool(added) and added <= seen
    rows = {k: {"tasks": tasks[k], "recallable": recall[k]} for k in sorted(tasks)}
    total = sum(recall.values()) / max(sum(tasks.values()), 1)
    print(f"{'held-out pair':32s} {'tasks':>5s} {'fix lines seen in training':>27s}")
    for k, r in rows.items():
        print(f"{k:32s} {r['tasks']:5d} {r['recallable'] / r['tasks']:27.2f}")
    print(f"{'all':32s} {sum(tasks.values()):5d} {total:27.2f}  (upper bound on success by recall)")
    os.makedirs(os.path.dirname(f.out), exist_ok=True)
    with open(f.out, "w") as fh:
        json.dump({"args": vars(f), "pairs": rows, "recallable_share": total}, fh, indent=1)


if __name__ == "__main__":
    main()
