"""What ``--resume`` checks before it changes anything: the checkpoint, its stored run config, its
scheduler snapshot, ``metrics.jsonl`` and the journal must agree.

Repairable (repaired, and said so in the log): a torn last line of ``metrics.jsonl`` (a SIGKILL or a
full disk mid-append), a torn journal tail, rows and records written after the checkpoint.
Refused with a :class:`~agentjax.learner.checkpoint.CheckpointError` naming the file: a config
that differs from the checkpoint's (``seed`` included; only :data:`MAY_CHANGE` may), a missing
``metrics.jsonl`` or missing rows, a journal with fewer records than the checkpoint counted, and an
unreadable scheduler snapshot -- then the message names the previous intact checkpoint step and
how to resume from it. ``tests/test_resume.py`` proves each case.
"""

from __future__ import annotations

import glob
import json
import os
import re

from agentjax.learner.checkpoint import CheckpointError

# extend a run; how often it is saved; whether it reports and what its report checks
MAY_CHANGE = ("rl.steps", "checkpoint_every", "report", "targets")


def snapshot_path(ckdir: str, step: int) -> str:
    return os.path.join(ckdir, f"scheduler_{step}.json")


def prune_snapshots(ckdir: str, steps: list[int]) -> None:
    """Deletes scheduler snapshots of steps without a checkpoint (pruned with it, or orphaned)."""
    for path in glob.glob(os.path.join(ckdir, "scheduler_*.*")):
        m = re.fullmatch(r"scheduler_(\d+)\.(json|pkl)", os.path.basename(path))
        if m and (int(m.group(1)) not in steps or m.group(2) == "pkl"):
            os.remove(path)


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_differences(stored: dict, current: dict) -> list[str]:
    """``field: stored -> current`` for every field that differs (besides :data:`MAY_CHANGE` and
    the fields inside them: ``targets.success``)."""
    a, b = _flat(stored), _flat(current)
    return [
        f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}"
        for k in sorted(a.keys() | b.keys())
        if not any(k == m or k.startswith(m + ".") for m in MAY_CHANGE) and a.get(k) != b.get(k)
    ]


def check_config(stored: dict | None, current: dict, where: str) -> None:
    if stored is None:
        raise CheckpointError(
            f"cannot resume: {where} stores no run config (written before "
            "checkpoints carried it); start a new --workdir"
        )
    diff = config_differences(stored, current)
    if diff:
        raise CheckpointError(
            f"cannot resume: the config differs from the one stored with {where}: "
            + "; ".join(diff)
            + f". Resume with the same config (only {list(MAY_CHANGE)} may "
            "change) or start a new --workdir"
        )


def metrics_lines(path: str, step: int) -> tuple[str, bool]:
    """The text of ``metrics.jsonl`` cut to rows of steps <= ``step``, and whether a torn last
    line was dropped. Raises CheckpointError if the file or any row up to ``step`` is missing,
    or a line other than the last is not JSON."""
    if not os.path.exists(path):
        raise CheckpointError(
            f"cannot resume from step {step}: {path} is missing (its rows up to "
            f"step {step} were written before the checkpoint); restore the "
            "file or start a new --workdir"
        )
    with open(path) as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    keep, torn, train_steps, header = [], False, set(), False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:  # an interrupted append: repairable
                torn = True
                continue
            raise CheckpointError(
                f"cannot resume: {path} line {i + 1} is not JSON (corrupted "
                "inside the file, not a torn last line)"
            ) from None
        if row.get("step", 0) <= step:
            keep.append(line + "\n")
            header |= "header" in row
            if "loss/total" in row:
                train_steps.add(row["step"])
    missing = sorted(set(range(1, step + 1)) - train_steps)
    if missing or not header:
        what = f"the training rows of steps {missing}" if missing else "the header row (step 0)"
        raise CheckpointError(
            f"cannot resume from step {step}: {path} lacks {what}; restore the file or start a new --workdir"
        )
    return "".join(keep), torn


def previous_step_hint(ckdir: str, step: int, steps: list[int], intact) -> str:
    """How to resume from the newest earlier step whose snapshot ``intact(path)`` accepts."""
    for s in sorted((s for s in steps if s < step), reverse=True):
        if intact(snapshot_path(ckdir, s)):
            return (
                f"The previous checkpoint, step {s}, is intact: to resume from it, delete "
                f"{os.path.join(ckdir, str(step))} and {snapshot_path(ckdir, step)}, then "
                "run --resume again."
            )
    return "No earlier intact checkpoint exists: start a new --workdir."


def checkpoint_metadata(ckdir: str, step: int) -> dict:
    """The JSON metadata saved with checkpoint ``step`` (read directly; {} when unreadable)."""
    try:
        with open(os.path.join(ckdir, str(step), "metadata", "metadata")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def journal_hint(ckdir: str, step: int, steps: list[int], intact_records: int, intact) -> str:
    """How to resume when the journal lost records checkpoint ``step`` counted: from the newest
    earlier checkpoint that journaled no more than ``intact_records`` (and whose snapshot
    ``intact(path)`` accepts)."""
    later = [s for s in steps if s >= step]
    for s in sorted((s for s in steps if s < step), reverse=True):
        n = checkpoint_metadata(ckdir, s).get("journaled")
        if isinstance(n, int) and n <= intact_records and intact(snapshot_path(ckdir, s)):
            drop = " and ".join(f"{os.path.join(ckdir, str(x))} and {snapshot_path(ckdir, x)}" for x in later)
            return (
                f"Checkpoint step {s} journaled {n} records, all intact: to resume from it, delete "
                f"{drop}, then run --resume again (the torn tail is dropped then)."
            )
    return "No earlier checkpoint is covered by the intact records: start a new --workdir."
