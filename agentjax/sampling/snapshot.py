"""The scheduler snapshot file: an explicit, versioned structure of named fields (no pickle).

Layout: one JSON header line, then the body (JSON of the state, UTF-8)::

    {"format": "agentjax-scheduler-snapshot", "version": 4, "body_bytes": N, "crc32": C}
    {"config": {...}, "machine": {"$obj": "agentjax.sampling.schedstate:SchedulerState", ...}, ...}

The body's fields are :data:`FIELDS`: ``Scheduler.snapshot`` writes them with :func:`dumps`
and ``Scheduler.restore`` reads them with :func:`loads` (the machine state is one value: its
encoding is the snapshot). Values beyond JSON are
the tagged objects of :mod:`agentjax.tagjson` (the journal's encoding; one allow-list,
:data:`~agentjax.tagjson.TYPES`).

Reading builds only the types in :data:`TYPES`, so a snapshot file never runs code (unpickling
does). A wrong format, a newer version, a truncated or corrupted body (length or CRC mismatch), an
unknown tag or type: each raises :class:`SnapshotError` naming what is wrong.
"""

from __future__ import annotations

import json
import zlib

from agentjax.tagjson import TYPES, RestoredError, TagError, decode, encode

__all__ = [
    "FORMAT",
    "TYPES",
    "VERSION",
    "FIELDS",
    "RestoredError",
    "SnapshotError",
    "decode",
    "dumps",
    "encode",
    "loads",
]

# Version 3: the body is the scheduler machine's state (``SchedulerState``) with the driver's
# fields around it. Version 2 (the scheduler object's attributes) and older are rejected (start a
# new workdir).
FORMAT, VERSION = "agentjax-scheduler-snapshot", 4  # 4: one Caps type (was TaskCaps)


# The snapshot's fields: the machine's build (configs, sizes), its state ("machine": live
# submissions only, so a snapshot does not grow with every trajectory trained), the driver's
# parameters and tickets, the account without trajectories (resolved records, the trained batches'
# indices, weights and admissions, the event log; the journal holds the trajectories) and
# "executor", the clock with its in-flight results.
FIELDS = (
    "config", "staleness", "batch_size", "group_size", "machine", "params", "tickets",
    "learner_ticket", "records", "events", "step_end_times", "batches", "executor",
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
