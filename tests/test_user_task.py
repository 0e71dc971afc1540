"""A task and a loss written outside agentjax/ (examples/colour_task.py), named by import path,
trained by ``launch.train`` on the slot engine in real time; ``launch.eval --workdir`` on that run
reproduces its final held-out figure from the config the run stored."""

import json
import os

from tests.runs import read_metrics, run_module, tail

TASK = "examples.colour_task:make_suite"
LOSS = "examples.colour_task:clipped_pg_with_entropy"


def test_a_user_task_and_loss_train_and_launch_eval_reproduces_the_run(tmp_path):
    wd = str(tmp_path / "colour")
    out = run_module(
        "launch.train",
        "--config=configs/smoke.py",
        f"--workdir={wd}",
        f"--config.task.name={TASK}",
        "--config.task.kwargs.accuracy=0.6",
        "--config.task.eval_tasks=16",
        f"--config.loss.name={LOSS}",
        "--config.loss.kwargs.beta=0.01",
        "--config.scheduler.clock=real",
        "--config.scheduler.engine_slots=16",
        "--config.warm_start.steps=100",
        "--config.rl.steps=2",
        "--config.rl.eval_every=2",
        "--config.checkpoint_every=2",
        "--config.report=False",
    )
    assert out.returncode == 0, tail(out)
    rows = read_metrics(wd)
    trained = [r for r in rows if "loss/entropy_estimate" in r]
    assert len(trained) == 2, rows  # the user's loss is what the learner minimised, each step
    assert all(abs(r["loss/beta"] - 0.01) < 1e-6 for r in trained)  # with its loss.kwargs
    summary = json.load(open(os.path.join(wd, "summary.json")))
    assert "realtime" in summary and "engine" in summary  # real clock, slot engine
    final = [r for r in rows if r["step"] == 2 and "eval/success" in r][-1]
    assert 0.0 < final["eval/success"] < 1.0, final  # the warm start imitated the scripted agent

    ev = run_module("launch.eval", f"--workdir={wd}")  # no --config: the run's own stored config
    assert ev.returncode == 0, tail(ev)
    report = json.load(open(os.path.join(wd, "eval_2.json")))
    assert report["task"] == TASK and report["step"] == 2
    assert report["success"]["rate"] == final["eval/success"]  # the run's final held-out figure
    assert report["metrics"] == {
        k: v for k, v in final.items() if k.startswith("eval/") and k != "eval/samples"
    }
    assert report["samples"] == final["eval/samples"]  # the same episodes, rendered the same
    assert report["sampled"]["success"]["n"] == 16 and "sampled" in ev.stdout


def test_a_hf_run_of_the_user_task_evaluates_the_same_from_its_export(tmp_path, tiny_hf_dir):
    """launch.eval --checkpoint=<launch.export dir> plays the run's task and split with the
    exported weights: the same figures as --workdir on the checkpoint it was exported from."""
    wd, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    out = run_module(
        "launch.train",
        "--config=configs/codefix_tiny.py",
        f"--workdir={wd}",
        f"--config.model.hf_path={tiny_hf_dir}",
        "--config.model.max_seq_len=256",
        "--config.model.tool_format=plain",
        f"--config.task.name={TASK}",
        "--config.task.eval_tasks=8",
        "--config.caps.max_action_tokens=8",
        "--config.caps.max_obs_tokens=32",
        "--config.warm_start.steps=80",  # enough to pass some held-out tasks: figures to compare
        # the virtual clock: which episodes form the RL batch must not depend on the machine's
        # timing (on the real clock this assertion held or failed with the episodes' order)
        "--config.scheduler.clock=virtual",
        "--config.warm_start.episodes=64",
        "--config.rl.steps=1",
        "--config.rl.eval_every=1",
        "--config.rl.batch_size=8",
        "--config.checkpoint_every=1",
        "--config.optim.grad_accum=1",
        "--config.report=False",
    )
    assert out.returncode == 0, tail(out)
    ex = run_module("launch.export", f"--workdir={wd}", f"--out={hf}")
    assert ex.returncode == 0, tail(ex)
    reports = []
    for extra in ([], [f"--checkpoint={hf}"]):
        path = str(tmp_path / f"eval{len(reports)}.json")
        ev = run_module("launch.eval", f"--workdir={wd}", *extra, f"--out={path}")
        assert ev.returncode == 0, tail(ev)
        reports.append(json.load(open(path)))
    ckpt, export = reports
    assert (ckpt["kind"], export["kind"]) == ("checkpoint", "export") and export["task"] == TASK
    assert export["success"]["n"] == 8 and export["metrics"] == ckpt["metrics"]
    assert ckpt["success"]["rate"] > 0, ckpt  # the warm start learned something: a figure to match
    assert export["sampled"]["metrics"] == ckpt["sampled"]["metrics"]
    bad = run_module("launch.eval", f"--workdir={wd}", f"--checkpoint={tmp_path / 'nothing'}")
    assert bad.returncode == 2 and "model.hf_path=" in bad.stderr and "is not a directory" in bad.stderr
