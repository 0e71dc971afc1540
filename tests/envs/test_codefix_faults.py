"""Injected infrastructure faults come out as ``infra_fault`` (masked, never a zero reward)."""

import math
import os
import shutil

import pytest

from agentjax.envs import codefix, faults
from agentjax.envs.codefix.workspace import make_workspace
from agentjax.envs.protocol import Label
from agentjax.envs.sandbox import Limits

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)
TASKS = codefix.list_tasks()


def _tree(task, overlay):
    ws = make_workspace(task)
    for rel, text in overlay.items():
        with open(os.path.join(ws, rel), "w") as f:
            f.write(text)
    return ws


def _assert_infra(v, kind):
    assert v.label is Label.INFRA_FAULT, (kind, v.label, v.evidence.get("attribution"))
    assert v.trained_reward is None and math.isnan(v.reward)
    # the sandbox's evidence in the message: the cause of a rare misattribution under load
    assert v.evidence["attribution"].startswith(kind), (v.evidence["attribution"], v.evidence.get("sandbox"))
    assert v.evidence["injected"] == kind


@pytest.mark.parametrize("kind", ["sandbox_start", "host_kill", "verifier_crash"])
@pytest.mark.parametrize("task_name", TASKS)
def test_cheap_faults_on_every_task(task_name, kind):
    task = codefix.load_task(task_name)
    overlays = [task.reference, task.wrong] if task_name in TASKS[:3] else [task.reference]
    for overlay in overlays:  # a correct and a wrong tree alike
        ws = _tree(task, overlay)
        try:
            _assert_infra(codefix.verify(task, ws, inject=kind), kind)
        finally:
            shutil.rmtree(os.path.dirname(ws))


@pytest.mark.parametrize("task_name", TASKS[:3])
def test_flaky_test_is_quarantined_and_masked(task_name):
    task = codefix.load_task(task_name)
    flaky = codefix.api.with_flaky_case(task_name)
    assert flaky.quarantined == {"flaky_env"}  # found by running the reference N times
    ws = _tree(task, task.reference)
    try:
        _assert_infra(codefix.verify(task, ws, inject="flaky_test"), "flaky_test")
        ok = codefix.verify(flaky, ws, seed=2)  # an even seed: the flaky case passes
        assert ok.label is Label.PASS
    finally:
        shutil.rmtree(os.path.dirname(ws))
    ws = _tree(task, task.wrong)  # stable cases fail too: the agent's doing, not the flake
    try:
        assert codefix.verify(task, ws, inject="flaky_test").label is Label.FAIL
    finally:
        shutil.rmtree(os.path.dirname(ws))


@pytest.mark.slow
@pytest.mark.parametrize("task_name", TASKS[:2])
def test_host_starvation_is_infra(task_name):
    task = codefix.load_task(task_name)
    ws = _tree(task, task.reference)
    try:
        v = codefix.verify(task, ws, inject="host_starvation", limits=Limits(wall_s=3.0, cpu_s=2))
    finally:
        shutil.rmtree(os.path.dirname(ws))
    _assert_infra(v, "host_starvation")
    assert v.evidence["sandbox"]["psi_cpu_some_s"] > 0.25 * v.evidence["sandbox"]["wall_s"]


def test_unknown_fault_class_is_an_error():
    task = codefix.load_task(TASKS[0])
    with pytest.raises(ValueError, match="unknown fault class"):
        codefix.verify(task, task.repo_dir, inject="host_kil")


def test_retry_policy_on_real_verdicts():
    task = codefix.load_task(TASKS[0])
    ws = _tree(task, task.reference)
    try:
        state, decisions = faults.retry_init(), []
        for kind in ("host_kill", "sandbox_start", "host_kill", None):
            v = codefix.verify(task, ws, inject=kind)
            state, again = faults.retry_update(state, v)
            decisions.append((v.label, again))
    finally:
        shutil.rmtree(os.path.dirname(ws))
    assert decisions == [
        (Label.INFRA_FAULT, True),
        (Label.INFRA_FAULT, True),
        (Label.INFRA_FAULT, False),
        (Label.PASS, False),
    ]
