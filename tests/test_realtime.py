"""``scheduler.clock='real'``: the training loop on the wall clock (agentjax/sampling/realtime.py).

Trained at smoke size through ``system.train``: the async mode keeps sampling while the learner
trains (the sampler and learner threads are busy at the same time), the sync mode never does (its
barrier), the version-gap bound holds on real events, and a real-time run refuses ``--resume``.
"""

import json
import os

import pytest

from agentjax import system
from agentjax.learner.journal import Journal
from agentjax.policy.config import ConfigError
from tests.runs import tiny_config

pytestmark = pytest.mark.slow


def _train(workdir, **overrides):
    cfg = tiny_config("default", steps=3, scheduler__clock="real", **overrides)
    summary = system.train(cfg, str(workdir), log=lambda s: None)
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl")) if x.strip()]
    return summary, [r for r in rows if "loss/total" in r]


def test_async_real_time_overlaps_sampling_with_learning_within_the_gap_bound(tmp_path):
    summary, rows = _train(tmp_path, scheduler__mode="async", admission__max_version_gap=1)
    rt = summary["realtime"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rt["clock"] == "real" and rt["sampler_busy_s"] > 0 and rt["learner_busy_s"] > 0
    assert rt["overlap_s"] > 0, rt  # the engine generated while the learner trained
    assert max(r["version_gap_max"] for r in rows) <= 1  # the bound acts on real events
    trajs = Journal(os.path.join(tmp_path, "journal.bin")).read()
    assert len(trajs) >= 3 * 16 and all(t.num_action_tokens > 0 for t in trajs)
    # wall-clock seconds, not the virtual clock's: the step rows carry the real elapsed time
    assert 0 < rows[-1]["virtual_time"] <= rt["wall_s"] + 1e-6


def test_sync_real_time_never_overlaps_and_refuses_resume(tmp_path):
    summary, rows = _train(tmp_path, scheduler__mode="sync")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert summary["realtime"]["overlap_s"] == 0.0  # the barrier: sample, then learn
    assert all(r["version_gap_max"] == 0 for r in rows)
    cfg = tiny_config("default", steps=3, scheduler__clock="real", scheduler__mode="sync")
    with pytest.raises(ConfigError, match="--resume needs scheduler.clock='virtual'"):
        system.train(cfg, str(tmp_path), resume=True, log=lambda s: None)


def test_unknown_clock_is_named():
    from agentjax import runconfig

    with pytest.raises(
        ConfigError, match=r"scheduler.clock='wall' is invalid; allowed values: \['virtual', 'real'\]"
    ):
        runconfig.parse(tiny_config("default", scheduler__clock="wall"))
