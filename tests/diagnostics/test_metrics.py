"""Scheduling metrics: hand-computed values from PROBLEMS.md sections 1-3."""

import types

import numpy as np
import pytest

from agentjax.diagnostics import metrics as m


def test_slot_utilisation_of_a_synchronous_batch():
    assert m.batch_slot_utilisation([10, 20, 100]) == pytest.approx(130 / 300)
    assert round(100 * m.batch_slot_utilisation([10, 20, 100]), 1) == 43.3
    u = m.slot_utilisation([10, 20, 100], num_slots=3, elapsed=100)
    assert u == pytest.approx(0.4333, 1e-3)
    assert m.batch_slot_utilisation([5, 5]) == 1.0


def test_littles_law_and_measured_pool():
    assert m.littles_law(4.0, 90.0) == 360.0
    starts = np.arange(0.0, 2000.0, 0.25)  # 4 arrivals per second, 90 s each
    iv = np.stack([starts, starts + 90.0], axis=1)
    rep = m.env_pool_report(iv, 500.0, 1500.0)
    assert rep["arrival_rate"] == pytest.approx(4.0)
    assert rep["mean_residence"] == pytest.approx(90.0)
    assert rep["predicted_in_flight"] == pytest.approx(360.0)
    assert rep["measured_in_flight"] == pytest.approx(360.0, abs=0.5)
    assert m.time_average_in_flight([(0, 10), (5, 15)], 0, 20) == pytest.approx(1.0)


def test_capacity_times_serial_vs_overlap():
    assert m.capacity_times(80, 40, 5) == (125, 85)


def test_ess_of_equal_weights_is_n_and_of_one_weight_is_one():
    assert m.ess([1, 1, 1, 1]) == pytest.approx(4.0)
    assert m.ess([1, 0, 0, 0]) == pytest.approx(1.0)
    assert m.ess([2, 1]) == pytest.approx(9 / 5)
    assert m.ess([0, 0]) == 0.0


def test_duration_percentiles_interpolate_linearly():
    p = m.duration_percentiles(np.arange(1, 101))
    assert p == pytest.approx({"p50": 50.5, "p95": 95.05, "p99": 99.01})


def test_class_shares_and_fast_first_bias():
    s = m.class_shares(["a", "a", "b", "b"], ["a", "a", "b"])
    assert s["a"]["deviation_pp"] == pytest.approx(100 * (2 / 3 - 1 / 2))
    assert s["b"]["deviation_pp"] == pytest.approx(100 * (1 / 3 - 1 / 2))
    assert m.max_share_deviation_pp(s) == pytest.approx(16.667, abs=1e-3)
    assert m.class_shares(["a"], [])["a"]["admitted"] == 0.0


def test_rates_drop_histogram_masks():
    r = m.terminal_rates(["trained"] * 6 + ["cancelled"] * 2 + ["rejected_stale", "failed"])
    assert (r["submitted"], r["cancellation_rate"], r["rejection_rate"]) == (10, 0.2, 0.1)
    assert m.long_task_drop_rate([True, True, True, False], [True, False, False, False]) == (
        pytest.approx(2 / 3)
    )
    assert m.long_task_drop_rate([False], [False]) == 0.0
    np.testing.assert_array_equal(m.version_gap_histogram([0, 1, 1, 5, 9], 4), [1, 2, 0, 2])
    f = m.masked_fractions([None, "infra_fault", "icepop", "icepop"])
    assert f == {"icepop": 0.5, "infra_fault": 0.25, "total": 0.75}


def test_delta_statistics_ignore_masked_tokens():
    d = m.delta_statistics(np.array([0.1, -0.3, 5.0]), mask=np.array([1, 1, 0]))
    assert d["mean_abs"] == pytest.approx(0.2) and d["max_abs"] == pytest.approx(0.3)
    assert d["mean"] == pytest.approx(-0.1)


def test_cost_ledger_sums_each_item_and_counts_retries_as_waste():
    term = lambda v: types.SimpleNamespace(value=v)
    rec = lambda t, g, e, rc=0.0: types.SimpleNamespace(
        terminal=term(t), generation_time=g, env_time=e, recompute_time=rc
    )
    records = [rec("trained", 10, 4, 1), rec("trained", 6, 2), rec("cancelled", 30, 20)]
    led = m.cost_ledger(records, num_steps=2, step_device_seconds=5.0)
    assert led.device_seconds == {
        "generation": 17,
        "environment": 0,
        "verification": 0,
        "training": 10,
        "retry_waste": 30,
    }
    assert led.cpu_seconds["environment"] == 6 and led.cpu_seconds["retry_waste"] == 20
    assert led.per_task(2) == {"device_seconds": 28.5, "cpu_seconds": 13.0}
    led.add("verification", cpu=2.0)
    assert led.cpu_seconds["verification"] == 2.0
    with pytest.raises(ValueError, match="item must be one of"):
        led.add("network", cpu=1.0)
