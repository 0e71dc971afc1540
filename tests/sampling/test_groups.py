"""Dynamic sampling: uniform groups (all rewards equal) are dropped and replaced, within a budget."""

import collections

import numpy as np
import pytest

from agentjax.envs.protocol import Label
from agentjax.sampling import scheduler as sch
from agentjax.sampling import staleness as stl
from agentjax.sampling.groups import GroupGate
from agentjax.sampling.simulated import SimTask, SimTurn, SimulatedWorker


def test_gate_releases_mixed_groups_drops_uniform_ones_and_spends_its_budget():
    g = GroupGate(group_size=2, budget=2)
    assert g.outcome("a", 0, 1.0) == ([], [])  # open: held
    assert g.outcome("a", 1, 0.0) == ([0, 1], [])  # mixed: released in completion order
    assert g.outcome("b", 2, 1.0) == ([], [])
    assert g.outcome("b", 3, 1.0) == ([], [2, 3])  # uniform: dropped
    assert g.outcome("c", 4, 0.0) == ([], [])
    assert g.outcome("c", 5, 0.0) == ([4, 5], [])  # budget spent: released
    assert (g.dropped, g.dropped_total, g.released_uniform) == (2, 2, 2)
    g.on_step()
    assert g.outcome("d") == ([], []) and g.outcome("d", 6, 0.0) == ([], [6])  # a member without reward
    assert g.holding() == [] and g.held == {} and g.seen == {}


def group_tasks(n_groups, size, rng, fault_rate=0.0, pass_rate=0.5):
    """``size`` consecutive members per group, random labels and long-tailed latencies."""
    out = []
    for g in range(n_groups):
        p = rng.choice([0.0, pass_rate, 1.0])  # some groups uniform by construction
        for m in range(size):
            i = g * size + m
            label = Label.PASS if rng.random() < p else Label.FAIL
            if rng.random() < fault_rate:
                label = Label.INFRA_FAULT
            turns = tuple(
                SimTurn(int(rng.integers(1, 6)), float(rng.pareto(1.5)), 2) for _ in range(rng.integers(1, 4))
            )
            out.append(SimTask(f"g{g}", "c", seed=i, turns=turns, token_time=0.1, label=label))
    return out


def run(tasks, *, size, mode="windowed_fifo", batch=8, steps=6, gap=2, budget=4, drop="drop"):
    cfg = sch.SchedulerConfig(mode=mode, num_slots=16, window=16, uniform_groups=drop, drop_budget=budget)
    s = sch.Scheduler(
        tasks,
        SimulatedWorker(),
        lambda p, b: p + 1,
        0,
        config=cfg,
        staleness_config=stl.StalenessConfig(max_version_gap=gap),
        batch_size=batch,
        group_size=size,
    )
    return s, s.run(steps).finish()


@pytest.mark.parametrize("seed", range(6))
def test_no_uniform_group_is_trained_while_the_budget_lasts_and_every_task_is_accounted(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.choice([2, 3, 4]))
    mode = ["async", "windowed_fifo", "sync"][seed % 3]
    tasks = group_tasks(200, size, rng, fault_rate=float(rng.choice([0.0, 0.1])))
    s, log = run(tasks, size=size, mode=mode, budget=1000)
    assert s.steps == 6
    assert stl.is_conserved(log.staleness)
    counts = log.terminal_counts()
    assert counts["filtered"] == log.staleness.filtered > 0
    # whole groups per batch: a batch is short only by less than a group
    assert all(8 - size < len(b) <= 8 for b in log.batches) and counts["trained"] == sum(
        map(len, log.batches)
    )
    for r in log.records:  # a dropped group is dropped whole: no member of it was trained
        if r.terminal == stl.Terminal.FILTERED:
            assert not any(o.task_id == r.task_id and o.terminal == stl.Terminal.TRAINED for o in log.records)
    # every group with a trained member got different rewards (its members with a reward: the
    # gate decides on those; some may later be rejected over the gap or cancelled at shutdown)
    rewards = collections.defaultdict(set)
    for t in s.traj.values():
        if t.final_reward is not None:
            rewards[t.task_id].add(t.final_reward)
    trained = {c.trajectory.task_id for b in log.batches for c in b}
    assert trained and all(len(rewards[g]) > 1 for g in trained)
    assert s.state.gate.released_uniform == 0


def test_keep_trains_uniform_groups_and_drop_trains_whole_mixed_groups():
    rng = np.random.default_rng(0)
    tasks = group_tasks(100, 4, rng)
    _, keep = run(list(tasks), size=4, drop="keep")
    _, drop = run(list(tasks), size=4, budget=1000)
    uniform = lambda log: sum(  # noqa: E731
        len({c.trajectory.final_reward for c in b if c.trajectory.task_id == t}) == 1
        for b in log.batches
        for t in {c.trajectory.task_id for c in b}
    )
    assert keep.terminal_counts()["filtered"] == 0 and uniform(keep) > 0
    assert drop.terminal_counts()["filtered"] > 0 and uniform(drop) == 0
    # a group is trained whole, in one batch: its advantages see every member
    seen = collections.Counter(c.trajectory.task_id for b in drop.batches for c in b)
    per_batch = collections.Counter(t for b in drop.batches for t in {c.trajectory.task_id for c in b})
    assert set(seen.values()) == {4} and set(per_batch.values()) == {1}


def test_a_policy_with_only_uniform_groups_still_steps_within_the_budget():
    tasks = [
        SimTask(f"g{i // 4}", "c", seed=i, turns=(SimTurn(2, 1.0, 2),), label=Label.FAIL) for i in range(400)
    ]
    s, log = run(tasks, size=4, budget=2, steps=5)
    assert s.steps == 5
    # per step at most budget x batch = 16 dropped, then uniform groups are trained
    assert log.terminal_counts()["filtered"] <= 5 * 16 + 16
    assert log.terminal_counts()["trained"] == 5 * 8 and s.state.gate.released_uniform >= 5 * 8


def test_a_dropping_run_snapshots_and_resumes_exactly():
    rng = np.random.default_rng(3)
    tasks = group_tasks(200, 4, rng, fault_rate=0.05)
    _, whole = run(list(tasks), size=4, steps=6)
    cfg = sch.SchedulerConfig(mode="windowed_fifo", num_slots=16, window=16, uniform_groups="drop")
    kw = dict(config=cfg, staleness_config=stl.StalenessConfig(max_version_gap=2), batch_size=8, group_size=4)
    first = sch.Scheduler(list(tasks), SimulatedWorker(), lambda p, b: p + 1, 0, **kw).run(3)
    blob = first.snapshot()
    again = sch.Scheduler.restore(blob, list(tasks), SimulatedWorker(), lambda p, b: p + 1).run(6).finish()
    assert [[c.index for c in b] for b in again.batches] == [[c.index for c in b] for b in whole.batches]
    assert again.terminal_counts() == whole.terminal_counts()


def test_sync_rounds_continue_until_the_batch_holds_only_mixed_groups():
    """sync: a round whose groups were dropped is followed by rounds for the missing groups (the
    barrier stays: no round overlaps the learner); the batch is full and holds no uniform group."""
    rng = np.random.default_rng(5)
    tasks = group_tasks(200, 4, rng)
    s, log = run(tasks, size=4, mode="sync", budget=1000, gap=0)
    assert s.steps == 6 and log.terminal_counts()["filtered"] > 0
    assert all(len(b) == 8 for b in log.batches)
    for b in log.batches:
        for g in {c.trajectory.task_id for c in b}:
            assert len({c.trajectory.final_reward for c in b if c.trajectory.task_id == g}) > 1
    assert log.staleness.max_gap == 0  # every trained episode sampled by the version it trains


def test_drop_is_refused_without_groups():
    with pytest.raises(ValueError, match="group_size"):
        run([], size=1)
