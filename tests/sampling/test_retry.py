"""The scheduler's retry policy for infra faults: masked, resubmitted with a fresh seed, and
stopped by the attempt budget or by a root cause that keeps failing (correlated failures)."""

import collections

from agentjax.envs.protocol import Label
from agentjax.sampling import scheduler as sch
from agentjax.sampling import staleness as stl
from agentjax.sampling.retry import make_retry
from agentjax.sampling.simulated import SimTask, SimTurn, SimulatedWorker


def _task(i, label=Label.PASS):
    return SimTask(
        f"t{i}", "short", seed=i, turns=(SimTurn(5, 0, 2),), token_time=1.0, prefill_time=0.1, label=label
    )


def _run(retry):
    tasks = [_task(0, Label.INFRA_FAULT)] + [_task(i) for i in range(1, 12)]
    cfg = sch.SchedulerConfig(mode="async", num_slots=2)
    s = sch.Scheduler(
        tasks,
        SimulatedWorker(),
        lambda p, b: p + 1,
        0,
        config=cfg,
        staleness_config=stl.StalenessConfig(max_version_gap=100),
        batch_size=2,
        retry=retry,
    )
    log = s.run(4).finish()
    attempts = [r for r in log.records if r.task_id == "t0"]
    return s, log, attempts


def test_infra_faults_are_masked_and_retried_until_the_budget():
    _, log, attempts = _run(None)
    assert len(attempts) == 1 and attempts[0].terminal.value == "masked"  # no policy: masked only
    s, log, attempts = _run(make_retry(max_attempts=3, max_same_cause=10))
    assert len(attempts) == 3 and all(r.terminal.value == "masked" for r in attempts)
    seeds = [s.account.tasks[r.index].seed for r in attempts]
    assert len(set(seeds)) == 3  # each retry draws a fresh episode seed
    trained = collections.Counter(c.trajectory.task_id for b in log.batches for c in b)
    assert "t0" not in trained  # never a zero reward in a batch


def test_a_repeating_root_cause_stops_the_retries():
    _, _, attempts = _run(make_retry(max_attempts=10, max_same_cause=2))
    assert len(attempts) == 2  # the same cause (label, kind, environment) twice: stop
