"""A crash-safe append-only journal of finished, verified trajectories.

Layout: one header line, then records, each ``[u32 length][u32 crc32][body]``::

    {"format": "agentjax-journal", "version": 2}\n
    [len][crc]{"$obj": "agentjax.trajectory:Trajectory", "f": {...}}[len][crc]...

A body is a record as tagged JSON (:mod:`agentjax.tagjson`: named fields, numpy arrays as
dtype + shape + base64), UTF-8. Reading builds only the allow-listed types, so a journal never runs
code; a record whose type was refactored since it was written raises :class:`JournalError` naming
the file and record instead of unpickling silently into a different object. A file without the
header (version 1 stored pickled records and had none) or with another version is rejected with a
:class:`JournalError` that says so: such a journal cannot be resumed, start a new workdir.

Guarantees (tests/learner/test_journal.py):

* every byte of an append is written and ``fsync``'d before ``append`` returns; a short write
  (full disk, quota) raises :class:`JournalError` naming the file, and the partial bytes are cut
  off again, so the journal never holds a torn record after a failed append;
* a torn or corrupt tail (a crash mid-write at any byte, the header included, or a zero-filled
  tail) is detected: :meth:`Journal.scan`
  reports the intact records and where the tail starts, and :meth:`Journal.append` refuses to
  append after one;
* :meth:`Journal.truncate` (resume) keeps exactly the first ``count`` records: it refuses when
  fewer intact records exist (they were lost), and writes the kept prefix (byte for byte) to a
  temporary copy that it reads back and checks before atomically replacing the journal (never
  adopts a torn copy).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Any, NamedTuple

from agentjax import tagjson

FORMAT, VERSION = "agentjax-journal", 2
HEADER = json.dumps({"format": FORMAT, "version": VERSION}).encode() + b"\n"
_HEAD = struct.Struct("<II")


class JournalError(RuntimeError):
    """A journal that cannot be written or read, or that lost records; the message names the file."""


class Scan(NamedTuple):
    records: list[Any]
    valid_bytes: int  # the intact prefix; a torn tail starts here
    total_bytes: int

    @property
    def torn(self) -> bool:
        return self.valid_bytes != self.total_bytes


def _encode(records: list[Any], path: str) -> bytes:
    buf = bytearray()
    for r in records:
        try:
            data = json.dumps(tagjson.encode(r), separators=(",", ":")).encode()
        except tagjson.TagError as e:
            raise JournalError(f"{path}: cannot journal a record: {e}") from None
        buf += _HEAD.pack(len(data), zlib.crc32(data)) + data
    return bytes(buf)


def _write_all(fd: int, data: bytes, path: str) -> None:
    """Writes every byte of ``data`` (retrying short writes) and fsyncs; raises on no progress."""
    view, done = memoryview(data), 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as e:
            raise JournalError(f"{path}: write failed after {done} of {len(data)} bytes: {e}") from e
        if n <= 0:
            raise JournalError(f"{path}: short write ({done} of {len(data)} bytes): disk full?")
        done += n
    try:
        os.fsync(fd)
    except OSError as e:
        raise JournalError(f"{path}: fsync failed: {e}") from e


def _header_end(data: bytes, path: str) -> int | None:
    """Where the records start (None: the header itself is torn); raises on another format."""
    if data.startswith(HEADER):
        return len(HEADER)
    if HEADER.startswith(data):
        return None  # empty, or a crash while the first append wrote the header
    line = data.partition(b"\n")[0]
    try:
        head = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        head = None
    if isinstance(head, dict) and head.get("format") == FORMAT:
        raise JournalError(
            f"{path} has journal format version {head.get('version')!r}; this agentjax reads "
            f"version {VERSION} only: it was written by another agentjax version; start a new "
            "workdir (or resume with the agentjax that wrote it)"
        )
    raise JournalError(
        f"{path} is not an agentjax journal (no '{FORMAT}' header): most likely written by an "
        "agentjax older than the JSON journal (its records are pickled and are not read); start "
        "a new workdir (or resume with the agentjax that wrote it)"
    )


def _walk(data: bytes, path: str) -> tuple[list[tuple[int, int]], int]:
    """(offset, length) of each intact record body, and the end of the intact prefix."""
    off = _header_end(data, path)
    if off is None:
        return [], 0
    out = []
    while off + _HEAD.size <= len(data):
        n, crc = _HEAD.unpack_from(data, off)
        body = data[off + _HEAD.size : off + _HEAD.size + n]
        # torn tail; an empty body is never a record (a zero-filled tail reads as length 0, crc 0)
        if n == 0 or len(body) < n or zlib.crc32(body) != crc:
            break
        out.append((off + _HEAD.size, n))
        off += _HEAD.size + n
    return out, off


def _decode(body: bytes, path: str, index: int) -> Any:
    try:
        return tagjson.decode(json.loads(body))
    except tagjson.TagError as e:
        raise JournalError(f"{path}: record {index}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a body that passed the CRC but does not decode
        raise JournalError(f"{path}: record {index} cannot be decoded: {type(e).__name__}: {e}") from None


def _read(path: str) -> bytes:
    if not os.path.exists(path):
        return b""
    with open(path, "rb") as f:
        return f.read()


class Journal:
    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._end: int | None = None  # the intact length after this object's last append

    def append(self, records: list[Any]) -> None:
        """Appends ``records`` durably, or raises :class:`JournalError` leaving the file as it was."""
        if not records:
            return
        data = _encode(records, self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            start = os.fstat(fd).st_size
            if self._end != start:  # first append, or the file changed under us: check it
                self._end = _walk(_read(self.path), self.path)[1]
            if start == 0:
                data = HEADER + data
            if self._end != start:
                raise JournalError(
                    f"{self.path}: torn tail at byte {self._end} of {start}; "
                    "refusing to append after it (resume repairs the journal "
                    "from the last checkpoint)"
                )
            os.lseek(fd, start, os.SEEK_SET)
            try:
                _write_all(fd, data, self.path)
            except JournalError:
                os.ftruncate(fd, start)  # never leave a torn record behind a failed append
                os.fsync(fd)
                raise
            self._end = start + len(data)
        finally:
            os.close(fd)

    def scan(self) -> Scan:
        """The intact records, the length of the intact prefix and the file's length."""
        data = _read(self.path)
        spans, end = _walk(data, self.path)
        records = [_decode(data[o : o + n], self.path, i) for i, (o, n) in enumerate(spans)]
        return Scan(records, end, len(data))

    def read(self) -> list[Any]:
        """The intact records (a torn tail is left out; :meth:`scan` reports it)."""
        return self.scan().records

    def truncate(self, count: int) -> None:
        """Keeps exactly the first ``count`` records (resuming from a checkpoint that journaled
        ``count``); raises :class:`JournalError` if fewer intact records exist."""
        raw = _read(self.path)
        spans, valid = _walk(raw, self.path)  # the kept records are copied as bytes
        torn = valid != len(raw)
        if len(spans) < count:
            raise JournalError(
                f"{self.path} holds {len(spans)} intact records but the checkpoint "
                f"journaled {count}: records {len(spans)}..{count - 1} are lost"
                + (f" (torn at byte {valid} of {len(raw)})" if torn else "")
            )
        if count == len(spans) and not torn:
            return  # already exactly the kept prefix
        tmp = self.path + ".tmp"
        if os.path.exists(tmp):
            os.remove(tmp)
        data = raw[: spans[count - 1][0] + spans[count - 1][1]] if count else HEADER
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data, tmp)
        except JournalError:
            os.remove(tmp)
            raise
        finally:
            os.close(fd)
        check = Journal(tmp).scan()  # read back: adopt only a complete, intact copy
        if check.torn or len(check.records) != count or check.total_bytes != len(data):
            os.remove(tmp)
            raise JournalError(
                f"{tmp}: the rewritten journal is not intact ({len(check.records)} "
                f"of {count} records, {check.total_bytes} of {len(data)} bytes); "
                f"{self.path} left unchanged"
            )
        os.replace(tmp, self.path)
        self._end = None
        dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
