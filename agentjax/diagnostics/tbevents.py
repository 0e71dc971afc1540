"""TensorBoard events from the run's metrics rows: one event file per run, appended to.

    write_rows(logdir, [{"step": 3, "loss/total": 0.3, "eval": {"success": 0.5}}])

Every call appends its rows' records to ``<logdir>/events.out.tfevents.agentjax`` (the one file
of the run; records flushed and fsync'd before it returns, so a killed process leaves a file whose
records up to its last call are whole). A call whose first step is not after the file's last step
is a run that started again: a resumed run rewrites the steps after its checkpoint, a fresh run
(step 0) the whole run. The file is cut back to the records before that step first, so TensorBoard
never shows a step twice (and no reader has to purge orphaned data); a fresh run also removes
other event files from the directory (the per-call files older versions wrote). A torn last record
(a write the process did not finish) is cut off before appending.

What a row becomes:

* numeric leaves: scalars (nested dicts flattened with ``/``; strings, lists and None dropped);
* ``eval/samples`` (:func:`agentjax.diagnostics.episodes.samples`): a text summary
  ``eval/sample_episodes`` (the text plugin) with the rendered episodes and their verdicts;
* the step-0 row's ``header``: scalars at step 0, the warm start's first and last loss among them
  (``header/warm_start/nll_first``, ``header/warm_start/nll_last``);
* the step-0 row's ``warm_start/curve`` (``[[warm-start step, loss], ...]``, every logged step of
  the warm start): the scalar ``warm_start/nll`` at each warm-start step (its own step axis: the
  warm start's steps, not RL steps). These records belong to the run's start: a resumed run keeps
  them (it cuts back to the steps before its checkpoint, the warm start's curve being step 0's);
* ``throughput/generated_tokens_per_s`` (the row's own field, written by the training loop: the
  batch's action tokens over the sampler's generation seconds) is an ordinary scalar;
* ``batch/action_tokens`` over the ``wall`` seconds since this process's previous row: the scalar
  ``throughput/trained_tokens_per_s`` (action tokens trained per wall second; not for the first
  row a process writes, which has no previous row).

Records carry the wall time, so event files are not bitwise reproducible; nothing else in a run
reads them (``metrics.jsonl`` is the record).
"""

from __future__ import annotations

import glob
import math
import os
import struct
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any


def _import_tensorboardx():
    """tensorboardX's package imports torch where it is installed (the ``hf`` extra), to accept
    torch tensors that nothing here passes: about 1 s of every process's start. Where torch is
    not imported yet, its import is refused while tensorboardX's runs (``import torch`` raises
    ImportError, which tensorboardX expects), and allowed again after."""
    if "torch" in sys.modules:
        import tensorboardX  # noqa: PLC0415

        return tensorboardX
    sys.modules["torch"] = None
    try:
        import tensorboardX  # noqa: PLC0415
    finally:
        del sys.modules["torch"]
    return tensorboardX


tensorboardX = _import_tensorboardx()
from tensorboardX.proto.event_pb2 import Event  # noqa: E402
from tensorboardX.proto.plugin_text_pb2 import TextPluginData  # noqa: E402
from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata  # noqa: E402
from tensorboardX.proto.tensor_pb2 import TensorProto  # noqa: E402
from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto  # noqa: E402
from tensorboardX.record_writer import masked_crc32c  # noqa: E402

from agentjax.diagnostics import episodes  # noqa: E402

EVENT_FILE = "events.out.tfevents.agentjax"  # the run's one event file ("tfevents": TensorBoard reads it)
SAMPLES_KEY = episodes.KEY
SAMPLES_TAG = "eval/sample_episodes"
TOKENS_PER_S = "throughput/trained_tokens_per_s"
GENERATED_PER_S = "throughput/generated_tokens_per_s"  # a metrics row's field (agentjax.run.summary)
WARM_START_CURVE = "warm_start/curve"  # the step-0 row's [[warm-start step, nll], ...]
WARM_START_TAG = "warm_start/nll"
# fields and tags measured on the wall clock: they differ run to run (same seed or not)
WALL_CLOCK = ("wall", TOKENS_PER_S, GENERATED_PER_S)

_last_wall: dict[str, tuple[int, float]] = {}  # logdir -> (step, wall) of this process's last row
_appended: dict[str, tuple[int, int]] = {}  # path -> (size, last step) after this process's last call


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


def text_summary(tag: str, text: str) -> Summary:
    """A text-plugin summary (TensorBoard's Text tab renders it as Markdown) under ``tag``."""
    meta = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name="text", content=TextPluginData(version=0).SerializeToString()
        )
    )
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[text.encode("utf-8")],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=meta, tensor=tensor)])


def _step(row: Mapping[str, Any]) -> int | None:
    s = row.get("step")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or (isinstance(s, float) and math.isnan(s)):
        return None
    return int(s)


def _records(data: bytes):
    """``(offset, end, payload)`` of each whole record of an event file's bytes, in order; stops at
    the first record that is cut short or fails its checksum (a torn write)."""
    off = 0
    while off + 12 <= len(data):
        header = data[off : off + 8]
        (n,) = struct.unpack("Q", header)
        if struct.unpack("I", data[off + 8 : off + 12])[0] != masked_crc32c(header):
            return
        end = off + 12 + n + 4
        if end > len(data):
            return
        payload = data[off + 12 : off + 12 + n]
        if struct.unpack("I", data[end - 4 : end])[0] != masked_crc32c(payload):
            return
        yield off, end, payload
        off = end


def _record(payload: bytes) -> bytes:
    header = struct.pack("Q", len(payload))
    return (
        header + struct.pack("I", masked_crc32c(header)) + payload + struct.pack("I", masked_crc32c(payload))
    )


def _keep_before(path: str, first: int) -> None:
    """Cuts the event file at ``path`` back to its whole records of steps before ``first`` (and its
    file-version record); a missing (or unreadable) file starts again with that record."""
    data = b""
    if os.path.exists(path):
        with open(path, "rb") as f:
            data = f.read()
    keep = 0
    for _, end, payload in _records(data):
        e = Event.FromString(payload)
        if not (e.HasField("file_version") or e.step < first or (first > 0 and _warm_start(e))):
            break
        keep = end
    if keep == 0:
        with open(path, "wb") as f:
            f.write(_record(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString()))
    elif keep < len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)


def _warm_start(e: Event) -> bool:
    """Whether ``e`` is a point of the warm start's curve (written with step 0's row, at the warm
    start's own step)."""
    return e.HasField("summary") and all(v.tag == WARM_START_TAG for v in e.summary.value)


def _curve(value) -> list[tuple[int, float]]:
    """The ``(step, loss)`` points of a ``warm_start/curve`` field; malformed points are skipped."""
    out = []
    for p in value if isinstance(value, list) else ():
        if isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p):
            out.append((int(p[0]), float(p[1])))
    return out


def _events(rows: list[tuple[int, Mapping[str, Any]]], logdir: str) -> list[Event]:
    now, out = time.time(), []
    add = lambda step, summary: out.append(Event(wall_time=now, step=step, summary=summary))  # noqa: E731
    for step, row in rows:
        for tag, value in flatten_scalars({k: v for k, v in row.items() if k != "step"}).items():
            add(step, _scalar(tag, value))
        if step == 0:
            for s, loss in _curve(row.get(WARM_START_CURVE)):
                add(s, _scalar(WARM_START_TAG, loss))
        samples = row.get(SAMPLES_KEY)
        if isinstance(samples, list) and samples:
            add(step, text_summary(SAMPLES_TAG, episodes.markdown(samples)))
        wall, tokens = row.get("wall"), row.get("batch/action_tokens")
        if isinstance(wall, (int, float)) and not isinstance(wall, bool):
            prev = _last_wall.get(logdir)
            if prev is not None and prev[0] < step and wall > prev[1] and isinstance(tokens, (int, float)):
                add(step, _scalar(TOKENS_PER_S, float(tokens) / (wall - prev[1])))
            _last_wall[logdir] = (step, float(wall))
    return out


def write_rows(logdir: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> str | None:
    """Appends each row (see the module's docstring) at its ``step`` to the run's event file
    under ``logdir``; rows without a step are skipped. Returns the file's path (None when no row
    had a step)."""
    rows = [(s, r) for r in rows if (s := _step(r)) is not None]
    if not rows:
        return None
    logdir = os.path.abspath(os.fspath(logdir))
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, EVENT_FILE)
    first = rows[0][0]
    if first == 0:  # a fresh run owns the directory: no other run's (or older version's) files
        for other in glob.glob(os.path.join(glob.escape(logdir), "*tfevents*")):
            if other != path:
                os.remove(other)
        _last_wall.pop(logdir, None)
    size, last = _appended.get(path, (-1, -1))
    if not (last < first and os.path.exists(path) and os.path.getsize(path) == size):
        _keep_before(path, first)  # reads the file: a new process, another writer, or a restart
    if _last_wall.get(logdir, (-1, 0.0))[0] >= first:  # rewritten steps: no rate across them
        _last_wall.pop(logdir, None)
    blob = b"".join(_record(e.SerializeToString()) for e in _events(rows, logdir))
    with open(path, "ab") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
        _appended[path] = (f.tell(), max(s for s, _ in rows))
    return path
