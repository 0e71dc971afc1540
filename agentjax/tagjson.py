"""Tagged JSON: the explicit encoding of the host records agentjax writes to disk (no pickle).

Used by the training journal (``learner/journal.py``) and the scheduler snapshot
(``sampling/snapshot.py``): one encoding, one allow-list. :func:`encode` turns a record into a
JSON-compatible tree; values beyond JSON are tagged objects:

* ``{"$nd": [dtype, shape, base64]}``: a numpy array; ``{"$np": [dtype, base64]}``: a numpy scalar;
* ``{"$tuple": [...]}``; ``{"$set": [...], "frozen": bool}``; ``{"$map": [[key, value], ...]}``
  (a dict whose keys are not strings);
* ``{"$float": "nan" | "inf" | "-inf"}``;
* ``{"$obj": "module:qualname", "f": {field: value}}``: an instance of one of :data:`TYPES`
  (dataclasses and NamedTuples), rebuilt by calling its constructor with those fields;
* ``{"$enum": name, "v": value}``: a member of one of :data:`TYPES`' enums;
* ``{"$error": type name, "repr": ...}``: an exception, rebuilt as :class:`RestoredError` with the
  same ``repr``.

:func:`decode` builds only the types in :data:`TYPES` (by name, importing their module), so reading
never runs other code; an unknown tag or type, or fields a type no longer has (a class refactored
since the file was written), raise :class:`TagError` naming it.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import math
from typing import Any

import numpy as np

# Every type a stored record may hold ("module:qualname"; an explicit allow-list).
TYPES = frozenset({
    "agentjax.trajectory:Trajectory", "agentjax.trajectory:Turn", "agentjax.trajectory:StopReason",
    "agentjax.sampling.runlog:Record", "agentjax.sampling.runlog:Consumed",
    "agentjax.sampling.runlog:SchedulerConfig", "agentjax.sampling.queue:Caps",
    "agentjax.sampling.queue:SchedulerMode", "agentjax.sampling.queue:ResumeMode",
    "agentjax.sampling.queue:Clock", "agentjax.sampling.envpool:EnvPoolKind",
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
    "agentjax.sampling.groups:UniformGroups", "agentjax.sampling.groups:GroupGate",
    "agentjax.sampling.groups:PassGate", "agentjax.sampling.schedstate:SchedulerState",
})  # fmt: skip
_ALLOWED: set[str] = set(TYPES)  # TYPES and the types a user's task declares (allow)


def allow(*types: type) -> None:
    """Adds a user task's record types (its task objects' dataclasses) to the allow-list, so
    its tasks can sit in the journal and the scheduler snapshot (``TaskSuite.record_types``)."""
    for t in types:
        if not (dataclasses.is_dataclass(t) or hasattr(t, "_fields") or issubclass(t, enum.Enum)):
            raise TagError(f"{t!r}: only dataclasses, NamedTuples and enums can be stored")
        _ALLOWED.add(f"{t.__module__}:{t.__qualname__}")


class TagError(ValueError):
    """A value that cannot be encoded, or a tree that cannot be decoded; says what and why."""


class RestoredError(RuntimeError):
    """An exception as read back (same ``repr`` as the original)."""

    def __init__(self, type_name: str, text: str):
        super().__init__(text)
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text


def _resolve(name: str):
    if name not in _ALLOWED:
        raise TagError(f"unknown type {name!r} (not in agentjax.tagjson.TYPES); written by a newer agentjax?")
    module, attr = name.split(":")
    return getattr(importlib.import_module(module), attr)


def _type_name(x) -> str:
    name = f"{type(x).__module__}:{type(x).__qualname__}"
    if name in _ALLOWED:
        return name
    raise TagError(
        f"cannot encode a {type(x).__module__}.{type(x).__qualname__}: not one of the "
        f"registered types {sorted(_ALLOWED)} (agentjax/tagjson.py; a user task lists its "
        "task types in its suite's record_types)"
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
    raise TagError(f"cannot encode a {type(x).__module__}.{type(x).__qualname__}")


def _build(name: str, fields: dict):
    cls = _resolve(name)
    try:
        return cls(**fields)
    except TypeError as e:  # a field added, removed or renamed since the record was written
        raise TagError(f"cannot rebuild a {name} from the fields {sorted(fields)}: {e}") from None


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
        return _build(x["$obj"], {k: decode(v) for k, v in x["f"].items()})
    tags = [k for k in x if k.startswith("$")]
    if tags:
        raise TagError(f"unknown tag {tags[0]!r}; written by a newer agentjax?")
    return {k: decode(v) for k, v in x.items()}


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list | tuple) else k
