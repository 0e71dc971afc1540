"""The noise curriculum: hand-computed schedules, gating, back-off, purity, and driving minirepo."""

import math

import pytest

from agentjax.envs.curriculum import CurriculumState, noise_curriculum, rates
from agentjax.envs.minirepo import EnvConfig, MinirepoEnv, generate
from agentjax.envs.minirepo import agents as agents

START = {"tool_error": 0.0, "timeout": 0.01}
CAP = {"tool_error": 0.2, "timeout": 0.05}


def run(curriculum, successes):
    state, out = curriculum.init(), []
    for s in successes:
        state = curriculum.update(state, s)
        out.append(state)
    return out


def test_pure_step_schedule_hand_computed():
    c = noise_curriculum(START, CAP, ramp_steps=4)
    assert rates(c.init()) == START
    states = run(c, [None] * 6)
    assert [s.level for s in states] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert rates(states[0]) == pytest.approx({"tool_error": 0.05, "timeout": 0.02})
    assert rates(states[3]) == pytest.approx(CAP) and rates(states[5]) == pytest.approx(CAP)
    assert [s.step for s in states] == [1, 2, 3, 4, 5, 6]


def test_warmup_holds_the_start_rates():
    states = run(noise_curriculum(START, CAP, ramp_steps=2, warmup_steps=3), [None] * 5)
    assert [s.level for s in states] == [0.0, 0.0, 0.0, 0.5, 1.0]


def test_performance_gate_ema_and_backoff_hand_computed():
    c = noise_curriculum(START, CAP, ramp_steps=10, gate=0.6, floor=0.3, backoff=0.1, decay=0.5)
    states = run(c, [1.0, 1.0, 0.0, 0.0, float("nan"), 1.0])
    # ema: 0.5, 0.75, 0.375, 0.1875, 0.1875 (nan: no observation), 0.59375
    assert [s.ema_success for s in states] == pytest.approx([0.5, 0.75, 0.375, 0.1875, 0.1875,
                                                            0.59375])  # fmt: skip
    # level: hold (0.5 < gate), rise, hold (between floor and gate), back off, back off, hold
    assert [s.level for s in states] == pytest.approx([0.0, 0.1, 0.1, 0.0, 0.0, 0.0])
    never = run(noise_curriculum(START, CAP, ramp_steps=2, gate=0.5), [0.0] * 20)
    assert rates(never[-1]) == START


def test_update_is_pure_and_deterministic():
    c = noise_curriculum(START, CAP, ramp_steps=3, gate=0.2)
    s0 = c.init()
    s1 = c.update(s0, 0.9)
    assert s0 == CurriculumState(0, 0.0, 0.0, START) and s1 != s0
    assert c.update(s0, 0.9) == s1
    r = rates(s1)
    r["tool_error"] = 1.0  # the accessor hands out a copy
    assert rates(s1)["tool_error"] != 1.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"start": {"a": 0.3}, "cap": {"a": 0.2}}, "start <= cap"),
        ({"start": {"a": 0.0}, "cap": {"b": 0.2}}, "different classes"),
        ({"ramp_steps": 0}, "ramp_steps"),
        ({"gate": 0.2, "floor": 0.5}, "floor"),
    ],
)
def test_invalid_configs_fail_loudly(kwargs, match):
    args = {"start": START, "cap": CAP, "ramp_steps": 5, **kwargs}
    with pytest.raises(ValueError, match=match):
        noise_curriculum(**args)
    with pytest.raises(ValueError, match="success"):
        noise_curriculum(START, CAP, ramp_steps=5).update(noise_curriculum(START, CAP, 5).init(), 2.0)


def test_curriculum_drives_minirepo_faults_and_tasks_stay_solvable():
    """Clean and noisy performance, both measured: rising recoverable faults cost steps and
    latency but the careful agent still solves every task."""
    c = noise_curriculum(
        {"tool_error": 0.0, "timeout": 0.0, "truncated_output": 0.0},
        {"tool_error": 0.3, "timeout": 0.05, "truncated_output": 0.15},
        ramp_steps=5,
    )
    env = MinirepoEnv(EnvConfig(max_steps=40))
    state, fault_share, steps, solved = c.init(), [], [], []
    tasks = [generate(s, "train") for s in range(60)]
    for i in range(6):
        eps = [agents.run_episode(env, t, agents.LocalizingAgent(), 10 * i + j, rates(state))
               for j, t in enumerate(tasks[10 * i : 10 * i + 10])]  # fmt: skip
        faults = [o.startswith(("error retry", "error timeout")) or o.endswith("truncated")
                  for e in eps for o, _ in e.pairs[1:]]  # fmt: skip
        fault_share.append(sum(faults) / len(faults))
        steps.append(sum(len(e.pairs) for e in eps) / len(eps))
        solved.append(sum(e.success for e in eps) / len(eps))
        state = c.update(state, solved[-1])
    assert fault_share[0] == 0.0 and steps[0] == 4.0  # clean: run, view, edit, submit
    assert fault_share[-1] > 0.2 and steps[-1] > 4.5  # noisy at the caps: retries
    assert solved == [1.0] * 6
    assert math.isclose(rates(state)["tool_error"], 0.3)
