"""TensorBoard event files without TensorFlow: TFRecord framing and a hand-encoded ``Event`` proto.

    w = EventWriter(logdir)
    w.scalars(step, {"loss/total": 0.3, "eval/success": 0.5})
    w.close()

A file is a sequence of records, each framed as TFRecord: ``uint64 length``, ``uint32 masked
crc32c(length bytes)``, ``data``, ``uint32 masked crc32c(data)`` (little endian). Each ``data`` is a
serialised ``tensorflow.Event``::

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }

The first record carries ``file_version = "brain.Event:2"``. The file name is
``events.out.tfevents.<unix time>.<host>.<pid>.<n>`` (TensorBoard reads every file whose name
contains ``tfevents``). Records carry the wall time, so event files are not bitwise reproducible;
nothing else in a run reads them. crc32c is table-driven pure Python (a few KB per step).
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from typing import Any

FILE_VERSION = "brain.Event:2"
_MASK_DELTA = 0xA282EAD8


def _crc_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return tuple(table)


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; ``crc32c(b"123456789") == 0xE3069283``."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked crc, the data, the data's masked crc."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negative int64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes_field(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def encode_event(wall_time: float, step: int, *, file_version: str | None = None,
                 scalars: Mapping[str, float] | None = None) -> bytes:
    """A serialised ``Event`` (fields in number order, as protobuf writes them)."""
    out = _key(1, 1) + struct.pack("<d", wall_time) + _key(2, 0) + _varint(int(step))
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(
            _bytes_field(1, _bytes_field(1, tag.encode()) + _key(2, 5) + struct.pack("<f", float(v)))
            for tag, v in scalars.items()
        )
        out += _bytes_field(5, values)
    return out


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


class EventWriter:
    """Appends scalar summaries to one new event file under ``logdir``.

    Every call opens the file in append mode, writes whole records and flushes, so no handle is
    held between calls and a killed process leaves only complete records (a torn tail record is
    skipped by TensorBoard's reader).
    """

    _counter = 0

    def __init__(self, logdir: str | os.PathLike, *, filename_suffix: str = ""):
        os.makedirs(logdir, exist_ok=True)
        EventWriter._counter += 1
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}."
                f"{EventWriter._counter}{filename_suffix}")
        self.path = os.path.join(os.fspath(logdir), name)
        self._write([encode_event(time.time(), 0, file_version=FILE_VERSION)])

    def _write(self, events: Iterable[bytes]) -> None:
        with open(self.path, "ab") as f:
            f.write(b"".join(frame(e) for e in events))
            f.flush()

    def scalars(self, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        """One ``Event`` at ``step`` holding every value (NaN and inf are written as they are)."""
        values = {str(k): float(v) for k, v in values.items()}
        if values:
            self._write([encode_event(time.time() if wall_time is None else wall_time, step,
                                      scalars=values)])

    def flush(self) -> None:
        """Records are flushed as they are written; this makes them durable (fsync)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.flush()


_WRITERS: dict[str, EventWriter] = {}


def write_rows(logdir: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> None:
    """Writes each metrics row's numeric fields (nested dicts flattened with ``/``) at its
    ``step``; one event file per ``logdir`` per process. Rows without a step are skipped."""
    key = os.path.abspath(logdir)
    if key not in _WRITERS or not os.path.exists(_WRITERS[key].path):
        _WRITERS[key] = EventWriter(key)
    w = _WRITERS[key]
    for row in rows:
        step = row.get("step")
        if isinstance(step, (int, float)) and not (isinstance(step, float) and math.isnan(step)):
            w.scalars(int(step), flatten_scalars({k: v for k, v in row.items() if k != "step"}))
