"""The main path end to end: determinism, SIGKILL at an arbitrary point + exact resume."""

import json
import os

import numpy as np
import pytest

from agentjax.diagnostics.tbevents import WALL_CLOCK
from agentjax.learner import checkpoint as ckpt
from tests.runs import cli_env, read_metrics, run_module, tail, train_until_killed

ENV = cli_env()  # one CPU device: the default config's placement


def _args(workdir, *extra):
    return ["--config=configs/smoke.py", f"--workdir={workdir}", "--config.report=False", *extra]


def _train(workdir, *extra, env=ENV, timeout=900):
    """``python -m launch.train`` on the smoke config into ``workdir``: the CompletedProcess."""
    return run_module("launch.train", *_args(workdir, *extra), env=env, timeout=timeout)


def _metrics(workdir):
    return read_metrics(workdir, drop_wall=True)


def _final_params(workdir):
    d = os.path.join(workdir, "checkpoints")
    state = ckpt.restore_checkpoint(d, step=ckpt.latest_step(d)).state  # no target: a plain dict
    return state["params"]


_REFERENCES: dict = {}
_STDERR: dict = {}  # mode -> the reference run's stderr


def _reference(mode, tmp_path_factory):
    """An uninterrupted run per scheduling mode (shared by the tests of this module)."""
    if mode not in _REFERENCES:
        wd = str(tmp_path_factory.mktemp(f"ref_{mode}"))
        out = _train(wd, f"--config.scheduler.mode={mode}")
        assert out.returncode == 0, tail(out)
        _REFERENCES[mode], _STDERR[mode] = (wd, out.stdout), out.stderr
    return _REFERENCES[mode]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return _reference("windowed_fifo", tmp_path_factory)


def test_end_to_end_prints_progress_and_leaves_outputs(reference):
    wd, stdout = reference
    assert "warm start held-out success" in stdout
    assert "step   12/12 |" in stdout and "held-out success" in stdout
    assert "config: " in stdout and stdout.index("config: ") < stdout.index("run: ")
    header = next(ln for ln in stdout.splitlines() if ln.startswith("run: "))  # before any work
    assert "parameters" in header and "task minirepo" in header and "12 steps" in header, header
    assert stdout.index(header) < stdout.index("warm start held-out success")
    last = next(ln for ln in stdout.splitlines() if ln.startswith("step   12/12 |"))
    assert last.endswith("ETA 0m00s"), last  # nothing left at the last step
    assert "| heldout " in last, last  # the evaluated set's name (codefix's training pairs: "eval")
    rows = _metrics(wd)
    assert rows[0]["step"] == 0 and "demonstrator_success" in rows[0]["header"]
    import importlib.metadata as md

    versions = rows[0]["header"]["versions"]  # what "same seed, same metrics" depends on
    assert {k: versions[k] for k in ("jax", "jaxlib", "numpy", "ml_dtypes")} == {
        k: md.version(k) for k in ("jax", "jaxlib", "numpy", "ml_dtypes")
    }
    train = [r for r in rows if "loss/total" in r]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert all(r["version_gap_max"] <= 2 for r in train)  # the configured bound
    summary = json.load(open(os.path.join(wd, "summary.json")))
    assert summary["final_eval"]["eval/n"] == 16
    for r in (r for r in rows if "eval/success" in r):  # readable sample episodes, every eval
        assert len(r["eval/samples"]) == 3 and r["eval/samples"][0]["text"].startswith("[prompt] repo")
        assert {"task_id", "label", "reward", "stop"} <= set(r["eval/samples"][0])


def _tensorboard(wd):
    """``(event files, {step: {tag: value}}, {text tag: steps})`` of a run's ``tb`` directory."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    from tests.diagnostics.test_tbevents import read_scalars

    tb = os.path.join(wd, "tb")
    acc = ea.EventAccumulator(tb, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    texts = {t: [e.step for e in acc.Tensors(t)] for t in acc.Tags()["tensors"]}
    return sorted(os.listdir(tb)), read_scalars(tb), texts


def test_tensorboard_has_the_runs_training_signals_in_one_event_file(reference):
    """Warm-start loss, learning rate, trained tokens/s, completion length and the sample
    episodes (text) of every eval, all in the run's one event file."""
    wd, _ = reference
    files, by_step, texts = _tensorboard(wd)
    assert files == ["events.out.tfevents.agentjax"]
    assert sorted(by_step) == list(range(13))
    assert {"header/warm_start/nll_first", "header/warm_start/nll_last"} <= set(by_step[0])
    for step in range(1, 13):
        assert by_step[step]["optim/learning_rate"] == pytest.approx(1e-3)
        assert by_step[step]["batch/completion_tokens_mean"] > 0
    assert all(by_step[s]["throughput/trained_tokens_per_s"] > 0 for s in range(2, 13))
    # the sampler's generation throughput, every step, as metrics.jsonl has it
    rows = read_metrics(wd)
    gen = {r["step"]: r["throughput/generated_tokens_per_s"] for r in rows if "loss/total" in r}
    assert sorted(gen) == list(range(1, 13)) and all(v > 0 for v in gen.values())
    assert {s: by_step[s]["throughput/generated_tokens_per_s"] for s in gen} == pytest.approx(gen)
    # the warm start's loss curve at its own steps (smoke: 10 warm-start steps, every one written)
    curve = rows[0]["warm_start/curve"]
    assert [s for s, _ in curve] == list(range(10))
    assert {s: by_step[s]["warm_start/nll"] for s, _ in curve} == pytest.approx(dict(curve))
    assert by_step[0]["warm_start/nll"] == pytest.approx(by_step[0]["header/warm_start/nll_first"])
    evals = [r["step"] for r in _metrics(wd) if "eval/success" in r]
    assert texts == {"eval/sample_episodes": evals}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["windowed_fifo"])
def test_sigkill_then_resume_is_bitwise_identical(mode, tmp_path_factory, tmp_path):
    """Deterministic async (windowed FIFO on the virtual clock). Sync mode's exact resume:
    ``test_critic_gae_reference_kl_and_demonstrations_train_and_resume_exactly``."""
    ref_dir, _ = _reference(mode, tmp_path_factory)
    wd = str(tmp_path / "killed")
    flag = f"--config.scheduler.mode={mode}"
    ckdir = os.path.join(wd, "checkpoints")
    killed_at = train_until_killed(_args(wd, flag), ckdir, 2, env=ENV, jitter=0.5)
    assert killed_at is not None and killed_at < 12
    out = _train(wd, flag, "--resume")
    assert out.returncode == 0, tail(out)
    assert f"resumed from step {killed_at}" in out.stdout
    # Same seed, same config: the same metrics line for line and bitwise the same parameters.
    assert _metrics(wd) == _metrics(ref_dir)
    # TensorBoard: the one event file, appended to by the resumed run, each step once with the
    # reference run's values (the steps after the checkpoint were cut and written again)
    files, got, texts = _tensorboard(wd)
    ref_files, want, ref_texts = _tensorboard(ref_dir)
    assert files == ref_files == ["events.out.tfevents.agentjax"] and texts == ref_texts
    strip = lambda d: {s: {k: v for k, v in t.items() if k not in WALL_CLOCK} for s, t in d.items()}  # noqa: E731
    assert strip(got) == strip(want)
    a, b = _final_params(wd), _final_params(ref_dir)
    for x, y in zip(jax_leaves(a), jax_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_resume_without_checkpoint_is_an_error(tmp_path):
    out = _train(str(tmp_path / "empty"), "--resume", timeout=300)
    assert out.returncode != 0
    assert "no checkpoint" in (out.stdout + out.stderr)


def test_invalid_config_fails_before_work_naming_the_field(tmp_path):
    out = _train(str(tmp_path / "bad"), "--config.scheduler.mode=fastest", timeout=300)
    assert out.returncode != 0
    assert "scheduler.mode='fastest' is invalid" in out.stderr
    assert "windowed_fifo" in out.stderr
    assert not os.path.exists(tmp_path / "bad" / "metrics.jsonl")


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


@pytest.mark.slow
def test_critic_gae_reference_kl_and_demonstrations_train_and_resume_exactly(tmp_path, caplog):
    """loss.advantage='gae' (separate critic, truncation bootstrap) with KL to the frozen warm
    start and the warm start's demonstrations in the loss (loss.demo_coef): the three terms reach
    the metrics, and a run stopped at step 2 and resumed (reference policy and demonstration rows
    restored from the workdir) ends bitwise where an uninterrupted run ends.

    Each run lowers its learner step and its warm-start step once: the first step's state is
    placed as the step returns it, and so is a restored one (a counter left uncommitted, or
    restored onto one device, compiled the step a second time at step 2 and after a resume)."""
    import logging

    import jax

    from agentjax.run import loop

    def config(steps):
        c = _smoke()
        c.loss.update(advantage="gae", value_coef=0.5, kl_coef=0.05, demo_coef=0.5)
        c.model.value_head = "separate"
        c.scheduler.mode = "sync"
        c.rl.update(steps=steps, eval_every=100)
        return c

    # in one process: the three runs share their compiled programs
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax._src.interpreters.pxla"):
        for wd, steps, resume in ((full, 4, False), (part, 2, False), (part, 4, True)):
            loop.train(config(steps), wd, resume=resume, log=lambda s: None)
    lowered = [r.getMessage().split(" with ")[0] for r in caplog.records]
    assert lowered.count("Compiling jit(_train_step)") == 3, lowered  # once per run (cached or not)
    assert lowered.count("Compiling jit(sft_step)") == 2, lowered  # the two fresh runs' warm starts
    train = [r for r in _metrics(full) if "loss/total" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert all(r["loss/value"] > 0 and r["loss/demo_nll"] > 0 for r in train)
    assert train[0]["loss/kl"] == pytest.approx(0.0, abs=1e-6) and train[-1]["loss/kl"] > 0
    resumed = [r for r in _metrics(part) if "loss/total" in r]
    assert resumed == train
    for x, y in zip(jax_leaves(_final_params(part)), jax_leaves(_final_params(full)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_rewritten_context_multi_turn_episodes_train(tmp_path):
    """A context policy other than keep_all makes each turn of an episode its own learner row:
    the learner batch is sized for it (it crashed with "batch needs more than 16 rows")."""
    wd = str(tmp_path / "ctx")
    out = _train(
        wd,
        "--config.context.policy=drop_oldest_observations",
        "--config.rl.steps=1",
        "--config.rl.eval_every=100",
        "--config.checkpoint_every=0",
        "--config.task.eval_tasks=4",
        "--config.warm_start.steps=0",
    )
    assert out.returncode == 0, tail(out)
    (train,) = [r for r in _metrics(wd) if "loss/total" in r]
    assert train["batch/rows"] > 16  # 16 trajectories (rl.batch_size), more turns than that


# -- durability (#14): checkpoints carry the config; resume repairs or refuses, never guesses --


def _smoke():
    from configs import smoke

    c = smoke.get_config()
    c.report = False
    return c


def _files(wd):
    names = ("metrics.jsonl", "journal.bin", "summary.json")
    return {n: open(os.path.join(wd, n), "rb").read() for n in names if os.path.exists(os.path.join(wd, n))}


def test_a_run_writes_no_nan_and_tensorboard_never_warns(reference):
    """Undefined metrics (no pass for the audit's H, no planted hack taken) are left out and named
    in the summary: metrics.jsonl and summary.json are strict JSON, and nothing warns about NaN."""
    wd, stdout = reference

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} written"))

    rows = [strict(ln) for ln in open(os.path.join(wd, "metrics.jsonl")) if ln.strip()]
    assert rows and "eval/audit/n_train_pass" in rows[0]
    summary = strict(open(os.path.join(wd, "summary.json")).read())
    for k, why in summary["undefined_metrics"].items():
        assert k not in summary["final_eval"] and why
    assert "NaN or Inf" not in stdout + _STDERR["windowed_fifo"]


def test_checkpoints_carry_the_config_and_snapshots_are_pruned_with_them(reference):
    from agentjax.run import config as runconfig
    from agentjax.run import files as files

    wd, _ = reference
    ckdir = os.path.join(wd, "checkpoints")
    assert ckpt.all_steps(ckdir) == [10, 12]  # keep=2 of the six saved
    snaps = sorted(n for n in os.listdir(ckdir) if n.startswith("scheduler_"))
    assert snaps == ["scheduler_10.json", "scheduler_12.json"]  # pruned with their checkpoints
    meta = ckpt.restore_checkpoint(ckdir, step=12).metadata
    assert meta["config"] == files.config_record(runconfig.parse(_smoke()))
    assert meta["config"]["seed"] == 0 and meta["journaled"] > 0


def test_resuming_a_finished_run_changes_nothing(reference, tmp_path):
    import shutil

    from agentjax.run import loop

    wd = str(tmp_path / "done")
    shutil.copytree(reference[0], wd)
    before = _files(wd)
    logs = []
    summary = loop.train(_smoke(), wd, resume=True, log=logs.append)
    assert any("nothing to do" in x for x in logs), logs
    assert summary["final_eval"]["eval/n"] == 16  # not overwritten with null
    assert _files(wd) == before


def test_resume_refuses_what_it_cannot_repair_and_changes_nothing(reference, tmp_path):
    """A different config or seed, a deleted metrics.jsonl, lost journal records, a truncated
    scheduler snapshot: each a CheckpointError naming the cause; the workdir is left as it was."""
    import shutil

    from agentjax.learner.journal import Journal
    from agentjax.run import loop

    wd = str(tmp_path / "wd")
    shutil.copytree(reference[0], wd)
    before = _files(wd)

    def refused(match, cfg=None):
        with pytest.raises(ckpt.CheckpointError, match=match):
            loop.train(cfg or _smoke(), wd, resume=True, log=lambda s: None)
        assert _files(wd) == before

    other = _smoke()
    other.seed = 1
    refused(r"config differs from the one stored with checkpoint step 12 .*seed: 0 -> 1", other)
    other = _smoke()
    other.loss.icepop_high = 3.0
    refused(r"loss.icepop_high: 2.0 -> 3.0", other)

    metrics = os.path.join(wd, "metrics.jsonl")
    os.rename(metrics, metrics + ".away")
    before.pop("metrics.jsonl")
    refused(r"metrics.jsonl is missing")
    os.rename(metrics + ".away", metrics)
    before = _files(wd)

    journal = os.path.join(wd, "journal.bin")
    shutil.copy(journal, journal + ".full")
    records = Journal(journal).read()
    os.remove(journal)
    Journal(journal).append(records[: len(records) // 2])
    before = _files(wd)
    refused(rf"journal.bin holds {len(records) // 2} intact records but the checkpoint journaled")
    os.replace(journal + ".full", journal)
    before = _files(wd)

    snap = os.path.join(wd, "checkpoints", "scheduler_12.json")
    blob = open(snap, "rb").read()
    open(snap, "wb").write(blob[: len(blob) // 3])
    refused(
        r"scheduler_12.json is truncated or corrupted.*step 10, is intact: to resume from it, "
        r"delete .*checkpoints/12 and .*scheduler_12.json"
    )


def test_a_torn_journal_record_fails_at_once_naming_the_file_and_the_repair(reference, tmp_path):
    """The journal's last record cut mid-write, though checkpoint 12 counted it: --resume fails in
    seconds with a message naming journal.bin and the checkpoint to resume from, and changes
    nothing; following it (drop step 12) the resume drops the torn tail and finishes. (Each byte
    position of a record: tests/learner/test_journal.py.)"""
    import shutil

    from agentjax.learner.journal import Journal

    wd = str(tmp_path / "wd")
    shutil.copytree(reference[0], wd)
    journal = Journal(os.path.join(wd, "journal.bin"))
    scan = journal.scan()
    size = os.path.getsize(journal.path)
    os.truncate(journal.path, size - 7)  # the last record's body, cut
    before = _files(wd)
    out = _train(wd, "--resume", timeout=300)
    ck = os.path.join(wd, "checkpoints")
    assert out.returncode == 3, tail(out)
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("checkpoint error:")]
    assert f"{journal.path} holds {len(scan.records) - 1} intact records (a torn record at byte" in line
    assert f"to resume from it, delete {ck}/12 and {ck}/scheduler_12.json" in line, line
    assert "Traceback" not in out.stderr and _files(wd) == before
    shutil.rmtree(os.path.join(ck, "12"))
    os.remove(os.path.join(ck, "scheduler_12.json"))
    os.remove(os.path.join(wd, "summary.json"))
    out = _train(wd, "--resume", timeout=300)
    assert out.returncode == 0, tail(out)
    assert "dropped a torn tail" in out.stdout and "resumed from step 10" in out.stdout
    assert len(journal.read()) == len(scan.records) and not journal.scan().torn


@pytest.mark.slow
def test_torn_metrics_line_is_repaired_and_the_previous_step_resumes_exactly(reference, tmp_path):
    """Following the corrupted-snapshot advice (drop step 12, resume from 10) with a torn last
    metrics line (a SIGKILL mid-append): the line is dropped, steps 11-12 rerun, and the run ends
    bitwise where the uninterrupted one ended."""
    import shutil

    ref_dir, _ = reference
    wd = str(tmp_path / "wd")
    shutil.copytree(ref_dir, wd)
    shutil.rmtree(os.path.join(wd, "checkpoints", "12"))
    os.remove(os.path.join(wd, "checkpoints", "scheduler_12.json"))
    os.remove(os.path.join(wd, "summary.json"))
    with open(os.path.join(wd, "metrics.jsonl"), "a") as f:
        f.write('{"step": 13, "loss/tot')  # torn
    out = _train(wd, "--resume")
    assert out.returncode == 0, tail(out)
    assert "resumed from step 10" in out.stdout and "dropped a torn last line" in out.stdout
    assert _metrics(wd) == _metrics(ref_dir)
    for x, y in zip(jax_leaves(_final_params(wd)), jax_leaves(_final_params(ref_dir)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    summary = json.load(open(os.path.join(wd, "summary.json")))
    assert summary["final_eval"]["eval/n"] == 16


@pytest.mark.slow
def test_slot_engine_trains_exactly_like_lock_step_rollout(reference, tmp_path):
    """scheduler.engine_slots=8: episodes run on the slot engine with environments on a thread
    pool; in exact mode the run's metrics and final parameters equal the lock-step run's."""
    wd = str(tmp_path / "engine")
    out = _train(
        wd,
        "--config.scheduler.engine_slots=8",
        "--config.scheduler.engine_chunk=4",
        "--config.scheduler.env_workers=4",
    )
    assert out.returncode == 0, tail(out)
    assert _metrics(wd) == _metrics(reference[0])
    engine = json.load(open(os.path.join(wd, "summary.json")))["engine"]
    assert engine["env_pool"]["steps"] > 0 and engine["env_pool"]["utilisation"] > 0
    assert 0 < engine["slot_occupancy"] <= 1 and engine["tokens"] > 0  # the engine decoded
    assert " tok/s occ " in out.stdout and " pool " in out.stdout  # in the progress lines
    for x, y in zip(jax_leaves(_final_params(wd)), jax_leaves(_final_params(reference[0])), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
