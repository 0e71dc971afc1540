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
