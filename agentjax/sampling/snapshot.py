"""The scheduler snapshot file: an explicit, versioned structure of named fields (no pickle).

Layout: one JSON header line, then the body (JSON of the state, UTF-8)::

    {"format": "agentjax-scheduler-snapshot", "version": 1, "body_bytes": N, "crc32": C}
    {"version": 3, "steps": 3, "records": [...], "clock": {...}, ...}

The body's fields are listed (and documented) by ``Scheduler.snapshot``. Values beyond JSON are
tagged objects:

* ``{"$nd": [dtype, shape, base64]}``: a numpy array; ``{"$np": [dtype, base64]}``: a numpy scalar;
* ``{"$tuple": [...]}``; ``{"$set": [...], "frozen": bool}``; ``{"$map": [[key, value], ...]}``
  (a dict whose keys are not strings);
* ``{"$float": "nan" | "inf" | "-inf"}``;
* ``{"$obj": "module:qualname", "f": {field: value}}``: an instance of one of :data:`TYPES`
  (dataclasses and NamedTuples), rebuilt by calling its constructor with those fields;
* ``{"$enum": name, "v": value}``: a member of one of :data:`TYPES`' enums;
* ``{"$error": type name, "repr": ...}``: an exception (a failed job's), rebuilt as
  :class:`RestoredError` with the same ``repr``.

Reading builds only the types in :data:`TYPES`, so a snapshot file never runs code (unpickling
does). A wrong format, a newer version, a truncated or corrupted body (length or CRC mismatch), an
unknown tag or type: each raises :class:`SnapshotError` naming what is wrong.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import json
import math
import zlib
from typing import Any

import numpy as np

# Version 2: the batch size is the scheduler's ``batch_size`` field (no longer in its two
# configs); choices are enum members. A version-1 snapshot is rejected (start a new workdir).
FORMAT, VERSION = "agentjax-scheduler-snapshot", 2

# Every type a snapshot may hold ("module:qualname"; an explicit allow-list).
TYPES = frozenset({
    "agentjax.trajectory:Trajectory", "agentjax.trajectory:Turn", "agentjax.trajectory:StopReason",
    "agentjax.sampling.runlog:Record", "agentjax.sampling.runlog:Consumed",
    "agentjax.sampling.runlog:SchedulerConfig", "agentjax.sampling.queue:TaskCaps",
    "agentjax.sampling.queue:SchedulerMode", "agentjax.sampling.queue:ResumeMode",
    "agentjax.sampling.queue:Clock",
    "agentjax.sampling.envpool:EnvPoolKind",
    "agentjax.sampling.queue:WorkItem", "agentjax.sampling.queue:RoundResult",
    "agentjax.sampling.staleness:StalenessConfig", "agentjax.sampling.staleness:StalenessState",
    "agentjax.sampling.staleness:Terminal", "agentjax.sampling.staleness:Admission",
    "agentjax.sampling.clock:Failure", "agentjax.sampling.scheduler:LearnerResult",
    "agentjax.sampling.worker:GroupTask", "agentjax.sampling.simulated:SimTask",
    "agentjax.sampling.simulated:SimTurn", "agentjax.sampling.simulated:SimState",
    "agentjax.envs.protocol:Label", "agentjax.envs.minirepo.tasks:Task",
    "agentjax.envs.minirepo.tasks:Test", "agentjax.envs.minirepo.tasks:Difficulty",
    "agentjax.envs.minirepo.lang:Fn", "agentjax.envs.minirepo.lang:Edit",
    "agentjax.envs.codefix.api:Task", "agentjax.envs.faults:RetryState",
})  # fmt: skip


class SnapshotError(ValueError):
    """A snapshot that cannot be written or read; the message says what and why."""


class RestoredError(RuntimeError):
    """A failed job's exception as read back from a snapshot (same ``repr`` as the original)."""

    def __init__(self, type_name: str, text: str):
        super().__init__(text)
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text


def _resolve(name: str):
    if name not in TYPES:
        raise SnapshotError(
            f"unknown type {name!r} (not in snapshot.TYPES); a snapshot from a newer agentjax?"
        )
    module, attr = name.split(":")
    return getattr(importlib.import_module(module), attr)


def _type_name(x) -> str:
    name = f"{type(x).__module__}:{type(x).__qualname__}"
    if name in TYPES:
        return name
    raise SnapshotError(
        f"cannot snapshot a {type(x).__module__}.{type(x).__qualname__}: not one "
        f"of the snapshot types {sorted(TYPES)} (agentjax/sampling/snapshot.py)"
    )


def encode(x: Any) -> Any:
    """``x`` as a JSON-compatible tree (see the module doc)."""
    if isinstance(x, enum.Enum):  # before str/int: StrEnum and IntEnum members are both
        return {"$enum": _type_name(x), "v": x.value}
    if x is None or isinstance(x, bool | str | int):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"$float": repr(x)}
    if isinstance(x, np.generic):  # a numpy scalar keeps its dtype (float32 arithmetic stays)
        return {"$np": [x.dtype.str, base64.b64encode(x.tobytes()).decode()]}
    if isinstance(x, np.ndarray):
        data = base64.b64encode(np.ascontiguousarray(x).tobytes()).decode()
        return {"$nd": [x.dtype.str, list(x.shape), data]}
    if isinstance(x, BaseException):
        return {"$error": type(x).__name__, "repr": repr(x)}
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # NamedTuple
        return {"$obj": _type_name(x), "f": {k: encode(v) for k, v in x._asdict().items()}}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = {f.name: encode(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}
        return {"$obj": _type_name(x), "f": fields}
    if isinstance(x, tuple):
        return {"$tuple": [encode(v) for v in x]}
    if isinstance(x, frozenset | set):
        return {"$set": sorted((encode(v) for v in x), key=repr), "frozen": isinstance(x, frozenset)}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in x):
            return {k: encode(v) for k, v in x.items()}
        return {"$map": [[encode(k), encode(v)] for k, v in x.items()]}
    raise SnapshotError(f"cannot snapshot a {type(x).__module__}.{type(x).__qualname__}")


def decode(x: Any) -> Any:
    """The inverse of :func:`encode`; builds only :data:`TYPES`."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "$nd" in x:
        dtype, shape, data = x["$nd"]
        return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape).copy()
    if "$np" in x:
        dtype, data = x["$np"]
        return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype))[0]
    if "$tuple" in x:
        return tuple(decode(v) for v in x["$tuple"])
    if "$set" in x:
        items = {_hashable(decode(v)) for v in x["$set"]}
        return frozenset(items) if x.get("frozen") else items
    if "$map" in x:
        return {_hashable(decode(k)): decode(v) for k, v in x["$map"]}
    if "$float" in x:
        return float(x["$float"])
    if "$enum" in x:
        return _resolve(x["$enum"])(x["v"])
    if "$error" in x:
        return RestoredError(str(x["$error"]), str(x["repr"]))
    if "$obj" in x:
        return _resolve(x["$obj"])(**{k: decode(v) for k, v in x["f"].items()})
    tags = [k for k in x if k.startswith("$")]
    if tags:
        raise SnapshotError(f"unknown tag {tags[0]!r}; a snapshot from a newer agentjax?")
    return {k: decode(v) for k, v in x.items()}


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list | tuple) else k


def dumps(state: dict) -> bytes:
    """The snapshot file's bytes for ``state`` (a dict of named fields)."""
    body = json.dumps(encode(state), separators=(",", ":")).encode()
    head = {"format": FORMAT, "version": VERSION, "body_bytes": len(body), "crc32": zlib.crc32(body)}
    return json.dumps(head).encode() + b"\n" + body


def loads(blob: bytes, *, source: str = "snapshot", fields: tuple[str, ...] = ()) -> dict:
    """The state written by :func:`dumps`; checks format, version, length, CRC and ``fields``."""
    line, sep, body = bytes(blob).partition(b"\n")
    try:
        head = json.loads(line) if sep else None
    except (ValueError, UnicodeDecodeError):
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise SnapshotError(
            f"{source} is not an agentjax scheduler snapshot (no '{FORMAT}' "
            "header; an old pickled snapshot or another file)"
        )
    if head.get("version") != VERSION:
        v = head.get("version")
        who = "an older" if isinstance(v, int) and v < VERSION else "a newer"
        raise SnapshotError(
            f"{source} has snapshot format version {v!r}; this agentjax reads version {VERSION} "
            f"only ({who} agentjax wrote it: resume with that version, or start a new workdir)"
        )
    if len(body) != head.get("body_bytes") or zlib.crc32(body) != head.get("crc32"):
        raise SnapshotError(
            f"{source} is truncated or corrupted: {len(body)} of "
            f"{head.get('body_bytes')} body bytes, CRC "
            f"{'ok' if zlib.crc32(body) == head.get('crc32') else 'mismatch'}"
        )
    try:
        state = decode(json.loads(body))
    except SnapshotError as e:
        raise SnapshotError(f"{source}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a body that passed the CRC but does not decode
        raise SnapshotError(f"{source}: cannot decode: {type(e).__name__}: {e}") from None
    missing = [f for f in fields if f not in state]
    if missing:
        raise SnapshotError(f"{source} lacks the fields {missing}")
    return state
