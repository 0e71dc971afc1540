"""No NaN is written where a metric is undefined (issue #31): it is left out of the metrics and the
summary says why; TensorBoard's writer never warns. Before, ``eval/audit/H`` and ``eval/hack/rate``
were NaN in every default run (no pass to condition H on, no planted opportunity taken), and
tensorboardX logged "NaN or Inf found in input tensor" at every evaluation."""

import logging
import math

from agentjax.diagnostics import tbevents
from agentjax.diagnostics.evaluate import undefined_metrics
from agentjax.envs.audit import audit_metrics, hack_rate
from agentjax.envs.protocol import Label, Verdict
from tests.diagnostics.test_tbevents import read_scalars


def _verdict(label):
    return Verdict(0.0, label, 1, 1, 0, 0, {}, "v", "fp")


def test_undefined_rates_are_left_out_with_their_reason():
    fails = [_verdict(Label.FAIL)] * 3
    m = {**audit_metrics(fails, fails), **hack_rate(fails, [False] * 3)}
    assert "audit/H" not in m and "hack/rate" not in m
    assert all(math.isfinite(v) for v in m.values())
    why = undefined_metrics({f"eval/{k}": v for k, v in m.items()}, "eval/")
    assert set(why) == {"eval/audit/H", "eval/hack/rate"} and all(why.values())
    passed = [_verdict(Label.PASS)]
    m = {**audit_metrics(passed, passed), **hack_rate(passed, [True])}
    assert m["audit/H"] == 0.0 and m["hack/rate"] == 0.0 and undefined_metrics(m) == {}


def test_the_tensorboard_writer_never_warns(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    tbevents.write_rows(tmp_path, [{"step": 1, "a": 0.5, "b": math.nan, "c": {"d": math.inf}}])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    got = read_scalars(tmp_path)[1]  # a value a row holds is still written as it is
    assert got["a"] == 0.5 and math.isnan(got["b"]) and got["c/d"] == math.inf
