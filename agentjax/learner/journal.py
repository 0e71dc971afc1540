"""A crash-safe append-only journal of finished, verified trajectories.

Each record is ``[u32 length][u32 crc32][pickle]``, written with one ``write`` and ``fsync``;
a reader stops at a torn or corrupt tail (a crash mid-write loses at most that record).
"""

from __future__ import annotations

import os
import pickle
import struct
import zlib
from typing import Any

_HEAD = struct.Struct("<II")


class Journal:
    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)

    def append(self, records: list[Any]) -> None:
        if not records:
            return
        buf = bytearray()
        for r in records:
            data = pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
            buf += _HEAD.pack(len(data), zlib.crc32(data)) + data
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, bytes(buf))
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[Any]:
        if not os.path.exists(self.path):
            return []
        out, data, off = [], open(self.path, "rb").read(), 0
        while off + _HEAD.size <= len(data):
            n, crc = _HEAD.unpack_from(data, off)
            body = data[off + _HEAD.size : off + _HEAD.size + n]
            if len(body) < n or zlib.crc32(body) != crc:
                break  # torn tail
            out.append(pickle.loads(body))
            off += _HEAD.size + n
        return out

    def truncate(self, count: int) -> None:
        """Keeps the first ``count`` records (used when resuming from an earlier checkpoint)."""
        keep = self.read()[:count]
        tmp = self.path + ".tmp"
        if os.path.exists(tmp):
            os.remove(tmp)
        if keep:
            Journal(tmp).append(keep)
        else:
            open(tmp, "wb").close()
        os.replace(tmp, self.path)
