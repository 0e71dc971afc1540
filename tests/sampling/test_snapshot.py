"""Scheduler snapshots: an explicit versioned format (no pickle), bounded in size, and every
unreadable snapshot (truncated, corrupted, old pickle, newer version) a named SnapshotError."""

import json
import pickle

import numpy as np
import pytest

from agentjax.sampling import scheduler as sch
from agentjax.sampling import snapshot as snap
from agentjax.sampling import staleness as stl
from agentjax.sampling.simulated import SimulatedWorker, long_tailed_workload


def _learner(params, train):
    return params + len(train.batch)


def _scheduler(n=40):
    cfg = sch.SchedulerConfig(mode="async", num_slots=8, round_budget=150, learner_step_time=5.0)
    return sch.Scheduler(
        long_tailed_workload(n, infra_fault_rate=0.05),
        SimulatedWorker(),
        _learner,
        np.zeros(3),
        config=cfg,
        staleness_config=stl.StalenessConfig(max_version_gap=2),
        batch_size=8,
    )


@pytest.fixture(scope="module")
def blobs():
    s = _scheduler()
    early = s.run(3).snapshot()
    late = s.run(12).snapshot()
    return early, late, s


def test_snapshot_is_versioned_json_with_named_fields_not_pickle(blobs):
    _, late, _ = blobs
    head, body = late.split(b"\n", 1)
    head = json.loads(head)
    assert head["format"] == "agentjax-scheduler-snapshot" and head["version"] == snap.VERSION == 4
    state = json.loads(body)
    assert set(snap.FIELDS) == set(state)
    assert state["machine"]["$obj"] == "agentjax.sampling.schedstate:SchedulerState"  # one value
    assert not late.startswith(b"\x80")  # not a pickle stream


def test_snapshot_holds_only_unresolved_trajectories(blobs):
    """The old pickled snapshot held every trajectory ever (quadratic disk over a run)."""
    early, late, s = blobs
    trained = sum(len(b) for b in s.batches)
    assert trained >= 96 and len(s.traj) >= trained  # in memory: all of them
    for blob in (early, late):
        state = snap.loads(blob)
        machine = state["machine"]
        assert len(machine.traj) <= 8 + 4 * 8  # slots + queue: bounded, not growing
        assert len(machine.records) <= 8 + 4 * 8  # live submissions only, the same bound
        assert len(machine.resumable) <= 8 + 4 * 8  # paused rollouts: bounded the same way
        assert all(c.trajectory is None for b in state["batches"] for c in b)
        # what grows with the steps is one small record and a few events per submission
        per_submission = (
            len(json.dumps(snap.encode(state["records"]))) + len(json.dumps(snap.encode(state["events"])))
        ) / len(state["records"])
        assert per_submission < 2000


def test_restored_run_continues_like_the_straight_one(blobs):
    early, _, _ = blobs
    straight = _scheduler().run(12).finish()
    again = (
        sch.Scheduler.restore(
            early, long_tailed_workload(40, infra_fault_rate=0.05), SimulatedWorker(), _learner
        )
        .run(12)
        .finish()
    )
    assert again.events == straight.events
    assert [[c.index for c in b] for b in again.batches] == [[c.index for c in b] for b in straight.batches]
    assert again.params.tobytes() == straight.params.tobytes()


@pytest.mark.parametrize(
    "mangle,match",
    [
        (lambda b: b[: len(b) // 2], r"run/scheduler_3 is truncated or corrupted"),
        (lambda b: b[:-40] + b"x" * 40, r"run/scheduler_3 is truncated or corrupted: .* CRC mismatch"),
        (lambda b: b"", r"run/scheduler_3 is not an agentjax scheduler snapshot"),
        (lambda b: pickle.dumps({"version": 3}), r"not an agentjax scheduler snapshot"),
        (
            lambda b: b.replace(b'"version": 4', b'"version": 5', 1),
            r"format version 5; this agentjax reads version 4 only \(a newer agentjax",
        ),
        (  # version 3: TaskCaps, before the one Caps type (2: before the machine)
            lambda b: b.replace(b'"version": 4', b'"version": 3', 1),
            r"format version 3; this agentjax reads version 4 only \(an older agentjax",
        ),
    ],
)
def test_unreadable_snapshot_is_a_named_error(blobs, mangle, match):
    early, _, _ = blobs
    with pytest.raises(snap.SnapshotError, match=match):
        sch.Scheduler.restore(mangle(early), [], SimulatedWorker(), _learner, source="run/scheduler_3")


def test_decoding_builds_only_registered_types():
    evil = {"$obj": "subprocess:Popen", "f": {"args": ["touch", "/tmp/pwned"]}}
    body = json.dumps(evil).encode()
    import zlib

    head = {
        "format": snap.FORMAT,
        "version": snap.VERSION,
        "body_bytes": len(body),
        "crc32": zlib.crc32(body),
    }
    with pytest.raises(snap.SnapshotError, match=r"unknown type 'subprocess:Popen'"):
        snap.loads(json.dumps(head).encode() + b"\n" + body)
    with pytest.raises(snap.SnapshotError, match=r"cannot snapshot: cannot encode a .*Thing"):
        snap.dumps({"x": type("Thing", (), {})()})


def test_round_trip_keeps_types_exactly():
    from agentjax.sampling.staleness import Terminal

    x = {
        "a": (1, 2.5, float("nan")),
        3: [np.float32(0.1), np.arange(4, dtype=np.int16)],
        "t": Terminal.TRAINED,
        "e": ValueError("boom"),
        "s": frozenset({"b", "a"}),
    }
    y = snap.loads(snap.dumps(x))
    assert y["a"][:2] == (1, 2.5) and np.isnan(y["a"][2])
    assert type(y[3][0]) is np.float32 and y[3][0] == np.float32(0.1)
    assert y[3][1].dtype == np.int16 and y[3][1].tolist() == [0, 1, 2, 3]
    assert y["t"] is Terminal.TRAINED and repr(y["e"]) == "ValueError('boom')"
    assert y["s"] == frozenset({"a", "b"})


def test_every_task_type_of_a_training_run_round_trips():
    """minirepo and codefix tasks (GroupTask members) survive a snapshot unchanged."""
    from agentjax.envs import minirepo
    from agentjax.envs.codefix import api
    from agentjax.sampling.worker import GroupTask

    codefix = api.Task(
        name="clamp",
        description="d",
        package="p",
        repo_dir="/r",
        editable=("a.py",),
        reference={"a.py": "x = 1\n"},
        wrong={},
        cases=({"id": 1, "args": [2]},),
        quarantined=frozenset({"c2"}),
        fingerprint="f",
        validation={"ok": [1, 2]},
    )
    tasks = [minirepo.generate(3, "train"), codefix]
    for t in tasks:
        g = GroupTask(t, seed=5, task_id="x", task_class="y")
        assert snap.loads(snap.dumps({"g": g}))["g"] == g


def test_retry_state_survives_a_snapshot():
    """Infra-fault retries (queue, origins, per-task retry state) continue exactly after a restore."""
    from agentjax.sampling.retry import make_retry

    def make():
        cfg = sch.SchedulerConfig(mode="async", num_slots=8, learner_step_time=5.0)
        return sch.Scheduler(
            long_tailed_workload(40, infra_fault_rate=0.3),
            SimulatedWorker(),
            _learner,
            np.zeros(3),
            config=cfg,
            retry=make_retry(3, 2),
            staleness_config=stl.StalenessConfig(max_version_gap=2),
            batch_size=8,
        )

    straight = make().run(8).finish()
    first = make().run(3)
    assert first.state.retry_states  # faults were retried before the snapshot
    again = (
        sch.Scheduler.restore(
            first.snapshot(),
            long_tailed_workload(40, infra_fault_rate=0.3),
            SimulatedWorker(),
            _learner,
            retry=make_retry(3, 2),
        )
        .run(8)
        .finish()
    )
    assert again.events == straight.events
    assert again.params.tobytes() == straight.params.tobytes()
