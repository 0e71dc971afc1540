"""A crash-safe append-only journal of finished, verified trajectories.

Each record is ``[u32 length][u32 crc32][pickle]``. Guarantees (tests/learner/test_journal.py):

* every byte of an append is written and ``fsync``'d before ``append`` returns; a short write
  (full disk, quota) raises :class:`JournalError` naming the file, and the partial bytes are cut
  off again, so the journal never holds a torn record after a failed append;
* a torn or corrupt tail (a crash mid-write) is detected: :meth:`Journal.scan` reports the intact
  records and where the tail starts, and :meth:`Journal.append` refuses to append after one;
* :meth:`Journal.truncate` (resume) keeps exactly the first ``count`` records: it refuses when
  fewer intact records exist (they were lost), and writes the kept prefix to a temporary copy that
  it reads back and checks before atomically replacing the journal (never adopts a torn copy).

The journal is written only by the trainer itself (pickle runs code on read: never read a journal
from an untrusted source).
"""

from __future__ import annotations

import os
import pickle
import struct
import zlib
from typing import Any, NamedTuple

_HEAD = struct.Struct("<II")


class JournalError(RuntimeError):
    """A journal that cannot be written, or that lost records; the message names the file."""


class Scan(NamedTuple):
    records: list[Any]
    valid_bytes: int  # the intact prefix; a torn tail starts here
    total_bytes: int

    @property
    def torn(self) -> bool:
        return self.valid_bytes != self.total_bytes


def _encode(records: list[Any]) -> bytes:
    buf = bytearray()
    for r in records:
        data = pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
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


def _walk(data: bytes) -> tuple[list[tuple[int, int]], int]:
    """(offset, length) of each intact record body, and the end of the intact prefix."""
    out, off = [], 0
    while off + _HEAD.size <= len(data):
        n, crc = _HEAD.unpack_from(data, off)
        body = data[off + _HEAD.size : off + _HEAD.size + n]
        if len(body) < n or zlib.crc32(body) != crc:
            break  # torn tail
        out.append((off + _HEAD.size, n))
        off += _HEAD.size + n
    return out, off


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
        data = _encode(records)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            start = os.fstat(fd).st_size
            if self._end != start:  # first append, or the file changed under us: check it
                self._end = _walk(_read(self.path))[1]
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
        spans, end = _walk(data)
        return Scan([pickle.loads(data[o : o + n]) for o, n in spans], end, len(data))

    def read(self) -> list[Any]:
        """The intact records (a torn tail is left out; :meth:`scan` reports it)."""
        return self.scan().records

    def truncate(self, count: int) -> None:
        """Keeps exactly the first ``count`` records (resuming from a checkpoint that journaled
        ``count``); raises :class:`JournalError` if fewer intact records exist."""
        scan = self.scan()
        if len(scan.records) < count:
            raise JournalError(
                f"{self.path} holds {len(scan.records)} intact records but the checkpoint "
                f"journaled {count}: records {len(scan.records)}..{count - 1} are lost"
                + (f" (torn at byte {scan.valid_bytes} of {scan.total_bytes})" if scan.torn else "")
            )
        keep = scan.records[:count]
        if len(keep) == len(scan.records) and not scan.torn:
            return  # already exactly the kept prefix
        tmp = self.path + ".tmp"
        if os.path.exists(tmp):
            os.remove(tmp)
        data = _encode(keep)
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
