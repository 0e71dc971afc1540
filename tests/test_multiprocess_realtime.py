"""Several processes on the real clock (localhost, jax.distributed, gloo CPU collectives): async
windowed FIFO on the slot engine, process 0 ordering the deliveries, each trajectory kept on the
process that sampled it, the learner batch assembled on the devices from process-local rows.

* four processes run to completion; each journals its own trajectories (none twice); only
  metadata goes through the coordinator's key-value store (its bytes are counted);
* (``--replay`` of a real-time run is tested on one process: tests/test_realtime.py);
* two processes: one is SIGKILLed after a checkpoint, the other stops with a named error (no
  hang), and ``--resume`` finishes the run on the real clock (not bitwise: the episodes in flight
  are sampled again).
"""

import json
import os
import time

import numpy as np
import pytest

from agentjax.learner.journal import Journal
from tests.test_multiprocess import DISAGGREGATED, _run, _start, kill_after_checkpoint

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
def realtime_four(tmp_path_factory):
    wd = tmp_path_factory.mktemp("rt") / "run"
    outs = _run(4, 1, wd, *REAL)
    return wd, outs


@pytest.mark.slow
def test_four_processes_run_async_on_the_real_clock_and_keep_their_trajectories(realtime_four):
    wd, outs = realtime_four
    for out in outs:
        assert f"step    {STEPS}/{STEPS} |" in out
    s = json.load(open(wd / "summary.json"))
    rt = s["realtime"]
    assert s["process_count"] == 4 and rt["processes"] == 4 and min(rt["rounds_assigned"]) > 0
    names = ["journal.bin", "journal.p1.bin", "journal.p2.bin", "journal.p3.bin"]
    own = [len(Journal(str(wd / n)).scan().records) for n in names]
    assert min(own) > 0  # each process journals the trajectories it sampled ...
    trajs = _journals(wd)  # ... none twice, tokens and all
    assert all(turns for turns, _ in trajs.values())
    sent = sum(s["processes"]["kv_bytes_sent"])  # control plane: rounds' metadata, the order, eval
    rounds = sum(rt["rounds_assigned"]) + 2 * 16  # training rounds, and 2 held-out evaluations
    assert sent < METADATA_BYTES_PER_ROUND * rounds, (sent, rounds)


@pytest.mark.slow
def test_when_a_process_dies_the_other_stops_with_a_named_error_and_resume_finishes(tmp_path):
    """Disaggregated: the learner FSDP over the first device of each of 2 processes, each
    sampling on its second device, synced every 2 learner steps."""
    wd = tmp_path / "killed"
    split = (*REAL, *DISAGGREGATED, "--config.placement.sync_every=2", "--config.admission.max_version_gap=3")
    procs = _start(2, 2, wd, *split, learner=2)
    kill_after_checkpoint(procs, wd, victim=1)
    t0 = time.time()
    out = procs[0].communicate(timeout=300)[0]
    procs[1].communicate()
    assert time.time() - t0 < 150  # within twice the peer timeout (20 s) and the service's abort
    assert procs[0].returncode != 0, out[-4000:]
    causes = ("peer error: process 1 of 2", "task 1 heartbeat timeout", "another task died", "stopped")
    assert any(c in out.lower() for c in causes), out[-6000:]
    assert not (wd / "summary.json").exists()
    outs = _run(2, 2, wd, *split, "--resume", learner=2)
    assert all(f"step    {STEPS}/{STEPS} |" in out for out in outs)
    assert "resumed from step 2" in outs[0]
    s = json.load(open(wd / "summary.json"))
    assert s["process_count"] == 2 and s["realtime"]["processes"] == 2
    where, sync = s["placement"], s["weight_sync"]
    assert len(where["learner_devices"]) == 2 and len(where["sampler_devices"]) == 1
    assert not set(where["sampler_devices"]) & set(where["learner_devices"])
    # resumed at version 2: the resume's own sync, then steps 3 (kept back) and 4 (synced)
    assert (sync["syncs"], sync["skipped"], sync["gathers"]) == (2, 1, 2)
    versions = {v for turns, _ in _journals(wd).values() for _, _, vs in turns for v in vs}
    assert max(versions) >= 2  # the samplers decoded with synced weights, not the start's
