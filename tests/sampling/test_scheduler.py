"""Scheduler modes on the virtual clock: consumption order, barrier, partial rollout, bounds."""

import numpy as np
import pytest

from agentjax.diagnostics import metrics
from agentjax.envs.protocol import Label
from agentjax.sampling import scheduler as sch
from agentjax.sampling import staleness as stl
from agentjax.sampling.queue import Caps, WorkItem
from agentjax.sampling.schedstate import Async, WindowedFifo, advance_window, consumable
from agentjax.sampling.simulated import SimTask, SimTurn, SimulatedWorker
from agentjax.trajectory import StopReason


def task(i, *turns, cls="short", label=Label.PASS):
    return SimTask(
        f"t{i}",
        cls,
        seed=i,
        turns=tuple(SimTurn(g, e, 2) for g, e in turns),
        token_time=1.0,
        prefill_time=0.1,
        label=label,
    )


def run(tasks, mode="async", *, batch=1, slots=4, window=None, steps=4, gap=100, **kw):
    cfg = sch.SchedulerConfig(mode=mode, num_slots=slots, window=window, **kw)
    scfg = stl.StalenessConfig(max_version_gap=gap)
    return sch.run(
        tasks,
        SimulatedWorker(),
        lambda p, b: p + 1,
        0,
        config=cfg,
        staleness_config=scfg,
        batch_size=batch,
        num_steps=steps,
    )


def order(log):
    return [c.index for b in log.batches for c in b]


@pytest.mark.parametrize(
    "mode,window,expected",
    [
        ("async", None, [1, 2, 3, 0]),  # greedy: completion order
        ("windowed_fifo", 2, [1, 0, 2, 3]),  # 2, 3 wait outside the window until head 0 is taken
        ("windowed_fifo", 1, [0, 1, 2, 3]),  # strict FIFO
        ("windowed_fifo", 8, [1, 2, 3, 0]),  # a large window is greedy
        ("sync", None, [0, 1, 2, 3]),  # batch of 1: one task per barrier
    ],
)
def test_consumption_order_follows_the_scheduling_mode(mode, window, expected):
    log = run(
        [task(0, (50, 0)), task(1, (10, 0)), task(2, (10, 0)), task(3, (10, 0))],
        mode,
        window=window,
    )
    assert order(log) == expected
    assert log.terminal_counts()["trained"] == 4


def test_sync_barrier_utilisation_10_20_100():
    log = run([task(0, (10, 0)), task(1, (20, 0)), task(2, (100, 0))], "sync", batch=3, slots=3, steps=1)
    assert log.elapsed == pytest.approx(100.0)
    assert order(log) == [0, 1, 2]
    s = metrics.summarise(log)
    assert s["slot_utilisation"] == pytest.approx(130 / 300)  # 43.3%


@pytest.mark.parametrize("resume,recompute", [("recompute", 5.8), ("keep", 0.0)])
def test_partial_rollout_pauses_and_resumes_under_new_version(resume, recompute):
    a = task(0, (30, 5), (30, 5))  # 60 tokens over two turns
    tasks = [a, task(1, (10, 0)), task(2, (10, 0))]
    log = run(tasks, "sync", batch=2, slots=2, steps=2, round_budget=40, resume=resume)
    # round 1 (v0): A pauses after 30 + 10 tokens at t=45, B trains; round 2 (v1): A resumes.
    assert [[c.index for c in b] for b in log.batches] == [[1], [0, 2]]
    traj = log.batches[1][0].trajectory
    assert traj.stop_reason == StopReason.FINISHED
    np.testing.assert_array_equal(traj.turns[0].version, [0] * 30)
    np.testing.assert_array_equal(traj.turns[1].version, [0] * 10 + [1] * 20)
    assert traj.turns[1].pauses == (10,) and traj.turns[0].pauses == ()
    rec = log.records[0]
    assert (rec.rounds, rec.pauses, rec.resume) == (2, 1, resume)
    # recompute re-prefills prompt 16 + action 30 + obs 2 + 10 partial tokens at 0.1 s each
    assert rec.recompute_time == pytest.approx(recompute)
    assert log.elapsed == pytest.approx(45 + recompute + 25)
    assert (rec.gen_gap, rec.queue_gap, rec.version_gap) == (1, 0, 1)
    assert any(e[1] == "pause" and e[2] == 0 for e in log.events)


def _round(t, version, state=None, budget=None, caps=None):
    item = WorkItem(t, version, budget, caps, "keep", state)
    return SimulatedWorker().run_round(item)


def test_round_budget_and_task_cap_are_told_apart():
    t = task(0, (30, 5), (30, 5))
    r1 = _round(t, 0, budget=40, caps=Caps(max_tokens=45))
    assert r1.paused and r1.trajectory.stop_reason == StopReason.ROUND_BUDGET_PAUSED
    r2 = _round(t, 1, r1.state, budget=40, caps=Caps(max_tokens=45))
    assert r2.trajectory.stop_reason == StopReason.TASK_CAP
    assert r2.trajectory.num_action_tokens == 45
    np.testing.assert_array_equal(r2.trajectory.turns[1].version, [0] * 10 + [1] * 5)
    # budget and cap reached on the same token: the cap wins (the episode is over)
    tie = _round(t, 0, budget=45, caps=Caps(max_tokens=45))
    assert tie.trajectory.stop_reason == StopReason.TASK_CAP
    r = _round(t, 0, caps=Caps(max_tool_calls=1))
    assert r.trajectory.stop_reason == StopReason.TASK_CAP
    assert [x.observation.size for x in r.trajectory.turns] == [2, 0]
    assert r.trajectory.final_reward == 0.0  # the agent failed: a real zero, not a mask
    full = _round(t, 0)
    assert full.trajectory.stop_reason == StopReason.FINISHED and full.duration == 70.0
    assert full.env_intervals == ((30.0, 35.0), (65.0, 70.0))


def test_learner_trains_on_completed_round_even_if_a_task_is_capped():
    tasks = [task(0, (30, 5), (30, 5)), task(1, (10, 0))]
    log = run(tasks, "sync", batch=2, slots=2, steps=1, caps=Caps(max_tokens=20))
    stops = {c.index: c.trajectory.stop_reason for c in log.batches[0]}
    assert stops == {0: StopReason.TASK_CAP, 1: StopReason.FINISHED}
    assert log.elapsed == pytest.approx(20.0)


def test_submission_window_head():
    head, resolved = 0, frozenset()
    for i in (2, 1, 4):
        head, resolved = advance_window(head, resolved, i)
    assert head == 0
    head, resolved = advance_window(head, resolved, 0)
    assert head == 3 and resolved == {4}
    with pytest.raises(ValueError):
        advance_window(head, resolved, 1)
    assert consumable(WindowedFifo(3), [9, 4, 5, 3], head=3) == [3, 4, 5]
    assert consumable(Async(), [9, 4, 5, 3], head=3) == [9, 4, 5, 3]


@pytest.mark.parametrize(
    "kw,field",
    [
        (
            {"mode": "greedy"},
            r"mode='greedy' is invalid; allowed values: \['sync', 'async', 'windowed_fifo'\]",
        ),
        ({"mode": "windowed_fifo", "window": None}, "window"),
        ({"mode": "windowed_fifo", "window": 0}, "window"),
        ({"resume": "reuse"}, r"resume='reuse' is invalid; allowed values: \['recompute', 'keep'\]"),
        ({"num_slots": 0}, "num_slots"),
        ({"round_budget": -1}, "round_budget"),
    ],
)
def test_invalid_scheduler_config_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        sch.SchedulerConfig(**kw)


def test_run_rejects_inconsistent_configs():
    cfg = sch.SchedulerConfig()
    for bad in (0, "4"):
        with pytest.raises(ValueError, match="batch_size"):
            sch.run(
                [],
                SimulatedWorker(),
                lambda p, b: p,
                0,
                config=cfg,
                staleness_config=stl.StalenessConfig(),
                batch_size=bad,
                num_steps=1,
            )
    with pytest.raises(ValueError, match="queue_capacity"):
        sch.run(
            [],
            SimulatedWorker(),
            lambda p, b: p,
            0,
            config=cfg,
            staleness_config=stl.StalenessConfig(queue_capacity=3),
            batch_size=4,
            num_steps=1,
        )


def test_derived_queue_capacity_is_four_batches_at_least_the_slots():
    s = sch.Scheduler(
        [],
        SimulatedWorker(),
        lambda p, b: p,
        0,
        config=sch.SchedulerConfig(num_slots=40),
        staleness_config=stl.StalenessConfig(queue_capacity=0),
        batch_size=8,
    )
    assert s.machine.spec.staleness.queue_capacity == 40
    s = sch.Scheduler(
        [],
        SimulatedWorker(),
        lambda p, b: p,
        0,
        config=sch.SchedulerConfig(num_slots=4),
        staleness_config=stl.StalenessConfig(queue_capacity=0),
        batch_size=8,
    )
    assert s.machine.spec.staleness.queue_capacity == 32
