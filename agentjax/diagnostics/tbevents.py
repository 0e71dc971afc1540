"""TensorBoard scalars from the run's metrics rows, written by ``tensorboardX`` (no TensorFlow).

    write_rows(logdir, [{"step": 3, "loss/total": 0.3, "eval": {"success": 0.5}}])

Each call writes its rows to one new event file under ``logdir`` and closes it (records flushed
and fsync'd), so no writer outlives a call and a killed process leaves only closed files; TensorBoard
reads every ``*tfevents*`` file of a directory. Records carry the wall time, so event files are not
bitwise reproducible; nothing else in a run reads them (``metrics.jsonl`` is the record).
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import tensorboardX
from tensorboardX.proto.summary_pb2 import Summary


def flatten_scalars(row: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a (nested) metrics row as ``{"a/b": float}``; strings, lists and None are
    dropped (bools become 0/1)."""
    out: dict[str, float] = {}
    for k, v in row.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_scalars(v, name + "/"))
        elif isinstance(v, (int, float)) or (hasattr(v, "dtype") and getattr(v, "shape", None) == ()):
            try:
                out[name] = float(v)
            except (TypeError, ValueError):
                continue
    return out


def _scalar(tag: str, value: float) -> Summary:
    """A scalar summary built directly: ``tensorboardX.summary.scalar`` logs "NaN or Inf found in
    input tensor" for every non-finite value, and a value a row really holds is written as it is
    (the metrics rows themselves hold no NaN where a value is undefined: they omit it)."""
    return Summary(value=[Summary.Value(tag=tensorboardX.summary._clean_tag(tag), simple_value=value)])


def _step(row: Mapping[str, Any]) -> int | None:
    s = row.get("step")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or (isinstance(s, float) and math.isnan(s)):
        return None
    return int(s)


def write_rows(logdir: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> str | None:
    """Writes each row's numeric fields (nested dicts flattened with ``/``) at its ``step`` into a
    new event file under ``logdir``; rows without a step are skipped. Returns the file's path
    (None when no row had a step)."""
    rows = [(s, r) for r in rows if (s := _step(r)) is not None]
    if not rows:
        return None
    os.makedirs(logdir, exist_ok=True)
    # one file per call: unique per process and first step (a resumed run rewrites later steps)
    suffix = f".{os.getpid()}.{rows[0][0]}.{len(os.listdir(logdir))}"
    w = tensorboardX.FileWriter(os.fspath(logdir), filename_suffix=suffix)
    try:
        for step, row in rows:
            for tag, value in flatten_scalars({k: v for k, v in row.items() if k != "step"}).items():
                w.add_summary(_scalar(tag, value), global_step=step)
    finally:
        w.close()  # flushes every record
    (path,) = glob.glob(os.path.join(glob.escape(os.fspath(logdir)), f"*tfevents*{suffix}"))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
