"""A task and a loss written outside agentjax/ (examples/colour_task.py), named by import path,
trained by ``launch.train`` on the slot engine in real time; ``launch.eval --workdir`` on that run
reproduces its final held-out figure from the config the run stored."""

import json
import os

from tests.runs import read_metrics, run_module, tail

TASK = "examples.colour_task:make_suite"
LOSS = "examples.colour_task:clipped_pg_with_entropy"


def test_a_user_task_and_loss_train_and_launch_eval_reproduces_the_run(tmp_path, tiny_hf_dir):
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
    assert report["metrics"] == {k: v for k, v in final.items() if k.startswith("eval/")}
    assert report["sampled"]["success"]["n"] == 16 and "sampled" in ev.stdout

    # a HF directory (launch.export's format) on the same task and split: here a random tiny Qwen3
    ev = run_module(
        "launch.eval", f"--workdir={wd}", f"--checkpoint={tiny_hf_dir}", "--num_tasks=4", "--nosampled"
    )
    assert ev.returncode == 0, tail(ev)
    assert "| export greedy | 4 |" in ev.stdout
    bad = run_module("launch.eval", f"--workdir={wd}", f"--checkpoint={tmp_path / 'nothing'}")
    assert bad.returncode == 2 and "model.hf_path=" in bad.stderr and "is not a directory" in bad.stderr
