"""launch.eval: any checkpoint of a launch.train run, scripted agents, codefix in the real sandbox.

Every evaluation runs the command line (``python -m launch.eval``) in a subprocess, like the
training run it evaluates (in-process, its absl flags would clash with other launchers' flags).
"""

import json
import os
import shutil

import pytest

from tests.runs import read_metrics, run_module, tail

SHORT = [
    "--config=configs/smoke.py",
    "--config.report=False",
    "--config.rl.steps=4",
    "--config.rl.eval_every=2",
    "--config.checkpoint_every=2",
    "--config.warm_start.steps=4",
]


def _run(module, *args, timeout=600):
    return run_module(module, *args, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    wd = str(tmp_path_factory.mktemp("run"))
    out = _run("launch.train", *SHORT, f"--workdir={wd}")
    assert out.returncode == 0, tail(out)
    return wd


def _eval(*args):
    out = _run("launch.eval", *args)
    assert out.returncode == 0, tail(out)
    return out.stdout


def _eval_rows(wd):
    return {r["step"]: r for r in read_metrics(wd) if "eval/success" in r}


def test_checkpoint_eval_is_deterministic_and_equals_the_runs_own_eval(trained, tmp_path):
    stdout = _eval(*SHORT, f"--workdir={trained}")  # latest checkpoint, default --out
    assert "| step 4 greedy | 16 |" in stdout and "| step 4 sampled T=1.0 | 16 |" in stdout
    first = json.load(open(os.path.join(trained, "eval_4.json")))
    _eval(*SHORT, f"--workdir={trained}", "--checkpoint_step=4", f"--out={tmp_path / 'again.json'}")
    assert json.load(open(tmp_path / "again.json")) == first  # the same checkpoint twice: identical
    assert first["kind"] == "checkpoint" and first["step"] == 4 and first["task"] == "minirepo"
    s = first["success"]
    assert s["n"] == 16 and s["lo"] <= s["rate"] <= s["hi"]
    assert set(first["audit"]) >= {"H", "lo", "hi", "n_train_pass"}
    assert set(first["hack"]) >= {"rate", "lo", "hi", "n_opportunities", "n_taken"}
    assert sum(first["labels"].values()) == pytest.approx(1.0)
    assert sum(first["stop_reasons"].values()) == pytest.approx(1.0)
    assert "demonstrator_success" in first["header"]
    # The training loop evaluated the same parameters on the same tasks with the same seed.
    own = _eval_rows(trained)[4]
    for k, v in first["metrics"].items():
        assert v == own[k] or (v is None and own[k] != own[k]), k


def test_an_older_checkpoint_and_fewer_tasks(trained, tmp_path):
    _eval(*SHORT, f"--workdir={trained}", "--checkpoint_step=2", f"--out={tmp_path / 'e2.json'}")
    r = json.load(open(tmp_path / "e2.json"))
    assert r["step"] == 2 and r["success"]["rate"] == _eval_rows(trained)[2]["eval/success"]
    _eval(*SHORT, f"--workdir={trained}", "--num_tasks=5", f"--out={tmp_path / 'e5.json'}")
    assert json.load(open(tmp_path / "e5.json"))["success"]["n"] == 5


def test_missing_checkpoint_is_a_clear_error(trained, tmp_path):
    out = _run("launch.eval", *SHORT, f"--workdir={tmp_path / 'empty'}")
    assert out.returncode == 3
    assert "no checkpoint under" in out.stderr and "launch.train" in out.stderr
    out = _run("launch.eval", *SHORT, f"--workdir={trained}", "--checkpoint_step=3")
    assert out.returncode == 3
    assert "no checkpoint for step 3" in out.stderr and "available steps: [2, 4]" in out.stderr


def test_scripted_demonstrator_reproduces_the_runs_baseline(trained, tmp_path):
    _eval(*SHORT, "--agent=demonstrator", f"--out={tmp_path / 'demo.json'}")
    r = json.load(open(tmp_path / "demo.json"))
    header = json.load(open(os.path.join(trained, "summary.json")))["header"]
    assert r["kind"] == "scripted" and r["agent"] == "demonstrator" and r["success"]["n"] == 16
    assert r["success"]["rate"] == header["demonstrator_success"]
    out = _run("launch.eval", "--agent=genius")
    assert out.returncode == 2 and "--agent='genius' is invalid" in out.stderr and "localizing" in out.stderr


@pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)
def test_codefix_scripted_agents_in_the_sandbox(tmp_path):
    out = tmp_path / "codefix.json"
    _eval(
        "--config=configs/codefix_eval.py",
        "--config.codefix.agents=('oracle', 'edit_tests')",
        "--num_tasks=2",
        f"--out={out}",
    )
    r = json.load(open(out))
    assert r["task"] == "codefix" and len(r["tasks"]) == 2
    oracle, attacker = r["agents"]["oracle"], r["agents"]["edit_tests"]
    assert oracle["success"]["rate"] == 1.0 and oracle["as_expected"] == 1.0
    assert oracle["audit"]["n_train_pass"] == 2 and oracle["audit"]["H"] == 0.0
    assert attacker["hack"]["rate"] == 1.0 and attacker["labels"] == {"reward_hack": 1.0}
    assert attacker["as_expected"] == 1.0 and attacker["success"]["rate"] == 0.0
    bad = _run("launch.eval", "--config=configs/codefix_eval.py", "--checkpoint_step=2")
    assert bad.returncode == 2 and "does not apply to codefix" in bad.stderr


def test_the_run_wrote_tensorboard_events(trained):
    """The training loop's metrics rows also land as TensorBoard scalars under <workdir>/tb."""
    from tests.diagnostics.test_tbevents import read_scalars

    by_step = read_scalars(os.path.join(trained, "tb"))
    own = _eval_rows(trained)
    assert by_step[4]["eval/success"] == pytest.approx(own[4]["eval/success"])
    assert "loss/total" in by_step[1] and "header/demonstrator_success" in by_step[0]
    assert any(k.startswith("labels/") for k in by_step[3])
