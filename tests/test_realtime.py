"""``scheduler.clock='real'``: the training loop on the wall clock (agentjax/sampling/realtime.py).

Trained at smoke size through ``system.train``: the async mode keeps sampling while the learner
trains (the sampler and learner threads are busy at the same time), the sync mode never does (its
barrier), the version-gap bound holds on real events, a killed real-time run resumes from its
checkpoint (sampling its in-flight tasks again), and ``--replay`` re-executes a real-time run
bitwise.
"""

import collections
import json
import os

import pytest

from agentjax.learner.journal import Journal
from agentjax.policy.config import ConfigError
from agentjax.run import loop
from agentjax.sampling.replay import ScheduleError
from tests.runs import tiny_config

pytestmark = pytest.mark.slow


def _train(workdir, **overrides):
    cfg = tiny_config("default", steps=3, scheduler__clock="real", **overrides)
    summary = loop.train(cfg, str(workdir), log=lambda s: None)
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl")) if x.strip()]
    return summary, [r for r in rows if "loss/total" in r]


def test_env_latency_as_real_waiting_runs_on_the_pool_while_the_engine_decodes(tmp_path):
    """scheduler.env_latency_scale: each tool call waits its simulated (long-tailed) latency in
    real time on the env pool; the pool's measured latency and utilisation show it, and the
    engine keeps decoding the other slots meanwhile (Little's law holds on the real events)."""
    summary, rows = _train(
        tmp_path, scheduler__mode="async", scheduler__engine_slots=8, scheduler__env_latency_scale=0.01
    )
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the slot engine's generation throughput on each step's batch (tokens over generate seconds)
    assert all(r["throughput/generated_tokens_per_s"] > 0 for r in rows)
    pool = summary["engine"]["env_pool"]
    trajs = Journal(os.path.join(tmp_path, "journal.bin")).read()
    simulated = sum(t.timings["env"] for t in trajs) / max(sum(len(t.rewards) for t in trajs), 1)
    assert simulated > 0.1  # seconds of simulated tool latency per step (long-tailed)
    assert pool["service_mean"] >= 0.01 * simulated * 0.9  # each step waited its scaled latency
    assert pool["in_flight_measured"] > 0 and pool["littles_law_rel_error"] < 0.05
    # Little's law is an identity a serial pool satisfies too: the steps were also served at
    # once (a pool of one worker never serves two)
    assert 1 < pool["busy_max"] <= pool["workers"], pool
    # continuous admission: rounds the scheduler submitted while episodes ran joined that call
    # (each result was delivered as its episode ended, not when the call's longest one did)
    assert summary["engine"]["joined_running"] > 0
    assert summary["realtime"]["rounds_per_call"] > 16, summary["realtime"]


def _episodes(workdir):
    """Each journaled episode's task, seed-defined tokens, log-probs and per-token versions."""
    out = []
    for t in Journal(os.path.join(workdir, "journal.bin")).read():
        turns = [(u.action.tobytes(), u.logp.tobytes(), u.version.tobytes()) for u in t.turns]
        out.append((t.submit_index, t.task_id, t.final_reward, turns))
    return sorted(out, key=lambda e: e[0])


def test_async_real_time_overlaps_within_the_gap_bound_and_its_replay_is_bitwise(tmp_path):
    """Async on the real clock: the engine generates while the learner trains, and the version-gap
    bound acts on real events. launch.train --replay=W: the recorded delivery order of that run
    re-executed gives the same episodes (tokens, log-probs, per-token versions) and the same final
    parameters. On the slot engine (the default's) the real run admits rounds into the running
    call and several versions share its slots; the replay runs each round in a call of its own.
    (Lock-step rollout replays through the same schedule; its real-clock runs are the other tests
    of this file.)"""
    # a short warm start passes some episodes and dynamic sampling (the default's) trains the
    # mixed groups: the learner steps move the weights
    kw = dict(
        scheduler__mode="async",
        admission__max_version_gap=1,
        warm_start__steps=150,
        warm_start__episodes=256,
        scheduler__uniform_groups="drop",
        scheduler__drop_budget=64,
        scheduler__engine_slots=8,
    )
    first, rows = _train(tmp_path / "real", **kw)
    rt = first["realtime"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rt["clock"] == "real" and rt["sampler_busy_s"] > 0 and rt["learner_busy_s"] > 0
    assert rt["overlap_s"] > 0, rt  # the engine generated while the learner trained
    assert max(r["version_gap_max"] for r in rows) <= 1  # the bound acts on real events
    trajs = Journal(os.path.join(tmp_path / "real", "journal.bin")).read()
    assert len(trajs) >= 3 * 16 and all(t.num_action_tokens > 0 for t in trajs)
    # wall-clock seconds, not the virtual clock's: the step rows carry the real elapsed time
    assert 0 < rows[-1]["virtual_time"] <= rt["wall_s"] + 1e-6
    assert any(r["batch/all_same_groups"] < r["batch/groups"] for r in rows)
    assert os.path.exists(tmp_path / "real" / "schedule.json")
    cfg = tiny_config("default", steps=3, scheduler__clock="real", **kw)
    again = loop.train(cfg, str(tmp_path / "replay"), replay=str(tmp_path / "real"), log=lambda s: None)
    assert again["params_sha256"] == first["params_sha256"]
    assert _episodes(tmp_path / "replay") == _episodes(tmp_path / "real")
    versions = {r["step"]: r["version_gap_max"] for r in rows}
    replayed = [json.loads(x) for x in open(tmp_path / "replay" / "metrics.jsonl") if "loss/total" in x]
    assert {r["step"]: r["version_gap_max"] for r in replayed} == versions
    # another config is refused before any work, naming what differs
    other = tiny_config("default", steps=3, scheduler__clock="real", scheduler__mode="async")
    with pytest.raises(ScheduleError, match=r"another config \(sections \['admission', 'scheduler', 'warm"):
        loop.train(other, str(tmp_path / "other"), replay=str(tmp_path / "real"), log=lambda s: None)


def test_sync_real_time_never_overlaps(tmp_path):
    summary, rows = _train(tmp_path, scheduler__mode="sync")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert summary["realtime"]["overlap_s"] == 0.0  # the barrier: sample, then learn
    assert all(r["version_gap_max"] == 0 for r in rows)


def test_sigkill_then_resume_continues_a_real_time_run_on_the_slot_engine(tmp_path):
    """The default's clock and engine: killed after a checkpoint, ``--resume`` continues from
    it. The tasks in flight at the checkpoint (its redo record, whole groups) are sampled again
    first, every step after it trains once, and the journal's submission indices go on from the
    checkpoint's count (no index reused). A resumed run's schedule cannot be replayed."""
    from agentjax.learner import resume as durable
    from agentjax.sampling import snapshot
    from tests.runs import run_module, tail, train_until_killed

    wd = str(tmp_path / "run")
    flags = [
        "--config=configs/smoke.py",
        f"--workdir={wd}",
        "--config.report=False",
        "--config.scheduler.clock=real",
        "--config.scheduler.engine_slots=8",
    ]
    ckdir = os.path.join(wd, "checkpoints")
    killed_at = train_until_killed(flags, ckdir, 4)
    assert killed_at is not None and killed_at < 12
    with open(durable.snapshot_path(ckdir, killed_at), "rb") as f:
        record = snapshot.loads(f.read(), fields=("kind", "redo", "submitted"))
    assert record["kind"] == "realtime" and record["submitted"] > 0
    ids = collections.Counter(t.task_id for t in record["redo"])
    assert all(n % 4 == 0 for n in ids.values()), ids  # whole groups of rl.group_size=4
    out = run_module("launch.train", *flags, "--resume")
    assert out.returncode == 0, tail(out)
    assert f"resumed from step {killed_at}" in out.stdout
    assert "engine " in out.stdout and " tok/s occ " in out.stdout  # the engine's progress figures
    rows = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl")) if "loss/total" in x]
    assert [r["step"] for r in rows] == list(range(1, 13))  # each step once, none lost or repeated
    trajs = Journal(os.path.join(wd, "journal.bin")).read()
    index = [t.submit_index for t in trajs]
    assert len(set(index)) == len(index) and max(index) >= record["submitted"]  # none reused
    again = {t.task_id for t in trajs if t.submit_index >= record["submitted"]}
    assert ids and set(ids) <= again  # the tasks in flight at the checkpoint were sampled again
    cfg = tiny_config("default", scheduler__clock="real")
    with pytest.raises(ScheduleError, match=f"resumed at step {killed_at}"):
        loop.train(cfg, str(tmp_path / "again"), replay=wd, log=lambda s: None)


def test_unknown_clock_is_named():
    from agentjax.run import config as runconfig

    with pytest.raises(
        ConfigError, match=r"scheduler.clock='wall' is invalid; allowed values: \['virtual', 'real'\]"
    ):
        runconfig.parse(tiny_config("default", scheduler__clock="wall"))
