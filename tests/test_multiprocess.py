"""Processes on localhost with jax.distributed (gloo CPU collectives) run the default path as one
program: each process samples its share of every rollout call, the trajectories are exchanged,
the learner is FSDP-sharded over every process's devices, process 0 writes the workdir.

The runs: the smoke config in exact mode on the virtual clock, with a value head (GAE) so that the
learner's gradients are not zero while the tiny policy earns no reward. Bitwise claims:
* 2 processes x 1 device == 1 process x 2 devices (a plain run, no jax.distributed);
* 2 processes x 2 devices, disaggregated (the learner on the first device of each, each
  process sampling on its second), SIGKILLed after a checkpoint and resumed == 2 processes x 1
  device, colocated: the same learner mesh;
* (4 processes are run on the real clock: tests/test_multiprocess_realtime.py. A 2 x 2 run is
  not bitwise a 1 x 4 run: its trajectories differ in the last bits of their log-probs from the
  first one on, with a 4-device or a 1-device sampler alike, so the weights it samples with
  already differ; presumably a 4-way sum reduced in another order by gloo across processes than
  by XLA within one, not yet shown);
* a run whose process was SIGKILLed fails (no hang), and --resume ends where the uninterrupted run
  ends (the disaggregated run above).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from agentjax.learner.journal import Journal
from tests.runs import ROOT, cli_env, run_module, tail

STEPS = 4
# disaggregated on several processes: each process samples on one device of its own
DISAGGREGATED = ("--config.placement.kind=disaggregated", "--config.placement.sampler_mesh.data=1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(workdir, mesh: int, host_devices: int, *extra: str) -> list[str]:
    return [
        "--config=configs/smoke.py",
        f"--workdir={workdir}",
        "--config.report=False",
        f"--config.rl.steps={STEPS}",
        "--config.checkpoint_every=2",
        f"--config.placement.host_devices={host_devices}",
        f"--config.placement.learner_mesh.fsdp={mesh}",
        "--config.model.value_head=shared",
        "--config.loss.advantage=gae",
        "--config.loss.value_coef=0.5",
        "--config.placement.peer_timeout_s=20",
        *extra,
    ]


def _start(n: int, host_devices: int, workdir, *extra: str, learner: int = 0) -> list[subprocess.Popen]:
    """``n`` processes of ``host_devices`` devices each; the learner FSDP over ``learner`` of them
    (default: all)."""
    port, procs = _free_port(), []
    for pid in range(n):
        dist = [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={n}", f"--process_id={pid}"]
        cmd = [
            sys.executable,
            "-m",
            "launch.train",
            *_args(workdir, learner or n * host_devices, host_devices, *extra),
            *dist,
        ]
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    return procs


def kill_after_checkpoint(procs: list[subprocess.Popen], workdir, victim: int, step: int = 2) -> None:
    """SIGKILLs process ``victim`` once the run has committed checkpoint ``step`` (process 0 alive):
    orbax creates the step's directory when the save starts and marks it committed last."""
    deadline = time.time() + 900
    while (
        time.time() < deadline and not (workdir / "checkpoints" / str(step) / "commit_success.txt").exists()
    ):
        assert procs[0].poll() is None, procs[0].communicate()[0][-4000:]
        time.sleep(0.05)
    os.kill(procs[victim].pid, signal.SIGKILL)


def _run(n: int, host_devices: int, workdir, *extra: str, learner: int = 0) -> list[str]:
    procs = _start(n, host_devices, workdir, *extra, learner=learner)
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-4000:]
    return outs


def _result(workdir) -> tuple[str, list, dict]:
    """Final parameters' checksum, every journaled trajectory (tokens, log-probs, versions, reward)
    by submission index, and the summary."""
    summary = json.load(open(os.path.join(workdir, "summary.json")))
    records = Journal(os.path.join(workdir, "journal.bin")).scan().records
    trajs = [
        (
            t.submit_index,
            [(u.action.tolist(), np.asarray(u.logp).tobytes(), u.version.tolist()) for u in t.turns],
            t.final_reward,
        )
        for t in records
    ]
    return summary["params_sha256"], sorted(trajs, key=lambda x: x[0]), summary


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    wd = tmp_path_factory.mktemp("two") / "run"
    _run(2, 1, wd)
    return wd


@pytest.mark.slow
def test_two_processes_equal_one_process_bitwise_and_split_the_episodes(two_processes, tmp_path):
    one = tmp_path / "one"
    r = run_module("launch.train", *_args(one, 2, 2), env=cli_env(host_devices=2), timeout=1200)
    assert r.returncode == 0, tail(r)
    params1, trajs1, s1 = _result(one)
    params2, trajs2, s2 = _result(two_processes)
    assert len(trajs1) > 8 * STEPS and len({t[0] for t in trajs2}) == len(trajs2)  # none twice
    assert trajs2 == trajs1  # the union of both processes' trajectories, bitwise
    assert params2 == params1  # the FSDP learner over two processes, bitwise
    assert s2["process_count"] == 2 and "processes" not in s1
    split = s2["processes"]
    assert split["count"] == 2 and sum(split["ran"]) == split["items"] and min(split["ran"]) > 0
    assert s2["scheduler"] == s1["scheduler"]


@pytest.mark.slow
def test_a_killed_disaggregated_run_fails_and_resumes_to_the_colocated_runs_bits(two_processes, tmp_path):
    """2 processes x 2 devices, disaggregated (the learner FSDP over the first device of each,
    each process sampling on its second, the weights synced after every step), one process
    SIGKILLed after checkpoint 2: the other fails with a named error (no hang), and --resume ends
    bitwise where the uninterrupted 2 x 1 colocated run ends: the same learner mesh, each
    process's sampler a whole copy of the weights."""
    wd = tmp_path / "killed"
    split = (*DISAGGREGATED, "--config.placement.sync_every=1")
    procs = _start(2, 2, wd, *split, learner=2)
    kill_after_checkpoint(procs, wd, victim=1)
    t0 = time.time()
    out = procs[0].communicate(timeout=300)[0]  # fails within the peer timeout (20 s): no hang
    procs[1].communicate()
    assert procs[0].returncode != 0, out[-4000:]
    assert time.time() - t0 < 120
    # named: our exchange's PeerError, or (blocked in a collective) the coordination service's
    causes = ("peer error: process 1 of 2", "task 1 heartbeat timeout", "another task died")
    assert any(c in out.lower() for c in causes), out[-6000:]
    assert not (wd / "summary.json").exists()
    outs = _run(2, 2, wd, *split, "--resume", learner=2)
    for out in outs:  # every process ran the rest of the loop; only process 0 wrote the files
        assert "resumed from step 2" in out and f"step    {STEPS}/{STEPS} |" in out
    params, trajs, s2 = _result(wd)
    want_params, want_trajs, s1 = _result(two_processes)
    assert trajs == want_trajs and params == want_params
    assert (wd / "checkpoints" / str(STEPS)).is_dir()
    # process 0 samples on its own second device, off the learner mesh; one gather over the
    # processes and one local sync per version (the resume's and steps 3 and 4)
    where, here = s2["placement"], s1["placement"]
    assert where["kind"] == "disaggregated" and where["learner_devices"] == here["learner_devices"]
    assert len(where["sampler_devices"]) == 1 and not set(where["sampler_devices"]) & set(
        where["learner_devices"]
    )
    assert set(here["sampler_devices"]) <= set(here["learner_devices"])  # colocated: on its first
    sync = s2["weight_sync"]
    assert sync["syncs"] == sync["gathers"] == STEPS - 1 and sync["skipped"] == 0
    assert sync["bytes"] == sync["gather_bytes"] > 0


def test_distributed_runs_refuse_partial_rollout(monkeypatch, tmp_path):
    from agentjax.policy.config import ConfigError
    from agentjax.run import loop
    from agentjax.sharding import multihost
    from tests.runs import tiny_config

    monkeypatch.setattr(multihost, "is_distributed", lambda: True)
    cfg = tiny_config("default", scheduler__round_budget=8, scheduler__engine_slots=4, checkpoint_every=0)
    with pytest.raises(ConfigError, match=r"round_budget=8 \(partial rollout\) runs one process"):
        loop.train(cfg, str(tmp_path), log=lambda s: None)


def test_learner_rows_that_do_not_split_over_the_mesh_fail_at_start(tmp_path):
    from agentjax.policy.config import ConfigError
    from agentjax.run import loop
    from tests.runs import tiny_config

    cfg = tiny_config("default", placement__learner_mesh__fsdp=3)  # 16 rows over 3 devices
    with pytest.raises(ConfigError, match=r"learner batch's 16 rows .* fsdp = 3 .* multiple of 3"):
        loop.train(cfg, str(tmp_path), log=lambda s: None)
    cfg = tiny_config("default", placement__learner_mesh__fsdp=4, warm_start__batch_size=6)
    with pytest.raises(ConfigError, match=r"warm_start.batch_size's 6 rows .* fsdp = 4"):
        loop.train(cfg, str(tmp_path), log=lambda s: None)
    assert not os.path.exists(tmp_path / "metrics.jsonl")
