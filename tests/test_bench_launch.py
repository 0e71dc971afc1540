"""launch.bench: lists the benchmark scripts and runs one with its arguments passed through."""

import json

from tests.runs import run_module


def _bench(*args):
    return run_module("launch.bench", *args, timeout=120)


def test_list_names_every_benchmark_with_its_description():
    out = _bench("--list")
    assert out.returncode == 0, out.stderr
    lines = {ln.split()[0]: ln for ln in out.stdout.splitlines() if ln.strip()}
    for name in ("sampler", "grpo_step", "scheduling", "weight_sync", "sandbox_overhead"):
        assert name in lines, out.stdout
        assert len(lines[name].split(None, 1)[1]) > 20  # a real one-line description
    assert "sync vs async vs windowed FIFO" in lines["scheduling"]


def test_scheduling_runs_end_to_end_with_forwarded_arguments(tmp_path):
    """``--args`` and the arguments after ``--`` both reach the script (results not overwritten)."""
    out = _bench("--bench=scheduling", "--args=--steps 2", "--", "--seed", "3", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "2 learner steps per mode, seed 3" in out.stdout
    result = json.load(open(tmp_path / "scheduling.json"))
    assert result["config"]["steps"] == 2 and result["config"]["seed"] == 3
    assert {r["mode"] for r in result["rows"]} == {"sync", "async", "windowed_fifo"}


def test_unknown_benchmark_and_bad_script_arguments_fail():
    out = _bench("--bench=warp_drive")
    assert out.returncode == 2 and "--bench='warp_drive' is invalid; allowed values" in out.stderr
    assert "scheduling" in out.stderr
    out = _bench("--bench=scheduling", "--", "--steps", "many")  # the script's own argparse error
    assert out.returncode == 2 and "invalid int value" in out.stderr
