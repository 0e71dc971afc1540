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
