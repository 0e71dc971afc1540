"""Scripted minirepo agents: the oracle solves everything, the demonstrator is really imperfect."""

import pytest

from agentjax.envs.minirepo import EASY, HARD, EnvConfig, MinirepoEnv, generate, in_vocabulary
from agentjax.envs.minirepo import agents as agents
from agentjax.envs.protocol import Label

N_HELDOUT = 1000  # issue 8: the demonstrator's rate is measured on >= 1000 held-out tasks


@pytest.fixture(scope="module")
def heldout():
    return [generate(s, "heldout") for s in range(N_HELDOUT)]


def test_oracle_solves_every_task(heldout):
    env = MinirepoEnv(EnvConfig(max_steps=40))
    assert agents.success_rate(agents.OracleAgent, heldout[:300], env) == 1.0
    for d in (EASY, HARD):
        some = [generate(s, "heldout", d) for s in range(100)]
        assert agents.success_rate(agents.OracleAgent, some, env) == 1.0


def test_imperfect_demonstrator_rate_on_heldout(heldout):
    rate = agents.success_rate(agents.DemonstratorAgent, heldout)
    assert 0.45 <= rate <= 0.70, rate  # measured 0.62 (docs/minirepo.md)


def test_imitating_the_demonstrator_cannot_solve_the_task(heldout):
    """Its greedy rule (always the first failing test's function) fails whenever the bug hides
    behind a caller; the same four steps aimed at the last failing function solve everything,
    so the observation holds what is needed and RL has room to beat the demonstrator."""
    greedy = agents.success_rate(lambda: agents.DemonstratorAgent(explore=0.0), heldout)
    careful = agents.success_rate(agents.LocalizingAgent, heldout)
    easy_share = sum(t.task_class == "easy" for t in heldout) / len(heldout)
    assert greedy == easy_share and greedy < 0.65
    assert careful == 1.0


def test_random_and_noop_agents_rarely_or_never_solve(heldout):
    rand = agents.success_rate(agents.RandomAgent, heldout[:500])
    assert 0.0 < rand < 0.06  # measured 0.014 over 1000
    assert agents.success_rate(agents.NoOpAgent, heldout[:100]) == 0.0


def test_scripted_agents_recover_from_injected_tool_faults(heldout):
    env = MinirepoEnv(EnvConfig(max_steps=40))
    rates = {"tool_error": 0.15, "timeout": 0.05, "truncated_output": 0.1}
    some = heldout[:150]
    assert agents.success_rate(agents.OracleAgent, some, env, rates) == 1.0
    assert agents.success_rate(agents.LocalizingAgent, some, env, rates) == 1.0


def test_demonstrations_are_text_pairs_for_the_warm_start():
    demos = agents.demonstrations(50, seed=100)
    assert len(demos) == 50 and all(d.task_id.startswith("minirepo/default/train/") for d in demos)
    first = demos[0]
    assert first.pairs[0][0].startswith("repo ") and first.pairs[0][1] == "run"
    assert [a.split()[0] for _, a in first.pairs] == ["run", "view", "edit", "submit"]
    assert all(in_vocabulary(o) and in_vocabulary(a) for d in demos for o, a in d.pairs)
    assert demos == agents.demonstrations(50, seed=100)  # deterministic
    assert 0 < sum(d.success for d in demos) < 50  # unfiltered: failures included
    assert {d.verdict.label for d in demos} <= {Label.PASS, Label.FAIL}
