"""TensorBoard event files: written with tensorboardX, read back by TensorBoard's own reader."""

import glob
import math

import pytest

from agentjax.diagnostics import tbevents

ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def read_scalars(logdir) -> dict[int, dict[str, float]]:
    """``{step: {tag: value}}`` of every event file under ``logdir``, as TensorBoard reads them."""
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    out: dict = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            out.setdefault(e.step, {})[tag] = e.value
    return out


def test_write_rows_flattens_nested_numeric_fields_and_skips_the_rest(tmp_path):
    rows = [
        {"step": 0, "header": {"demonstrator_success": 0.6, "note": "x"}, "eval/success": 0.4},
        {
            "step": 1,
            "loss/total": 0.1,
            "labels": {"pass": 3, "fail": 5},
            "ok": True,
            "list": [1, 2],
            "none": None,
        },
        {"no_step": 1.0},
        {"step": float("nan"), "x": 1.0},
    ]
    assert tbevents.write_rows(tmp_path / "tb", rows) is not None
    got = read_scalars(tmp_path / "tb")
    assert set(got) == {0, 1}
    assert got[0] == pytest.approx({"header/demonstrator_success": 0.6, "eval/success": 0.4})
    assert got[1] == pytest.approx({"loss/total": 0.1, "labels/pass": 3.0, "labels/fail": 5.0, "ok": 1.0})


def test_appending_calls_each_leave_a_closed_file_that_tensorboard_reads_in_order(tmp_path):
    for step in range(1, 6):
        tbevents.write_rows(tmp_path, [{"step": step, "loss/total": 1.0 / step, "eval/success": step / 10}])
    assert len(glob.glob(str(tmp_path / "*tfevents*"))) == 5
    got = read_scalars(tmp_path)
    assert sorted(got) == [1, 2, 3, 4, 5]
    assert [got[s]["loss/total"] for s in range(1, 6)] == pytest.approx([1.0, 0.5, 1 / 3, 0.25, 0.2])


def test_non_finite_values_are_written_as_they_are(tmp_path):
    tbevents.write_rows(tmp_path, [{"step": 2, "a": float("inf"), "b": float("nan")}])
    got = read_scalars(tmp_path)[2]
    assert got["a"] == math.inf and math.isnan(got["b"])


def test_rows_without_a_step_write_nothing(tmp_path):
    assert tbevents.write_rows(tmp_path / "tb", [{"x": 1.0}]) is None
    assert not (tmp_path / "tb").exists()
