"""Rubric rewards: weighted per-item checks with evidence, beside (never instead of) the verdict."""

import math

import pytest

from agentjax.envs import rubric
from agentjax.envs.minirepo import MinirepoEnv, checks, generate
from agentjax.envs.minirepo import agents as agents
from agentjax.envs.protocol import Label, Verdict


def const(score, **evidence):
    return lambda subject: (score, {"subject": subject, **evidence})


def boom(subject):
    raise RuntimeError("judge unreachable")


def verdict() -> Verdict:
    return Verdict(1.0, Label.PASS, 4, 4, 4, 0, {"patch": ["x"], "hack_detected": False}, "v1", "fp")


def test_weighted_combination_hand_computed():
    r = rubric.Rubric("r", "r/1", (
        rubric.Item("a", 1.0, "a/1", const(1.0)),
        rubric.Item("b", 3.0, "b/2", const(0.5, why="half")),
        rubric.Item("c", 0.0, "c/1", const(0.0)),
    ))  # fmt: skip
    res = rubric.evaluate(r, "S")
    assert res.score == pytest.approx((1 * 1.0 + 3 * 0.5) / 4)
    assert res.complete and [i.version for i in res.items] == ["a/1", "b/2", "c/1"]
    assert res.items[1].evidence == {"subject": "S", "why": "half"}
    assert res.as_dict()["items"]["b"] == {"score": 0.5, "weight": 3.0, "version": "b/2",
                                           "evidence": {"subject": "S", "why": "half"}}  # fmt: skip


def test_crashed_or_invalid_item_is_recorded_and_left_out():
    r = rubric.Rubric("r", "r/1", (
        rubric.Item("ok", 1.0, "1", const(0.25)),
        rubric.Item("crash", 5.0, "1", boom),
        rubric.Item("bad", 5.0, "1", const(1.5)),
    ))  # fmt: skip
    res = rubric.evaluate(r, None)
    assert res.score == 0.25 and not res.complete
    assert res.items[1].score is None and "judge unreachable" in res.items[1].evidence["error"]
    assert res.items[2].score is None and "outside [0, 1]" in res.items[2].evidence["error"]
    only_crash = rubric.Rubric("r", "1", (rubric.Item("crash", 1.0, "1", boom),))
    assert math.isnan(rubric.evaluate(only_crash, None).score)


def test_rubric_rejects_duplicate_items_and_all_zero_weights():
    with pytest.raises(ValueError, match="unique"):
        rubric.Rubric("r", "1", (rubric.Item("a", 1, "1", boom), rubric.Item("a", 1, "1", boom)))
    with pytest.raises(ValueError, match="all be zero"):
        rubric.Rubric("r", "1", (rubric.Item("a", 0.0, "1", boom),))
    with pytest.raises(ValueError, match=">= 0"):
        rubric.Rubric("r", "1", (rubric.Item("a", -1.0, "1", boom),))


def test_attach_keeps_the_verdict_and_its_evidence():
    v = verdict()
    res = rubric.evaluate(rubric.Rubric("r", "r/1", (rubric.Item("a", 1, "1", const(0.0)),)), 1)
    w = rubric.attach(v, res)
    assert (w.reward, w.label, w.tests_passed) == (v.reward, v.label, v.tests_passed)
    assert {k: w.evidence[k] for k in v.evidence} == v.evidence
    assert w.evidence["rubric"]["score"] == 0.0 and "rubric" not in v.evidence
    with pytest.raises(ValueError, match="already"):
        rubric.attach(w, res)


def test_generative_judge_hook():
    seen = []

    def judge(request: rubric.JudgeRequest):
        seen.append(request)
        return (1.0 if "fix" in request.evidence["patch"] else 0.0), {"model": "fake-judge"}

    item = rubric.judge_item("explains_fix", 2.0, "Does the patch fix the bug?", judge,
                             collect=lambda s: {"patch": s}, judge_version="judge/0")  # fmt: skip
    res = rubric.evaluate(rubric.Rubric("r", "r/1", (item,)), "a fix")
    assert res.score == 1.0 and res.items[0].version == "judge/0"
    assert res.items[0].evidence == {"question": "Does the patch fix the bug?",
                                     "judge": {"model": "fake-judge"},
                                     "input": {"patch": "a fix"}}  # fmt: skip
    assert seen == [rubric.JudgeRequest("explains_fix", "Does the patch fix the bug?",
                                        {"patch": "a fix"})]  # fmt: skip


def test_minirepo_rubric_hand_computed():
    """Weights 1, 1, 1, 2, 1. The oracle scores 1; the demonstrator never re-runs the tests after
    editing: (1 + 1 + 1 + 2 + 0) / 6; an immediate submit: tests untouched only, 2 / 6."""
    env = MinirepoEnv()
    task = generate(0, "train")

    def score(agent):
        agents.run_episode(env, task, agent, 0)
        return env.step("run").evidence["rubric"]  # the end, repeated with its evidence

    oracle, demo, noop = (score(a) for a in (agents.OracleAgent(), agents.DemonstratorAgent(),
                                             agents.NoOpAgent()))  # fmt: skip
    assert oracle["score"] == 1.0 and oracle["version"] == checks.VERSION and oracle["complete"]
    assert demo["score"] == pytest.approx(5 / 6)
    assert demo["items"]["verified_before_submit"]["score"] == 0.0
    assert noop["score"] == pytest.approx(2 / 6)
    assert noop["items"]["minimal_patch"]["evidence"] == {"patch": []}
