"""Where a dataset task's records come from: a JSONL file, an ArrayRecord file, or a grain source.

    task.kwargs.path=data.jsonl                  one JSON object a line
    task.kwargs.path=data.array_record           grain.sources.ArrayRecordDataSource, JSON records
    task.kwargs.source=my_pkg.data:make_source   any grain RandomAccessDataSource (or a factory
                                                 of one, called with no arguments)

A source is anything with grain's random-access protocol (``__len__`` and ``__getitem__``:
``grain.sources.RandomAccessDataSource``, checked with grain's own ``isinstance``; a
``grain.MapDataset`` or a list qualifies); each record it yields is a dict, or JSON text or bytes
of one (what an ArrayRecord file of ``json.dumps(record).encode()`` holds). Every record is read
once at start and checked (a dict with a string ``prompt``): an error names the field and the
record's number. The held-out split takes the same forms (``heldout_path``, ``heldout_source``).
"""

from __future__ import annotations

import json
from pathlib import Path

import grain

from agentjax import importpath
from agentjax.policy.config import ConfigError

ARRAY_RECORD = ".array_record"


def checked(rec, where: str) -> dict:
    """A record as a dict with a string ``prompt`` (JSON decoded); ``where`` names it in errors."""
    if isinstance(rec, bytes | str):
        try:
            rec = json.loads(rec)
        except ValueError as e:
            raise ConfigError(f"{where} is not JSON ({e})") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str):
        raise ConfigError(f"{where} has no string 'prompt'")
    return rec


def read_jsonl(path: str, field: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{field}={path!r} is not a file (a JSONL dataset: one JSON object a line)")
    lines = enumerate(p.read_text().splitlines(), 1)
    return [checked(line, f"{field}={path!r}: line {n}") for n, line in lines if line.strip()]


def read_source(source, field: str) -> list[dict]:
    """Every record of a random-access source, in order, checked."""
    if not isinstance(source, grain.sources.RandomAccessDataSource):
        raise ConfigError(
            f"{field}: a {type(source).__name__} is not a random-access data source "
            "(grain's protocol: __len__ and __getitem__)"
        )
    return [checked(source[i], f"{field}: record {i + 1}") for i in range(len(source))]


def read_path(path: str, field: str) -> list[dict]:
    """A JSONL file, or an ArrayRecord file (``*.array_record``) read through grain."""
    if not path.endswith(ARRAY_RECORD):
        return read_jsonl(path, field)
    if not Path(path).is_file():
        raise ConfigError(f"{field}={path!r} is not a file (an ArrayRecord file of JSON records)")
    try:
        source = grain.sources.ArrayRecordDataSource(path)
    except ImportError as e:
        raise ConfigError(
            f"{field}={path!r}: reading ArrayRecord needs grain and array_record ({e})"
        ) from None
    except Exception as e:  # noqa: BLE001 - the C++ reader's own error on a malformed file
        raise ConfigError(f"{field}={path!r}: not a readable ArrayRecord file ({e})") from None
    return read_source(source, f"{field}={path!r}")


def load_source(name: str, field: str) -> list[dict]:
    """The records of ``package.module:attr``: a data source, or a factory called with no arguments."""
    try:
        obj = importpath.load(name, field)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, grain.sources.RandomAccessDataSource)):
        obj = obj()
    return read_source(obj, f"{field}={name!r}")


def read(path: str, source: str, field: str) -> list[dict]:
    """The records of ``task.kwargs.<field>`` (a path) or ``<field's source>`` (an import path)."""
    src_field = "task.kwargs.source" if field == "task.kwargs.path" else "task.kwargs.heldout_source"
    if path and source:
        raise ConfigError(f"{field} and {src_field} are both set; name one place the records come from")
    return read_path(path, field) if path else load_source(source, src_field)


def write_array_record(path: str, recs) -> int:
    """Writes ``recs`` (dicts) as an ArrayRecord file of JSON records (``path=*.array_record``)."""
    from array_record.python import array_record_module  # noqa: PLC0415

    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    n = 0
    for rec in recs:
        writer.write(json.dumps(rec).encode())
        n += 1
    writer.close()
    return n
