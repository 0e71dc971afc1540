"""TensorBoard event files: read back by an independent parser (CRCs checked) and by TensorBoard."""

import glob
import math
import os
import struct
import zlib

import pytest

from agentjax.diagnostics import tbevents


def _crc32c_bitwise(data: bytes) -> int:
    """Bit-at-a-time CRC-32C, independent of the module's table."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = _crc32c_bitwise(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _records(path):
    blob, out, i = open(path, "rb").read(), [], 0
    while i < len(blob):
        (n,) = struct.unpack_from("<Q", blob, i)
        assert struct.unpack_from("<I", blob, i + 8)[0] == _masked(blob[i:i + 8]), "length crc"
        data = blob[i + 12:i + 12 + n]
        assert struct.unpack_from("<I", blob, i + 12 + n)[0] == _masked(data), "data crc"
        out.append(data)
        i += 16 + n
    assert i == len(blob)
    return out


def _fields(buf):
    """Minimal protobuf reader: [(field, wire, value)]."""
    out, i = [], 0

    def varint():
        nonlocal i
        shift = val = 0
        while True:
            b = buf[i]
            i += 1
            val |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return val

    while i < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append((field, wire, varint()))
        elif wire == 1:
            out.append((field, wire, struct.unpack_from("<d", buf, i)[0]))
            i += 8
        elif wire == 5:
            out.append((field, wire, struct.unpack_from("<f", buf, i)[0]))
            i += 4
        elif wire == 2:
            n = varint()
            out.append((field, wire, buf[i:i + n]))
            i += n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _decode(data):
    ev = {"scalars": {}}
    for field, wire, v in _fields(data):
        if field == 1:
            assert wire == 1
            ev["wall_time"] = v
        elif field == 2:
            assert wire == 0
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif field == 3:
            ev["file_version"] = v.decode()
        elif field == 5:
            for f, _, value in _fields(v):
                assert f == 1
                kv = dict((ff, vv) for ff, _, vv in _fields(value))
                ev["scalars"][kv[1].decode()] = kv[2]
    return ev


def test_crc32c_known_vectors():
    assert tbevents.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert tbevents.crc32c(b"") == 0
    data = bytes(range(256)) * 3
    assert tbevents.crc32c(data) == _crc32c_bitwise(data)
    assert tbevents.crc32c(data) != zlib.crc32(data)  # Castagnoli, not the zlib polynomial


def test_events_round_trip_through_an_independent_parser(tmp_path):
    w = tbevents.EventWriter(tmp_path)
    w.scalars(1, {"loss/total": 0.25, "eval/success": 0.5})
    w.scalars(2, {"loss/total": -1.5e-3, "nan": float("nan")})
    w.scalars(-3, {"x": 7})
    w.close()
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    assert os.path.basename(path) == os.path.basename(w.path)
    events = [_decode(r) for r in _records(path)]
    assert events[0]["file_version"] == "brain.Event:2" and events[0]["scalars"] == {}
    assert [e["step"] for e in events[1:]] == [1, 2, -3]
    assert events[1]["scalars"] == {"loss/total": 0.25, "eval/success": 0.5}
    assert events[2]["scalars"]["loss/total"] == pytest.approx(-1.5e-3)  # float32
    assert math.isnan(events[2]["scalars"]["nan"])
    assert events[3]["scalars"] == {"x": 7.0}
    assert all(e["wall_time"] > 1e9 for e in events)


def test_a_corrupted_byte_is_caught_by_the_parser(tmp_path):
    w = tbevents.EventWriter(tmp_path)
    w.scalars(1, {"a": 1.0})
    blob = bytearray(open(w.path, "rb").read())
    blob[-6] ^= 0xFF
    open(w.path, "wb").write(bytes(blob))
    with pytest.raises(AssertionError, match="crc"):
        _records(w.path)


def test_write_rows_flattens_nested_numeric_fields(tmp_path):
    rows = [{"step": 0, "header": {"demonstrator_success": 0.6, "note": "x"}, "eval/success": 0.4},
            {"step": 1, "loss/total": 0.1, "labels": {"pass": 3, "fail": 5}, "ok": True,
             "list": [1, 2]},
            {"no_step": 1.0}]
    tbevents.write_rows(tmp_path / "tb", rows[:2])
    tbevents.write_rows(tmp_path / "tb", rows[2:])  # same file, appended
    (path,) = glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*"))
    events = [_decode(r) for r in _records(path)]
    assert [e["step"] for e in events] == [0, 0, 1]
    assert events[1]["scalars"] == pytest.approx({"header/demonstrator_success": 0.6, "eval/success": 0.4})
    assert events[2]["scalars"] == {"loss/total": pytest.approx(0.1), "labels/pass": 3.0,
                                    "labels/fail": 5.0, "ok": 1.0}


def test_tensorboard_reads_the_events(tmp_path):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    w = tbevents.EventWriter(tmp_path)
    for step in range(1, 6):
        w.scalars(step, {"loss/total": 1.0 / step, "eval/success": step / 10})
    w.close()
    acc = ea_mod.EventAccumulator(str(tmp_path), size_guidance={ea_mod.SCALARS: 0})
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["eval/success", "loss/total"]
    loss = acc.Scalars("loss/total")
    assert [e.step for e in loss] == [1, 2, 3, 4, 5]
    assert [e.value for e in loss] == pytest.approx([1.0, 0.5, 1 / 3, 0.25, 0.2])
    assert acc.Scalars("eval/success")[-1].value == pytest.approx(0.5)
