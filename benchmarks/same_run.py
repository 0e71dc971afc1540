"""Whether two finished runs are the same run: every metric value bitwise (wall-clock
measurements aside) and the final train state bitwise.

    python -m benchmarks.same_run WORKDIR_A WORKDIR_B

Used before and after a change that must not change behaviour (a refactor): run the same config
and seed on the virtual clock into two workdirs, then compare. Prints the rows and values
compared, every differing key, and the final checkpoint's leaves and values compared.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np

# wall-clock measurements: they differ between any two runs
WALL = ("wall", "seconds", "_s", "per_s", "elapsed", "time_s", "latency")


def _flat(x, prefix=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, f"{prefix}{k}/")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _flat(v, f"{prefix}{i}/")
    else:
        yield prefix.rstrip("/"), x


def _walled(key: str) -> bool:
    leaf = key.rsplit("/", 1)[-1]
    return any(w in leaf for w in WALL) or key.startswith("header/versions")


def compare_metrics(a: str, b: str) -> tuple[int, int, set, set]:
    rows_a = [json.loads(x) for x in open(f"{a}/metrics.jsonl")]
    rows_b = [json.loads(x) for x in open(f"{b}/metrics.jsonl")]
    if len(rows_a) != len(rows_b):
        return len(rows_a), 0, {f"row count {len(rows_a)} != {len(rows_b)}"}, set()
    values, differ, only = 0, set(), set()
    for ra, rb in zip(rows_a, rows_b, strict=True):
        fa, fb = dict(_flat(ra)), dict(_flat(rb))
        for k in fa.keys() | fb.keys():
            if _walled(k):
                continue
            if (k in fa) != (k in fb):  # a metric one side adds (a new key), not a changed value
                only.add(re.sub(r"/\d+(?=/|$)", "/*", k))  # list entries collapsed
                continue
            values += 1
            if json.dumps(fa[k]) != json.dumps(fb[k]):
                differ.add(k)
    return len(rows_a), values, differ, only


def compare_state(a: str, b: str) -> tuple[int, int, list]:
    import jax  # noqa: PLC0415

    from agentjax.learner.checkpoint import restore_checkpoint  # noqa: PLC0415

    sa = restore_checkpoint(f"{a}/checkpoints").state
    sb = restore_checkpoint(f"{b}/checkpoints").state
    la = jax.tree.flatten_with_path(sa)[0]
    lb = jax.tree.flatten_with_path(sb)[0]
    differ, n = [], 0
    for (pa, xa), (_, xb) in zip(la, lb, strict=True):
        xa, xb = np.asarray(xa), np.asarray(xb)
        n += xa.size
        if xa.shape != xb.shape or xa.tobytes() != xb.tobytes():
            differ.append(jax.tree_util.keystr(pa))
    return len(la), n, differ


def main(a: str, b: str) -> int:
    rows, values, differ, only = compare_metrics(a, b)
    print(f"metrics: {rows} rows, {values} values in both compared (wall-clock keys aside)")
    print(f"differing keys: {sorted(differ)}")
    print(f"keys only one run writes (new metrics, not compared): {sorted(only)[:20]}")
    leaves, n, bad = compare_state(a, b)
    print(f"final train state: {leaves} leaves, {n} values; differing leaves: {bad}")
    return int(bool(differ or bad))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
