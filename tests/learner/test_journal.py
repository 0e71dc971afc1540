"""The crash-safe journal: appended records survive; a torn tail loses only that record."""

import os

from agentjax.learner.journal import Journal


def test_append_read_and_torn_tail(tmp_path):
    j = Journal(tmp_path / "j.bin")
    assert j.read() == []
    j.append([{"a": 1}, {"b": [1, 2]}])
    j.append([{"c": 3}])
    assert j.read() == [{"a": 1}, {"b": [1, 2]}, {"c": 3}]
    size = os.path.getsize(j.path)
    with open(j.path, "ab") as f:  # a crash in the middle of the next write
        f.write(b"\x40\x00\x00\x00\x01\x02")
    assert j.read() == [{"a": 1}, {"b": [1, 2]}, {"c": 3}]
    with open(j.path, "r+b") as f:  # a corrupted record body is detected by its checksum
        f.seek(size - 1)
        f.write(b"\xff")
    assert j.read() == [{"a": 1}, {"b": [1, 2]}]


def test_truncate_keeps_prefix(tmp_path):
    j = Journal(tmp_path / "j.bin")
    j.append(list(range(5)))
    j.truncate(2)
    assert j.read() == [0, 1]
    j.truncate(0)
    assert j.read() == []


def _full_disk(monkeypatch, free_bytes):
    """os.write that stores at most ``free_bytes`` more bytes, then fails like a full disk."""
    import errno

    real, left = os.write, [free_bytes]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data)[: left[0]])
        left[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)
    return left


def test_full_disk_append_raises_and_keeps_every_committed_record(tmp_path, monkeypatch):
    import pytest

    from agentjax.learner.journal import JournalError

    j = Journal(tmp_path / "j.bin")
    j.append(list(range(16)))
    size = os.path.getsize(j.path)
    left = _full_disk(monkeypatch, 100)  # room for a few of the next 24 records, not all
    with pytest.raises(JournalError, match="j.bin"):
        j.append(list(range(16, 40)))
    assert left[0] == 0  # the write really was cut short
    assert os.path.getsize(j.path) == size  # the partial bytes were cut off again
    assert j.read() == list(range(16))
    monkeypatch.undo()  # space freed: appending works and nothing is torn
    j.append(list(range(16, 40)))
    assert j.read() == list(range(40))


def test_a_write_that_makes_no_progress_raises(tmp_path, monkeypatch):
    import pytest

    from agentjax.learner.journal import JournalError

    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    j = Journal(tmp_path / "j.bin")
    with pytest.raises(JournalError, match="short write"):
        j.append([1, 2, 3])
    monkeypatch.undo()
    assert j.read() == []


def test_append_refuses_after_a_torn_tail(tmp_path):
    import pytest

    from agentjax.learner.journal import JournalError

    j = Journal(tmp_path / "j.bin")
    j.append([1, 2])
    with open(j.path, "ab") as f:  # a crash in the middle of a later write
        f.write(b"\x40\x00\x00\x00\x01\x02")
    scan = Journal(j.path).scan()
    assert scan.torn and scan.records == [1, 2] and scan.total_bytes == scan.valid_bytes + 6
    with pytest.raises(JournalError, match="torn tail"):
        Journal(j.path).append([3])  # records after the garbage would be unreadable
    Journal(j.path).truncate(2)  # what resume does: the torn tail is cut, the records kept
    j2 = Journal(j.path)
    j2.append([3])
    assert j2.read() == [1, 2, 3] and not j2.scan().torn


def test_truncate_refuses_when_committed_records_are_missing(tmp_path):
    import pytest

    from agentjax.learner.journal import JournalError

    j = Journal(tmp_path / "j.bin")
    j.append(list(range(5)))
    with pytest.raises(JournalError, match=r"holds 5 intact records but the checkpoint journaled 7"):
        j.truncate(7)
    assert j.read() == list(range(5))


def test_truncate_never_adopts_a_torn_copy(tmp_path, monkeypatch):
    import pytest

    from agentjax.learner.journal import JournalError

    j = Journal(tmp_path / "j.bin")
    j.append(list(range(40)))
    before = open(j.path, "rb").read()
    _full_disk(monkeypatch, 50)  # the rewritten copy cannot be completed
    with pytest.raises(JournalError):
        j.truncate(30)
    monkeypatch.undo()
    assert open(j.path, "rb").read() == before
    assert not os.path.exists(j.path + ".tmp")
    j.truncate(30)
    assert j.read() == list(range(30))


def test_every_append_is_fsynced(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    j = Journal(tmp_path / "j.bin")
    j.append([1])
    j.append([2])
    assert len(calls) == 2


def test_a_pickled_journal_from_an_older_agentjax_is_rejected_by_name(tmp_path):
    """The pre-JSON layout ([len][crc][pickle], no header) is refused, never unpickled."""
    import pickle
    import struct
    import zlib

    import pytest

    from agentjax.learner.journal import JournalError

    path = tmp_path / "journal.bin"
    body = pickle.dumps({"a": 1})
    path.write_bytes(struct.pack("<II", len(body), zlib.crc32(body)) + body)
    for call in (lambda j: j.read(), lambda j: j.append([1]), lambda j: j.truncate(0)):
        with pytest.raises(
            JournalError, match=r"journal.bin is not an agentjax journal.*start a new workdir"
        ):
            call(Journal(path))
    assert path.read_bytes()[8:] == body  # left as it was


def test_another_format_version_is_rejected_by_name(tmp_path):
    import pytest

    from agentjax.learner.journal import JournalError

    path = tmp_path / "j.bin"
    path.write_bytes(b'{"format": "agentjax-journal", "version": 99}\n')
    with pytest.raises(JournalError, match=r"j.bin has journal format version 99; .* reads version 2"):
        Journal(path).read()


def test_a_torn_header_is_a_torn_tail(tmp_path):
    """A crash while the first append wrote the header: no records, and resume repairs it."""
    from agentjax.learner.journal import HEADER

    path = tmp_path / "j.bin"
    path.write_bytes(HEADER[:7])
    scan = Journal(path).scan()
    assert scan.records == [] and scan.torn and scan.valid_bytes == 0
    Journal(path).truncate(0)
    j = Journal(path)
    j.append([1])
    assert j.read() == [1]


def test_trajectories_round_trip_exactly(tmp_path):
    import numpy as np

    from agentjax.trajectory import StopReason, Trajectory, Turn

    turn = Turn(
        context=np.arange(5, dtype=np.int32),
        action=np.array([7, 8], np.int32),
        logp=np.array([-0.1, np.float32(-1e-8)], np.float32),
        logp_raw=np.array([-0.2, -0.3], np.float32),
        version=np.array([3, 4], np.int32),
        observation=np.zeros(0, np.int32),
        routes=np.ones((7, 2, 1), np.int32),
        pauses=(1,),
    )
    t = Trajectory(
        "t1", "easy", [turn], StopReason.FINISHED, rewards=[0.5], final_reward=None, label="pass",
        reward_evidence={"failed_tests": ["f(1)"], "rubric": {"score": float("nan")}},
        timings={"generation": 0.25}, submit_index=3,
    )  # fmt: skip
    j = Journal(tmp_path / "j.bin")
    j.append([t])
    (back,) = Journal(j.path).read()
    assert type(back) is Trajectory and back.stop_reason is StopReason.FINISHED
    for name in ("context", "action", "logp", "logp_raw", "version", "observation", "routes"):
        a, b = getattr(turn, name), getattr(back.turns[0], name)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name
    assert back.turns[0].pauses == (1,) and back.submit_index == 3 and back.final_reward is None
    assert back.reward_evidence["failed_tests"] == ["f(1)"] and back.timings == {"generation": 0.25}


def test_reading_builds_only_registered_types_and_names_a_refactored_one(tmp_path):
    import json
    import struct
    import zlib

    import pytest

    from agentjax.learner.journal import HEADER, JournalError

    def journal(record):
        body = json.dumps(record).encode()
        path = tmp_path / "j.bin"
        path.write_bytes(HEADER + struct.pack("<II", len(body), zlib.crc32(body)) + body)
        return Journal(path)

    evil = {"$obj": "subprocess:Popen", "f": {"args": ["touch", str(tmp_path / "pwned")]}}
    with pytest.raises(JournalError, match=r"j.bin: record 0: unknown type 'subprocess:Popen'"):
        journal(evil).read()
    assert not (tmp_path / "pwned").exists()
    renamed = {"$obj": "agentjax.trajectory:Turn", "f": {"ctx": []}}  # a field since renamed
    with pytest.raises(JournalError, match=r"record 0: cannot rebuild a agentjax.trajectory:Turn"):
        journal(renamed).read()


def test_an_unregistered_type_is_refused_before_anything_is_written(tmp_path):
    import pytest

    from agentjax.learner.journal import JournalError

    j = Journal(tmp_path / "j.bin")
    j.append([1])
    with pytest.raises(JournalError, match=r"cannot journal a record: cannot encode a .*Thing"):
        j.append([2, type("Thing", (), {})()])
    assert j.read() == [1]


def _bytes_of(tmp_path, records):
    j = Journal(tmp_path / "ref.bin")
    j.append(records)
    return open(j.path, "rb").read()


def test_a_record_torn_at_every_byte_is_found_and_repaired(tmp_path):
    """The last record cut at each byte (its length, its checksum, its body) or zero-filled from
    there on (a crash after the file grew but before its data blocks were written): the scan
    reports the intact prefix and the tear at once; truncate repairs it; appends go on. Before,
    a zero-filled header read as an intact empty record (length 0, crc32 of nothing is 0)."""
    import time

    records = [{"a": 1}, {"b": [1, 2]}, {"c": "x" * 40}]
    full = _bytes_of(tmp_path, records)
    prefix = Journal(tmp_path / "p.bin")
    prefix.append(records[:2])
    start = os.path.getsize(prefix.path)
    t0 = time.monotonic()
    for cut in range(start, len(full)):
        for tail in (b"", b"\x00" * (len(full) - cut)) if cut > start else (b"\x00" * (len(full) - cut),):
            path = tmp_path / f"torn_{cut}_{len(tail)}.bin"
            path.write_bytes(full[:cut] + tail)
            j = Journal(path)
            scan = j.scan()
            assert scan.records == records[:2] and scan.torn, (cut, len(tail))
            assert scan.valid_bytes == start
            j.truncate(2)  # the resume's repair
            assert os.path.getsize(path) == start and not j.scan().torn
            j.append(records[2:])
            assert j.read() == records
            path.unlink()
    assert time.monotonic() - t0 < 30  # bounded: no position makes the reader wait or loop
