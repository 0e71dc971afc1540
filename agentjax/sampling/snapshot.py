"""The scheduler snapshot file: an explicit, versioned structure of named fields (no pickle).

Layout: one JSON header line, then the body (JSON of the state, UTF-8)::

    {"format": "agentjax-scheduler-snapshot", "version": 2, "body_bytes": N, "crc32": C}
    {"version": 3, "steps": 3, "records": [...], "clock": {...}, ...}

The body's fields are :data:`SNAPSHOT_FIELDS` (the scheduler attributes of the same name) plus
``executor`` and ``gate``; :func:`dump_scheduler` writes them and :func:`load_scheduler` puts
them back (``Scheduler.snapshot`` / ``Scheduler.restore``). Values beyond JSON are
the tagged objects of :mod:`agentjax.tagjson` (the journal's encoding; one allow-list,
:data:`~agentjax.tagjson.TYPES`).

Reading builds only the types in :data:`TYPES`, so a snapshot file never runs code (unpickling
does). A wrong format, a newer version, a truncated or corrupted body (length or CRC mismatch), an
unknown tag or type: each raises :class:`SnapshotError` naming what is wrong.
"""

from __future__ import annotations

import json
import zlib

from agentjax.sampling.clock import SimulatedExecutor
from agentjax.sampling.queue import SubmissionWindow
from agentjax.tagjson import TYPES, RestoredError, TagError, decode, encode

__all__ = [
    "FORMAT",
    "TYPES",
    "VERSION",
    "RestoredError",
    "SNAPSHOT_FIELDS",
    "SnapshotError",
    "decode",
    "dump_scheduler",
    "dumps",
    "encode",
    "load_scheduler",
    "loads",
]

# Version 2: the batch size is the scheduler's ``batch_size`` field (no longer in its two
# configs); choices are enum members. A version-1 snapshot is rejected (start a new workdir).
FORMAT, VERSION = "agentjax-scheduler-snapshot", 2


# The snapshot's fields (besides "executor", the clock and its in-flight results, and "gate",
# dynamic sampling's held groups): the scheduler attributes of the same name. "task" and "traj"
# hold only unresolved submissions and "batches" only indices, weights and admissions: a snapshot
# does not grow with every trajectory trained (the journal holds those).
SNAPSHOT_FIELDS = (
    "cfg", "scfg", "batch_size", "params", "st", "version", "steps", "records", "task", "traj", "state",
    "running", "round_start", "paused", "completed", "window", "batch", "batches",
    "learner_ticket", "step_end_times", "events", "round_open", "round_queue", "retry_queue",
    "retry_of", "retry_states",
)  # fmt: skip


class SnapshotError(TagError):
    """A snapshot that cannot be written or read; the message says what and why."""


def dumps(state: dict) -> bytes:
    """The snapshot file's bytes for ``state`` (a dict of named fields)."""
    try:
        body = json.dumps(encode(state), separators=(",", ":")).encode()
    except TagError as e:
        raise SnapshotError(f"cannot snapshot: {e}") from None
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
    except TagError as e:
        raise SnapshotError(f"{source}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a body that passed the CRC but does not decode
        raise SnapshotError(f"{source}: cannot decode: {type(e).__name__}: {e}") from None
    missing = [f for f in fields if f not in state]
    if missing:
        raise SnapshotError(f"{source} lacks the fields {missing}")
    return state


def dump_scheduler(s) -> bytes:
    """A virtual-clock scheduler's run state as snapshot bytes (real threads cannot be serialised).
    Trajectories already resolved (trained, rejected, ...) are left out: the journal holds them."""
    if not isinstance(s.ex, SimulatedExecutor):
        raise TypeError("only a virtual-clock run (SimulatedExecutor) can be snapshotted")
    executor = s.ex.snapshot_state()  # first: a batching executor runs deferred rounds
    live = {i for i, rec in enumerate(s.records) if rec.terminal is None}
    state = {name: getattr(s, name) for name in SNAPSHOT_FIELDS}
    state.update(
        task={i: t for i, t in s.task.items() if i in live},
        traj={i: t for i, t in s.traj.items() if i in live},
        window={"head": s.window.head, "resolved": sorted(s.window._resolved)},
        batches=[[c._replace(trajectory=None) for c in b] for b in s.batches],
        executor=executor,
        gate=s.gate,
    )
    return dumps(state)


def load_scheduler(obj, blob: bytes, *, source: str, executor=None, trajectories=None) -> None:
    """Sets the run state of :func:`dump_scheduler` on ``obj`` (a bare ``Scheduler``), with
    ``executor`` (a fresh one of the snapshot's kind; default SimulatedExecutor) restored and the
    trained batches' trajectories taken from ``trajectories`` (index -> trajectory) where given."""
    state = loads(blob, source=source, fields=(*SNAPSHOT_FIELDS, "executor"))
    ex = SimulatedExecutor() if executor is None else executor
    if state["executor"].get("kind") != type(ex).__name__:
        raise SnapshotError(
            f"{source} was taken with a {state['executor'].get('kind')}; "
            f"pass executor= of that kind (got {type(ex).__name__})"
        )
    ex.load_snapshot_state(state["executor"])
    for name in SNAPSHOT_FIELDS:
        setattr(obj, name, state[name])
    obj.ex = ex
    obj.gate = state.get("gate")  # None: no dynamic sampling (or a snapshot from before it)
    obj.window = SubmissionWindow()
    obj.window.head, obj.window._resolved = state["window"]["head"], state["window"]["resolved"]
    obj.batch = [c._replace(trajectory=obj.traj.get(c.index, c.trajectory)) for c in obj.batch]
    have = trajectories or {}
    obj.batches = [[c._replace(trajectory=have.get(c.index)) for c in b] for b in obj.batches]
