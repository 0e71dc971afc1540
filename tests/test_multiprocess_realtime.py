"""Several processes on the real clock (localhost, jax.distributed, gloo CPU collectives): async
windowed FIFO on the slot engine, process 0 ordering the deliveries, each trajectory kept on the
process that sampled it, the learner batch assembled on the devices from process-local rows.

* two processes run to completion; each journals its own trajectories (none twice); only
  metadata goes through the coordinator's key-value store (its bytes are counted);
* ``--replay`` of that run on two processes gives the same trajectories and parameters, bitwise;
* four processes: one is SIGKILLed after a checkpoint, the others stop with a named error (no
  hang), and ``--resume`` finishes the run on the real clock.
"""

import json
import os
import signal
import time

import numpy as np
import pytest

from agentjax.learner.journal import Journal
from tests.test_multiprocess import _run, _start

STEPS = 4
REAL = (
    "--config.scheduler.clock=real",
    "--config.scheduler.engine_slots=8",
    "--config.scheduler.mode=windowed_fifo",
    f"--config.rl.steps={STEPS}",
)
METADATA_BYTES_PER_ROUND = 1500  # a round's metadata is ~600 bytes; its tokens are not in it


def _journals(workdir) -> dict[int, tuple]:
    """Every journaled trajectory of every process's journal, by submission index."""
    out = {}
    for name in sorted(os.listdir(workdir)):
        if name.startswith("journal") and name.endswith(".bin"):
            for t in Journal(os.path.join(workdir, name)).scan().records:
                assert t.submit_index not in out, f"submission {t.submit_index} journaled twice"
                out[t.submit_index] = (
                    [(u.action.tolist(), np.asarray(u.logp).tobytes(), u.version.tolist()) for u in t.turns],
                    t.final_reward,
                )
    return out


@pytest.fixture(scope="module")
def realtime_two(tmp_path_factory):
    wd = tmp_path_factory.mktemp("rt") / "run"
    outs = _run(2, 1, wd, *REAL)
    return wd, outs


@pytest.mark.slow
def test_two_processes_run_async_on_the_real_clock_and_keep_their_trajectories(realtime_two):
    wd, outs = realtime_two
    for out in outs:
        assert f"step    {STEPS}/{STEPS} |" in out
    s = json.load(open(wd / "summary.json"))
    rt = s["realtime"]
    assert s["process_count"] == 2 and rt["processes"] == 2 and min(rt["rounds_assigned"]) > 0
    own = [len(Journal(str(wd / n)).scan().records) for n in ("journal.bin", "journal.p1.bin")]
    assert min(own) > 0  # each process journals the trajectories it sampled ...
    trajs = _journals(wd)  # ... none twice, tokens and all
    assert all(turns for turns, _ in trajs.values())
    sent = sum(s["processes"]["kv_bytes_sent"])  # control plane: rounds' metadata, the order, eval
    rounds = sum(rt["rounds_assigned"]) + 2 * 16  # training rounds, and 2 held-out evaluations
    assert sent < METADATA_BYTES_PER_ROUND * rounds, (sent, rounds)


@pytest.mark.slow
def test_a_replay_of_a_multi_process_real_time_run_is_bitwise(realtime_two, tmp_path):
    wd, _ = realtime_two
    _run(2, 1, tmp_path / "again", *REAL, f"--replay={wd}")
    want, got = json.load(open(wd / "summary.json")), json.load(open(tmp_path / "again" / "summary.json"))
    assert got["replayed"] == os.path.abspath(wd)
    assert _journals(tmp_path / "again") == _journals(wd)
    assert got["params_sha256"] == want["params_sha256"]


@pytest.mark.slow
def test_four_processes_stop_when_one_dies_and_resume_finishes_on_the_real_clock(tmp_path):
    wd = tmp_path / "four"
    procs = _start(4, 1, wd, *REAL)
    deadline = time.time() + 900
    while time.time() < deadline and not (wd / "checkpoints" / "2").is_dir():
        assert procs[0].poll() is None, procs[0].communicate()[0][-4000:]
        time.sleep(0.05)
    os.kill(procs[2].pid, signal.SIGKILL)
    t0 = time.time()
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert time.time() - t0 < 150  # within twice the peer timeout (20 s) and the service's abort
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        if i != 2:
            assert p.returncode != 0, out[-4000:]
    causes = ("peer error: process 2 of 4", "task 2 heartbeat timeout", "another task died", "stopped")
    assert any(c in outs[0].lower() for c in causes), outs[0][-6000:]
    assert not (wd / "summary.json").exists()
    outs = _run(4, 1, wd, *REAL, "--resume")
    assert f"step    {STEPS}/{STEPS} |" in outs[0]
    s = json.load(open(wd / "summary.json"))
    assert s["process_count"] == 4 and s["realtime"]["processes"] == 4
