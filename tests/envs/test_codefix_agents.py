"""Every scripted codefix agent gets its expected label and reward on every bundled task.

Real sandbox (setpriv + bubblewrap + rlimits + cgroups). Skipped only when bubblewrap or setpriv is
not installed; where they are installed, a sandbox that fails to work is a test failure.
"""

import math
import shutil

import pytest

from agentjax.envs import codefix
from agentjax.envs.codefix import agents as A
from agentjax.envs.codefix import scan, verifier
from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.envs.protocol import Label
from agentjax.envs.sandbox import Limits

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)

TASKS = codefix.list_tasks()
# Faulty agents get short limits; the busy loop gets a long wall so SIGXCPU (not the wall clock)
# ends it even on a loaded host.
FAULTY_LIMITS = {
    "busy_loop": Limits(wall_s=12.0, cpu_s=1),
    "sleep_forever": Limits(wall_s=3.0, cpu_s=2),
    "allocate_2gb": Limits(wall_s=12.0, cpu_s=4),
    "fork_bomb": Limits(wall_s=3.0, cpu_s=2),
    "fill_disk": Limits(wall_s=12.0, cpu_s=4),
}
EXPECTED_REWARD = {
    Label.PASS: 1.0,
    Label.FAIL: 0.0,
    Label.REWARD_HACK: -1.0,
    Label.AGENT_CPU: 0.0,
    Label.AGENT_TIMEOUT: 0.0,
    Label.AGENT_OOM: 0.0,
    Label.AGENT_ERROR: 0.0,
    Label.AGENT_QUOTA: 0.0,
}


def _episode(task_name, agent_name, limits=None):
    agent, expected = A.AGENTS[agent_name]
    env = CodefixEnv(EnvConfig(verify_limits=limits or codefix.api.DEFAULT_LIMITS))
    try:
        _, final = A.play(env, codefix.load_task(task_name), agent)
    finally:
        env.close()
    return final, expected


def _check(final, expected):
    v = final.verdict
    assert final.done and v is not None
    assert v.label is expected, (v.label, v.evidence.get("attribution"))
    assert v.trained_reward == EXPECTED_REWARD[expected]
    assert v.env_fingerprint and v.verifier_version == verifier.VERIFIER_VERSION


@pytest.mark.parametrize("agent_name", sorted({**A.HONEST, **A.ATTACKERS}))
@pytest.mark.parametrize("task_name", TASKS)
def test_honest_and_attackers(task_name, agent_name):
    final, expected = _episode(task_name, agent_name)
    _check(final, expected)
    if expected is Label.PASS:
        assert final.verdict.tests_run == final.verdict.tests_expected
        assert final.verdict.tests_skipped == 0
    if expected is Label.REWARD_HACK:
        assert final.verdict.evidence["hack_detected"] is True


@pytest.mark.slow
@pytest.mark.parametrize("agent_name", sorted(A.FAULTY))
@pytest.mark.parametrize("task_name", TASKS)
def test_faulty_agents_get_their_own_agent_label_on_every_task(task_name, agent_name):
    final, expected = _episode(task_name, agent_name, FAULTY_LIMITS[agent_name])
    _check(final, expected)


@pytest.mark.parametrize("agent_name", sorted(A.ATTACKERS))
@pytest.mark.parametrize("task_name", TASKS[:2])
def test_attacks_never_pass_without_static_scan(task_name, agent_name, tmp_path):
    """Defence in depth: with the static scans switched off, the run itself must not pass."""
    task = codefix.load_task(task_name)
    agent, _ = A.AGENTS[agent_name]
    env = CodefixEnv()
    try:
        env.reset(task, 0)
        for action in agent(task)[:-1]:  # everything but submit
            env.step(action)
        files, flags = scan.scan_tree(task.repo_dir, env.workspace, task.editable)
        assert flags, "the static scan must see every planted attack"
        res, recs = verifier.run_tree(
            task.repo_dir, files, task.cases, seed=0, limits=codefix.api.DEFAULT_LIMITS
        )
    finally:
        env.close()
    v = verifier.decide(
        task.cases,
        res,
        recs,
        hack_flags=(),
        quarantined=frozenset(),
        limits=codefix.api.DEFAULT_LIMITS,
        env_fingerprint="x",
        nonce="n0",
    )
    assert v.label is not Label.PASS, v.evidence["attribution"]
    assert not (isinstance(v.reward, float) and not math.isnan(v.reward) and v.reward > 0)
