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


def _events_per_tag(logdir) -> dict[str, list[int]]:
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _new_process():
    """What a resumed run's fresh process starts with: no memory of earlier calls."""
    tbevents._appended.clear()
    tbevents._last_wall.clear()


def test_appending_calls_write_one_event_file_that_tensorboard_reads_in_order(tmp_path):
    for step in range(1, 6):
        tbevents.write_rows(tmp_path, [{"step": step, "loss/total": 1.0 / step, "eval/success": step / 10}])
    assert glob.glob(str(tmp_path / "*tfevents*")) == [str(tmp_path / tbevents.EVENT_FILE)]
    got = read_scalars(tmp_path)
    assert sorted(got) == [1, 2, 3, 4, 5]
    assert [got[s]["loss/total"] for s in range(1, 6)] == pytest.approx([1.0, 0.5, 1 / 3, 0.25, 0.2])


def test_a_resumed_run_appends_to_the_same_file_and_rewrites_the_steps_after_its_checkpoint(tmp_path):
    tbevents.write_rows(tmp_path, [{"step": 0, "eval/success": 0.1}])
    for step in range(1, 7):  # the run got to step 6, its last checkpoint was step 4
        tbevents.write_rows(tmp_path, [{"step": step, "loss/total": float(step)}])
    _new_process()
    for step in range(5, 9):  # --resume: steps 5.. again (other values), then on
        tbevents.write_rows(tmp_path, [{"step": step, "loss/total": 10.0 * step}])
    assert glob.glob(str(tmp_path / "*tfevents*")) == [str(tmp_path / tbevents.EVENT_FILE)]
    assert _events_per_tag(tmp_path)["loss/total"] == [1, 2, 3, 4, 5, 6, 7, 8]  # each step once
    got = read_scalars(tmp_path)
    assert [got[s]["loss/total"] for s in range(1, 9)] == [1, 2, 3, 4, 50, 60, 70, 80]
    assert got[0] == {"eval/success": pytest.approx(0.1)}


def test_a_fresh_run_replaces_what_the_directory_held(tmp_path):
    (tmp_path / "events.out.tfevents.123.host.1.1").write_bytes(b"an older version's per-call file")
    tbevents.write_rows(tmp_path, [{"step": 0, "a": 1.0}, {"step": 3, "a": 3.0}])
    tbevents.write_rows(tmp_path, [{"step": 0, "a": 2.0}])  # a new run in the same workdir
    assert glob.glob(str(tmp_path / "*tfevents*")) == [str(tmp_path / tbevents.EVENT_FILE)]
    assert read_scalars(tmp_path) == {0: {"a": 2.0}}


def test_a_torn_last_record_is_cut_off_before_appending(tmp_path):
    path = tbevents.write_rows(tmp_path, [{"step": 1, "a": 1.0}])
    with open(path, "ab") as f:  # a process killed mid-write
        f.write(b"\x40\x00\x00\x00\x00\x00")
    _new_process()
    tbevents.write_rows(tmp_path, [{"step": 2, "a": 2.0}])
    assert read_scalars(tmp_path) == {1: {"a": 1.0}, 2: {"a": 2.0}}


def test_trained_tokens_per_second_from_consecutive_rows(tmp_path):
    rows = [{"step": s, "wall": 2.0 * s, "batch/action_tokens": 100.0 * s} for s in (1, 2, 3)]
    tbevents.write_rows(tmp_path, rows[:2])
    tbevents.write_rows(tmp_path, rows[2:])  # across calls of one process too
    got = read_scalars(tmp_path)
    assert tbevents.TOKENS_PER_S not in got[1]  # no previous row
    assert got[2][tbevents.TOKENS_PER_S] == pytest.approx(200 / 2)
    assert got[3][tbevents.TOKENS_PER_S] == pytest.approx(300 / 2)


def test_sample_episodes_are_a_text_summary_tensorboard_reads_back(tmp_path):
    samples = [
        {"task_id": "t7", "label": "pass", "reward": 1.0, "stop": "finished", "text": "[prompt] fix it"},
        {"task_id": "t9", "label": "infra_fault", "reward": None, "stop": "infra_fault", "text": "x"},
    ]
    tbevents.write_rows(tmp_path, [{"step": 4, "eval/success": 0.5, "eval/samples": samples}])
    acc = ea.EventAccumulator(str(tmp_path), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    assert tbevents.SAMPLES_TAG in acc.Tags()["tensors"]
    assert acc.SummaryMetadata(tbevents.SAMPLES_TAG).plugin_data.plugin_name == "text"
    (event,) = acc.Tensors(tbevents.SAMPLES_TAG)
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 4
    assert "task `t7`, verdict **pass**, reward 1" in text and "[prompt] fix it" in text
    assert "verdict **infra_fault**, reward n/a (masked)" in text
    assert read_scalars(tmp_path)[4] == {"eval/success": 0.5}  # the list is no scalar


def test_non_finite_values_are_written_as_they_are(tmp_path):
    tbevents.write_rows(tmp_path, [{"step": 2, "a": float("inf"), "b": float("nan")}])
    got = read_scalars(tmp_path)[2]
    assert got["a"] == math.inf and math.isnan(got["b"])


def test_rows_without_a_step_write_nothing(tmp_path):
    assert tbevents.write_rows(tmp_path / "tb", [{"x": 1.0}]) is None
    assert not (tmp_path / "tb").exists()


def test_the_warm_start_curve_is_a_scalar_at_each_warm_start_step(tmp_path):
    curve = [[0, 5.0], [1, 4.0], [2, 3.5], [9, 1.25]]
    tbevents.write_rows(tmp_path, [{"step": 0, "header": {"x": 1.0}, tbevents.WARM_START_CURVE: curve}])
    tbevents.write_rows(tmp_path, [{"step": 1, "loss/total": 1.0}])
    steps = _events_per_tag(tmp_path)
    assert steps[tbevents.WARM_START_TAG] == [0, 1, 2, 9] and steps["loss/total"] == [1]
    got = read_scalars(tmp_path)
    assert {s: got[s][tbevents.WARM_START_TAG] for s in (0, 1, 2, 9)} == {0: 5.0, 1: 4.0, 2: 3.5, 9: 1.25}
    # only step 0's row carries the warm start; the field is no scalar of its own
    tbevents.write_rows(tmp_path, [{"step": 2, tbevents.WARM_START_CURVE: [[5, 9.0]]}])
    assert _events_per_tag(tmp_path)[tbevents.WARM_START_TAG] == [0, 1, 2, 9]


def test_a_resumed_run_keeps_the_warm_start_curve_and_a_fresh_run_replaces_it(tmp_path):
    curve = [[s, 10.0 - s] for s in range(0, 20, 2)]  # warm-start steps past the RL steps
    tbevents.write_rows(tmp_path, [{"step": 0, "eval/success": 0.1, tbevents.WARM_START_CURVE: curve}])
    for step in range(1, 7):
        tbevents.write_rows(tmp_path, [{"step": step, "loss/total": float(step)}])
    _new_process()
    for step in range(5, 8):  # --resume from the checkpoint at step 4
        tbevents.write_rows(tmp_path, [{"step": step, "loss/total": 10.0 * step}])
    steps = _events_per_tag(tmp_path)
    assert steps[tbevents.WARM_START_TAG] == list(range(0, 20, 2))  # all of it, once
    assert steps["loss/total"] == [1, 2, 3, 4, 5, 6, 7]
    assert [read_scalars(tmp_path)[s]["loss/total"] for s in (4, 5)] == [4.0, 50.0]
    _new_process()
    tbevents.write_rows(tmp_path, [{"step": 0, tbevents.WARM_START_CURVE: [[0, 3.0], [1, 2.0]]}])
    assert _events_per_tag(tmp_path) == {tbevents.WARM_START_TAG: [0, 1]}  # a new run: its own curve


def test_generated_tokens_per_second_is_a_row_field_and_measured_on_the_wall_clock(tmp_path):
    from agentjax.run.summary import generated_tokens_per_s
    from tests import runs

    class T:
        def __init__(self, tokens, seconds):
            self.num_action_tokens, self.timings = tokens, {"generation": seconds}

    row = generated_tokens_per_s([T(30, 0.5), T(10, 0.5)])
    assert row == {tbevents.GENERATED_PER_S: 40.0}
    assert generated_tokens_per_s([T(5, 0.0)]) == {}  # no time recorded: undefined, omitted
    tbevents.write_rows(tmp_path, [{"step": 1, **row}])
    assert read_scalars(tmp_path)[1] == {tbevents.GENERATED_PER_S: 40.0}
    assert runs.WALL_CLOCK == tbevents.WALL_CLOCK  # the tests drop these before comparing runs
