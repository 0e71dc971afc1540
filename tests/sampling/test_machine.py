"""The scheduler machine without an executor: one test per transition, and random event
sequences (every mode, gate, fault and pause mix) that keep its invariants at every step:
conservation, the version-gap bound, a pure step (its input state unchanged, the same outputs
for the same input) and every submission resolved exactly once."""

import dataclasses
import random

import pytest

from agentjax import tagjson
from agentjax.sampling import machine as mc
from agentjax.sampling import schedstate as ss
from agentjax.sampling import staleness as stl
from agentjax.sampling.clock import Failure
from agentjax.sampling.queue import RoundResult
from agentjax.sampling.retry import make_retry
from agentjax.sampling.runlog import SchedulerConfig
from agentjax.sampling.staleness import Terminal
from agentjax.trajectory import StopReason, Trajectory


@dataclasses.dataclass(frozen=True)
class T:
    task_id: str
    task_class: str = "c"
    seed: int = 0


# the purity check compares encoded states and outputs (commands are never stored otherwise)
tagjson.allow(T, ss.Draw, ss.StartRound, ss.Cancel, ss.Train, ss.Publish, ss.Note, ss.Resolved, ss.Finished)


def result(task, reward=1.0, paused=False) -> RoundResult:
    stop = StopReason.ROUND_BUDGET_PAUSED if paused else StopReason.FINISHED
    traj = Trajectory(task.task_id, task.task_class, [], stop, final_reward=None if paused else reward)
    return RoundResult(state={"paused": paused}, trajectory=traj, duration=1.0)


def machine(mode="async", *, slots=2, batch=2, gap=1, group=1, **kw):
    cfg = SchedulerConfig(mode=mode, num_slots=slots, window=kw.pop("window", 64), **kw)
    return mc.make(cfg, stl.StalenessConfig(max_version_gap=gap), batch_size=batch, group_size=group)


def kinds(outputs, kind):
    return [o for o in outputs if isinstance(o, kind)]


def feed(m, state, *events):
    out = []
    for e in events:
        state, o = m.step(state, e)
        out += o
    return state, out


# -- one test per transition ---------------------------------------------------------------------
def test_tick_asks_for_tasks_and_drawn_starts_rounds_in_every_free_slot():
    m = machine(slots=3)
    s0 = m.init()
    s1, out = m.step(s0, ss.Tick(0.0, target=1))
    assert out == (ss.Draw(3),) and s1.target == 1 and s1.submitted == 0
    s2, out = m.step(s1, ss.Drawn(0.0, (T("a"), T("b"), T("c"), T("d")), exhausted=False))
    starts = kinds(out, ss.StartRound)
    assert [c.index for c in starts] == [0, 1, 2] and all(c.item.version == 0 for c in starts)
    assert set(s2.running) == {0, 1, 2} and s2.offered == (T("d"),) and s2.drawn == 4
    assert [n.kind for n in kinds(out, ss.Note)] == ["submit", "start"] * 3
    assert s2.st.submitted == s2.st.in_flight == 3


def test_a_tick_past_the_target_does_nothing():
    m = machine()
    s, out = m.step(m.init(), ss.Tick(0.0, target=0))
    assert out == () and s.submitted == 0


def test_completed_rounds_fill_the_batch_and_train_is_a_command():
    m = machine(slots=2, batch=2)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 1), ss.Drawn(0.0, (T("a"), T("b")), True))
    s, out = m.step(s, ss.RoundDone(1.0, 0, result(T("a"), 1.0)))
    assert not kinds(out, ss.Train) and kinds(out, ss.Finished)[0].index == 0
    assert [c.index for c in s.batch] == [0] and s.completed == ()  # taken at once (async)
    s, out = m.step(s, ss.RoundDone(2.0, 1, result(T("b"), 0.0)))
    (train,) = kinds(out, ss.Train)
    assert [c.index for c in train.batch] == [0, 1] and train.time == 2.0 and s.training
    assert [r.record.terminal for r in kinds(out, ss.Resolved)] == [Terminal.TRAINED] * 2
    assert train.batch[0].trajectory.timings["queue"] == 1.0  # completed at 1, trained at 2
    assert s.records == {} and s.traj == {}  # resolved submissions leave the state
    assert s.st.trained == 2 and s.st.queued == 0


def test_learner_done_only_asks_to_publish_and_published_moves_the_version():
    m = machine(slots=2, batch=2)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 2), ss.Drawn(0.0, (T("a"), T("b")), False))
    s, out = m.step(s, ss.RoundDone(1.0, 0, result(T("a"))))
    assert out[-1] == ss.Draw(1) and not s.batch  # a free slot wants a task before anything else
    s, out = feed(m, s, ss.Drawn(1.0, (T("c"),), True), ss.RoundDone(1.0, 1, result(T("b"))))
    assert [c.index for c in kinds(out, ss.Train)[0].batch] == [0, 1]
    s, out = m.step(s, ss.LearnerDone(3.0))
    assert out == (ss.Publish(1),) and s.version == 0 and s.training
    with pytest.raises(ValueError, match="Published"):
        m.step(s, ss.Published(3.0, 2))
    s, out = m.step(s, ss.Published(3.0, 1))
    assert s.version == s.steps == 1 and not s.training and s.st.version == 1
    assert ss.Note(3.0, "step", -1, 1) in out


def test_a_paused_round_waits_for_a_newer_version_and_resumes_with_its_state():
    m = machine(slots=2, batch=1, gap=3, round_budget=5)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 3), ss.Drawn(0.0, (T("a"), T("b"), T("c")), True))
    s, out = m.step(s, ss.RoundDone(1.0, 0, result(T("a"), paused=True)))
    assert s.paused == {0: 0} and s.resumable == {0: {"paused": True}}
    (start,) = kinds(out, ss.StartRound)
    assert start.index == 2  # the free slot takes new work, not the paused rollout (same version)
    s, out = feed(m, s, ss.RoundDone(2.0, 1, result(T("b"))), ss.LearnerDone(2.0), ss.Published(2.0, 1))
    (start,) = kinds(out, ss.StartRound)
    assert start.index == 0 and start.item.state == {"paused": True} and start.item.version == 1
    assert ss.Note(2.0, "resume", 0, 1) in out


def test_a_failed_round_is_resolved_failed_and_its_slot_refilled():
    m = machine(slots=1)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 1), ss.Drawn(0.0, (T("a"), T("b")), True))
    s, out = m.step(s, ss.RoundDone(1.0, 0, Failure(RuntimeError("boom"))))
    (res,) = kinds(out, ss.Resolved)
    assert res.record.terminal == Terminal.FAILED and "boom" in res.record.reason
    assert [c.index for c in kinds(out, ss.StartRound)] == [1]


def test_publishing_cancels_rounds_over_the_version_gap_bound():
    cfg = SchedulerConfig(mode="async", num_slots=2)
    scfg = stl.StalenessConfig(max_version_gap=2, class_max_gap={"slow": 0})
    m = mc.make(cfg, scfg, batch_size=1)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 5), ss.Drawn(0.0, (T("a"), T("b", "slow")), True))
    s, _ = feed(m, s, ss.RoundDone(1.0, 0, result(T("a"))), ss.LearnerDone(1.0))
    assert 1 in s.running  # sampled at version 0
    s, out = m.step(s, ss.Published(1.0, 1))
    assert ss.Cancel(1) in out
    (res,) = [r for r in kinds(out, ss.Resolved) if r.record.index == 1]
    assert res.record.terminal == Terminal.CANCELLED and res.record.reason == "over_gap"


def test_a_masked_trajectory_is_never_trained_and_a_retry_resubmits_it():
    cfg = SchedulerConfig(mode="async", num_slots=1)
    m = mc.make(cfg, stl.StalenessConfig(), batch_size=1, retry=make_retry(2, 2))
    s, _ = feed(m, m.init(), ss.Tick(0.0, 1), ss.Drawn(0.0, (T("a", seed=7),), True))
    s, out = m.step(s, ss.RoundDone(1.0, 0, result(T("a"), reward=None)))
    (res,) = kinds(out, ss.Resolved)
    assert res.record.terminal == Terminal.MASKED and not kinds(out, ss.Train)
    (start,) = kinds(out, ss.StartRound)
    assert start.index == 1 and start.item.task.task_id == "a" and s.retry_of == {1: 0}
    assert start.item.task.seed != 7  # a fresh episode seed


def test_sync_draws_its_round_whole_and_trains_at_the_barrier():
    m = machine("sync", slots=2, batch=3)
    s, out = m.step(m.init(), ss.Tick(0.0, 1))
    assert out == (ss.Draw(3),)
    s, out = m.step(s, ss.Drawn(0.0, (T("a"), T("b"), T("c")), False))
    assert len(kinds(out, ss.StartRound)) == 2 and s.round_queue == (2,)
    s, out = feed(m, s, ss.RoundDone(1.0, 0, result(T("a"))), ss.RoundDone(1.0, 1, result(T("b"))))
    assert not kinds(out, ss.Train) and 2 in s.running  # the barrier holds
    s, out = m.step(s, ss.RoundDone(2.0, 2, result(T("c"))))
    (train,) = kinds(out, ss.Train)
    assert [c.index for c in train.batch] == [0, 1, 2]


def test_windowed_fifo_does_not_take_past_its_window():
    m = machine("windowed_fifo", slots=3, batch=1, window=1, gap=4)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 1), ss.Drawn(0.0, (T("a"), T("b"), T("c")), True))
    s, out = m.step(s, ss.RoundDone(1.0, 2, result(T("c"))))
    assert not kinds(out, ss.Train) and s.completed == (2,)  # head 0 still running
    s, out = m.step(s, ss.RoundDone(2.0, 0, result(T("a"))))
    assert [c.index for c in kinds(out, ss.Train)[0].batch] == [0]


def test_the_gate_drops_uniform_groups_and_trains_mixed_ones_whole():
    m = machine("async", slots=4, batch=2, group=2, uniform_groups="drop")
    tasks = (T("g"), T("g"), T("h"), T("h"))
    s, _ = feed(m, m.init(), ss.Tick(0.0, 1), ss.Drawn(0.0, tasks, True))
    s, out = feed(m, s, ss.RoundDone(1.0, 0, result(T("g"), 1.0)), ss.RoundDone(1.0, 1, result(T("g"), 1.0)))
    assert [r.record.terminal for r in kinds(out, ss.Resolved)] == [Terminal.FILTERED] * 2
    s, out = feed(m, s, ss.RoundDone(2.0, 2, result(T("h"), 1.0)), ss.RoundDone(2.0, 3, result(T("h"), 0.0)))
    (train,) = kinds(out, ss.Train)
    assert [c.index for c in train.batch] == [2, 3] and train.sampling["sampling/dropped_uniform"] == 2.0


def test_shutdown_resolves_every_live_submission_once():
    m = machine(slots=2, batch=4, round_budget=3)
    s, _ = feed(m, m.init(), ss.Tick(0.0, 1), ss.Drawn(0.0, (T("a"), T("b"), T("c")), True))
    s, _ = feed(m, s, ss.RoundDone(1.0, 0, result(T("a"))), ss.RoundDone(1.0, 1, result(T("b"), paused=True)))
    s, out = m.step(s, ss.Shutdown(2.0))
    assert sorted(r.record.index for r in kinds(out, ss.Resolved)) == [0, 1, 2]
    assert ss.Cancel(2) in out and s.records == {} and stl.is_conserved(s.st)
    assert s.st.in_flight == s.st.queued == 0


def test_an_unknown_event_is_a_type_error():
    m = machine()
    with pytest.raises(TypeError, match="not a scheduler event"):
        m.step(m.init(), ss.Note(0.0, "tick", 0, 0))


# -- random event sequences ----------------------------------------------------------------------
def _random_machine(rng: random.Random):
    mode = rng.choice(["sync", "async", "windowed_fifo"])
    group = rng.choice([1, 2, 3])
    drop = group > 1 and rng.random() < 0.6
    cfg = SchedulerConfig(
        mode=mode,
        num_slots=rng.randint(1, 6),
        window=rng.randint(1, 6),
        round_budget=rng.choice([0, 0, 4]),
        uniform_groups="drop" if drop else "keep",
        drop_budget=rng.randint(0, 2),
    )
    scfg = stl.StalenessConfig(max_version_gap=rng.randint(0, 2), max_in_flight=rng.randint(1, 8))
    retry = make_retry(2, 2) if rng.random() < 0.5 else None
    batch = rng.randint(1, 4) * group
    return mc.make(cfg, scfg, batch_size=batch, group_size=group, retry=retry), group


def _tasks(rng, group, n):
    return [T(f"g{i // group}", rng.choice(["x", "y"])) for i in range(n)]


def _invariants(m, s, resolved_once):
    st = s.st
    assert stl.is_conserved(st), st
    assert st.in_flight == len(s.running) + len(s.paused) + len(s.round_queue)
    assert st.queued == len(s.completed) + len(s.batch) + len(s.gate.holding())
    bound = m.spec.staleness.max_version_gap
    assert st.max_gap <= bound and st.gap_hist[-1] == 0  # no trained sample over the gap
    assert set(s.records) == set(s.task)
    assert all(r.terminal is None for r in s.records.values())
    assert not set(s.records) & resolved_once
    assert set(s.records) | resolved_once == set(range(s.submitted))


@pytest.mark.parametrize("seed", range(60))
def test_random_event_sequences_keep_conservation_bounds_and_purity(seed):
    rng = random.Random(seed)
    m, group = _random_machine(rng)
    source = _tasks(rng, group, 60)
    state, events = m.init(), [ss.Tick(0.0, rng.randint(3, 12))]
    running, resolved, now, train_pending, publish = {}, set(), 0.0, None, None
    trained_groups: set[str] = set()
    for _ in range(400):
        if events:
            event = events.pop(0)
        else:
            choices = [*(("round", i) for i in running)]
            if train_pending:
                choices.append(("learner", None))
            if not choices:
                break
            what, i = rng.choice(choices)
            now += rng.random()
            if what == "learner":
                event, train_pending = ss.LearnerDone(now), None
            else:
                item = running.pop(i)
                roll = rng.random()
                if roll < 0.08:
                    res = Failure(RuntimeError("x"))
                elif roll < 0.2 and item.round_budget:
                    res = result(item.task, paused=True)
                else:
                    res = result(item.task, reward=None if roll < 0.3 else float(rng.random() < 0.5))
                event = ss.RoundDone(now, i, res)
        before = tagjson.encode(state)
        new, out = m.step(state, event)
        again = m.step(state, event)
        assert tagjson.encode(state) == before, "step changed its input state"
        assert tagjson.encode(again[0]) == tagjson.encode(new)  # the same state and outputs
        assert tagjson.encode(list(again[1])) == tagjson.encode(list(out))
        state = new
        for o in out:
            match o:
                case ss.StartRound(index=i, item=item):
                    running[i] = item
                case ss.Cancel(index=i):
                    running.pop(i)
                case ss.Resolved(record=rec):
                    assert rec.index not in resolved and rec.terminal is not None
                    resolved.add(rec.index)
                case ss.Train(batch=batch):
                    assert train_pending is None and len(batch) <= m.spec.batch_size
                    ids = {c.trajectory.task_id for c in batch}
                    if m.spec.drop:  # a group is trained whole, in one batch
                        assert not ids & trained_groups, (ids, trained_groups)
                    trained_groups |= ids
                    train_pending = batch
                case ss.Publish(version=v):
                    publish = v
                case ss.Draw(count=n):
                    take, source = source[:n], source[n:]
                    events.append(ss.Drawn(now, tuple(take), len(take) < n))
        if publish is not None:
            events.append(ss.Published(now, publish))
            publish = None
        _invariants(m, state, resolved)
    state, out = m.step(state, ss.Shutdown(now))
    resolved |= {o.record.index for o in out if isinstance(o, ss.Resolved)}
    _invariants(m, state, resolved)
    assert state.records == {} and resolved == set(range(state.submitted))
