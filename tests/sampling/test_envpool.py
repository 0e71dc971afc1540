"""Environment pool: concurrent steps, real-event metrics, Little's law, threads and processes."""

import time

import pytest

from agentjax.sampling.envpool import EnvPool, pool_stats
from tests.sampling.pool_steps import broken_step, cpu_step


def _sleep_step(seconds, tag):
    time.sleep(seconds)
    return tag


def _stream(pool, n, gap, service):
    """Steady arrivals every ``gap`` seconds; returns every result, collected while submitting."""
    got = []
    for i in range(n):
        pool.submit(i, _sleep_step, service, i)
        got += pool.collect(timeout=0.0)
        time.sleep(gap)
    while pool.in_flight:
        got += pool.collect(timeout=None)
    return got


def test_small_pool_queues_and_implies_more_workers_littles_law_holds():
    """40 steps of 50 ms arriving every 10 ms (offered load 5 workers): 2 threads run them
    concurrently but queue; the metrics say so, and Little's law holds on the real events."""
    with EnvPool(2, "thread") as pool:
        t0 = time.monotonic()
        got = _stream(pool, 40, 0.01, 0.05)
        wall = time.monotonic() - t0
        s = pool.stats()
    assert sorted(d.value for d in got) == list(range(40)) and not any(d.error for d in got)
    assert wall < 40 * 0.05 * 0.75  # concurrent: well under the serial 2 s
    assert s["steps"] == 40 and s["utilisation"] > 0.8
    assert s["queue_length_mean"] > 1.0 and s["queue_wait_mean"] > 0.05
    assert 4 <= s["implied_workers"] <= 6  # 100 steps/s x 50 ms
    assert s["latency_p95"] >= s["latency_p50"] >= 0.05
    assert s["littles_law_rel_error"] < 0.1, s


def test_big_enough_pool_does_not_queue():
    with EnvPool(8, "thread") as pool:
        got = _stream(pool, 40, 0.01, 0.05)
        s = pool.stats()
    assert len(got) == 40
    assert s["queue_wait_mean"] < 0.01 and s["queue_length_mean"] < 0.2
    assert 0.3 < s["utilisation"] < 0.8  # ~5 of 8 busy while steps arrive
    assert s["littles_law_rel_error"] < 0.1, s


def test_process_pool_steps_cpu_bound_envs_with_their_state():
    with EnvPool(2, "process") as pool:
        for k in range(4):
            pool.submit(k, cpu_step, [k], 20_000)
        pool.submit("bad", broken_step)
        got = {}
        while pool.in_flight:
            got.update({d.key: d for d in pool.collect(timeout=None)})
        s = pool.stats()
    assert {k: got[k].value[0][0] for k in range(4)} == {k: k for k in range(4)}
    assert all(len(got[k].value[0]) == 2 for k in range(4))  # the state came back stepped
    assert isinstance(got["bad"].error, OSError) and got["bad"].value is None
    assert s["steps"] == 5 and s["service_mean"] > 0


def test_bad_pool_settings_name_the_field():
    with pytest.raises(ValueError, match="env_pool.kind='fiber'"):
        EnvPool(2, "fiber")
    with pytest.raises(ValueError, match="env_pool.workers=0"):
        EnvPool(0)


def test_pool_stats_by_hand():
    # two steps: [0, 1] queued 0, served 1 s; [0, 3] queued 1 s (one worker), served 2 s
    s = pool_stats([(0.0, 0.0, 1.0), (0.0, 1.0, 3.0)], workers=1, t0=0.0, t1=4.0)
    assert s["arrival_rate"] == 0.5 and s["latency_mean"] == 2.0 and s["service_mean"] == 1.5
    assert s["utilisation"] == 0.75 and s["queue_length_mean"] == 0.25
    assert s["in_flight_measured"] == 1.0 and s["in_flight_littles_law"] == 1.0
