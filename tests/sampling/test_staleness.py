"""Staleness manager: counters, conservation, capacity (AReaL), admission, PACE split."""

import jax
import numpy as np
import pytest

from agentjax.sampling import staleness as stl
from agentjax.sampling.staleness import Admission, Event, Kind, SampleInfo


def _apply(state, *kinds, **kw):
    for k in kinds:
        state = stl.update(state, Event(k, **kw))
    return state


def test_counters_and_conservation():
    cfg = stl.StalenessConfig()
    s = _apply(stl.init(cfg), *[Kind.SUBMIT] * 7)
    s = _apply(s, *[Kind.COMPLETE] * 5)
    s = _apply(s, Kind.TRAIN, Kind.REJECT, Kind.MASK, Kind.FAIL, Kind.FILTER)
    s = stl.update(s, Event(Kind.CANCEL))  # in flight
    s = stl.update(s, Event(Kind.CANCEL, from_queue=True))
    assert (s.submitted, s.in_flight, s.queued) == (7, 0, 0)
    assert stl.terminal_counts(s) == {
        "trained": 1,
        "masked": 1,
        "rejected_stale": 1,
        "cancelled": 2,
        "failed": 1,
        "filtered": 1,
    }
    assert stl.is_conserved(s)
    assert not stl.is_conserved(s._replace(trained=2))  # a task counted twice is caught


def test_capacity_couples_concurrency_and_off_policy_bound():
    cfg = stl.StalenessConfig(max_version_gap=2, max_in_flight=5)
    s = stl.init(cfg)
    assert stl.capacity(s, cfg, 4) == 5  # min((2 + 0 + 1) * 4 = 12, 5)
    s = _apply(s, *[Kind.SUBMIT] * 3)
    assert stl.capacity(s, cfg, 4) == 2
    loose = stl.StalenessConfig(max_version_gap=2)
    s = _apply(stl.init(loose), *[Kind.SUBMIT] * 12)
    assert stl.capacity(s, loose, 4) == 0  # (2 + 0 + 1) * 4 - 12
    s = _apply(s, *[Kind.COMPLETE] * 4, *[Kind.TRAIN] * 4, Kind.VERSION)
    assert stl.capacity(s, loose, 4) == 4  # (2 + 1 + 1) * 4 - (4 trained + 8 in flight)
    s = _apply(s, Kind.CANCEL)
    assert stl.capacity(s, loose, 4) == 5  # a dropped sample frees its place


def test_backpressure_reserves_queue_room_for_in_flight_work():
    cfg = stl.StalenessConfig(max_version_gap=100, queue_capacity=6)
    s = _apply(stl.init(cfg), *[Kind.SUBMIT] * 6, *[Kind.COMPLETE] * 4)
    assert (s.queued, s.in_flight) == (4, 2)
    assert stl.capacity(s, cfg, 2) == 0
    assert stl.queue_pressure(s, cfg) == pytest.approx(1.0)
    s = _apply(s, Kind.TRAIN)
    assert stl.capacity(s, cfg, 2) == 1


def test_admission_applies_the_class_gap_and_drift_and_pressure_rules():
    cfg = stl.StalenessConfig(
        max_version_gap=4,
        class_max_gap={"long": 6},
        downweight_from_gap=1,
        downweight_decay=0.5,
        max_drift=0.5,
        objective_drift=0.1,
        pressure_threshold=0.9,
        pressure_tighten=2,
    )
    assert stl.admit(SampleInfo(5, "short"), cfg).admission == Admission.REJECT
    assert stl.admit(SampleInfo(5, "long"), cfg).admission == Admission.DOWNWEIGHT
    d = stl.admit(SampleInfo(3, "short"), cfg)
    assert d.admission == Admission.DOWNWEIGHT and d.weight == pytest.approx(0.25)
    assert stl.admit(SampleInfo(1, "short"), cfg) == (Admission.ACCEPT, 1.0, "")
    # under queue pressure the bound tightens by 2: gap 3 > 4 - 2
    assert stl.admit(SampleInfo(3, "short", queue_pressure=0.95), cfg).admission == "reject"
    d = stl.admit(SampleInfo(0, "short", drift=0.7), cfg)
    assert d.admission == Admission.REJECT and "drift" in d.reason
    assert stl.admit(SampleInfo(0, "short", drift=0.2), cfg).admission == Admission.TO_OBJECTIVE
    assert stl.admit(SampleInfo(0, "short", drift=0.05), cfg).admission == Admission.ACCEPT


def test_generation_and_queue_staleness_are_histogrammed_apart():
    cfg = stl.StalenessConfig(max_version_gap=3)
    s = _apply(stl.init(cfg), *[Kind.SUBMIT] * 3, *[Kind.COMPLETE] * 3)
    s = stl.update(s, Event(Kind.TRAIN, gen_gap=2, queue_gap=0))
    s = stl.update(s, Event(Kind.TRAIN, gen_gap=0, queue_gap=1))
    s = stl.update(s, Event(Kind.TRAIN, gen_gap=3, queue_gap=4))  # 7: overflow bin
    np.testing.assert_array_equal(s.gen_gap_hist, [1, 0, 1, 1, 0])
    np.testing.assert_array_equal(s.queue_gap_hist, [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(s.gap_hist, [0, 1, 1, 0, 1])
    assert s.max_gap == 7


def test_state_is_a_pytree_and_update_is_pure():
    cfg = stl.StalenessConfig()
    s0 = stl.init(cfg)
    s1 = stl.update(s0, Event(Kind.SUBMIT))
    assert s0.submitted == 0 and s1.submitted == 1
    leaves, tree = jax.tree.flatten(s1)
    assert len(leaves) == len(stl.StalenessState._fields)
    back = jax.tree.unflatten(tree, [np.array(x).copy() for x in leaves])  # e.g. a checkpoint
    assert isinstance(back, stl.StalenessState)
    for a, b in zip(back, s1, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_in_flight", 0),
        ("max_version_gap", -1),
        ("downweight_decay", 0.0),
        ("queue_capacity", -1),
        ("downweight_from_gap", -2),
        ("pressure_tighten", -1),
    ],
)
def test_invalid_staleness_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}={value}"):
        stl.StalenessConfig(**{field: value})


def test_derived_queue_capacity_must_be_resolved_before_use():
    cfg = stl.StalenessConfig(queue_capacity=0)
    with pytest.raises(ValueError, match="resolved"):
        stl.capacity(stl.init(cfg), cfg, 4)
    assert cfg.resolved(batch_size=4, num_slots=8).queue_capacity == 16
