"""Fault attribution, injection draws, correlated-failure retries and env fingerprints (pure)."""

import random
import signal

import pytest

from agentjax.envs import faults
from agentjax.envs.protocol import Label, Verdict
from agentjax.envs.sandbox import Limits
from tests.envs.sandbox_results import sandbox_result

LIM = Limits(wall_s=10.0, cpu_s=4)
r = sandbox_result  # a clean run with the given fields replaced
TIMEOUT = dict(returncode=-9, timed_out=True, killed_by_us=True, wall_s=10.0)


@pytest.mark.parametrize(
    "res, label, kind",
    [
        (r(), None, ""),
        (r(started=False, returncode=1), Label.INFRA_FAULT, "sandbox_start"),
        (r(returncode=-9), Label.INFRA_FAULT, "host_kill"),  # a SIGKILL we did not send
        # the OOM killer took a task of ours although our cgroup never reached its limit
        (
            r(returncode=137, host_oom_kills=1, cgroup={"mem_oom_kill": 1, "mem_failcnt": 0}),
            Label.INFRA_FAULT,
            "host_oom",
        ),
        (
            r(returncode=137, host_oom_kills=1, cgroup={"mem_oom_kill": 1, "mem_failcnt": 9}),
            Label.AGENT_OOM,
            "memory",
        ),
        # the cgroup OOM killer picked the outer process: still the agent's memory, not a host kill
        (r(returncode=-9, cgroup={"mem_oom_kill": 1, "mem_failcnt": 3}), Label.AGENT_OOM, "memory"),
        (r(returncode=137), None, ""),  # the agent SIGKILLed itself: just a failed run
        # ... even while some other cgroup on the host had an OOM kill (no evidence it was ours)
        (r(returncode=137, host_oom_kills=2), None, ""),
        (r(returncode=1, cgroup={"pids_max_events": 3}), Label.AGENT_ERROR, "fork bomb"),
        (r(returncode=152, cpu_s=4.0), Label.AGENT_CPU, "RLIMIT_CPU"),
        # a sleeper while a neighbour keeps the host busy: high PSI, but the tree never wanted a CPU
        (r(**TIMEOUT, cpu_s=0.2, starved_s=0.3, psi_cpu_some_s=9.0), Label.AGENT_TIMEOUT, "wall"),
        # starved: runnable for most of the run but off-CPU, the host under pressure, and a fresh
        # canary after the kill got almost no CPU
        (
            r(**TIMEOUT, cpu_s=0.3, starved_s=9.5, psi_cpu_some_s=9.0, host_canary_cpu_s=0.01),
            Label.INFRA_FAULT,
            "host_starvation",
        ),
        # the same in-run signs made by the agent's own swarm: the canary ran fine afterwards
        (
            r(**TIMEOUT, cpu_s=0.3, runq_wait_s=80.0, psi_cpu_some_s=9.0, host_canary_cpu_s=0.6),
            Label.AGENT_TIMEOUT,
            "wall",
        ),
        (r(**TIMEOUT, cpu_s=0.3, starved_s=9.5, psi_cpu_some_s=9.0), Label.AGENT_TIMEOUT, "wall"),
        # runnable and off-CPU, but the host shows no pressure: not the host's doing
        (
            r(**TIMEOUT, cpu_s=0.3, starved_s=9.5, psi_cpu_some_s=0.1, host_canary_cpu_s=0.01),
            Label.AGENT_TIMEOUT,
            "wall",
        ),
        # used its whole CPU budget: a starved host did not stop it from finishing
        (
            r(**TIMEOUT, cpu_s=4.0, starved_s=6.0, psi_cpu_some_s=9.0, host_canary_cpu_s=0.01),
            Label.AGENT_TIMEOUT,
            "wall",
        ),
    ],
)
def test_attribute_labels_each_sandbox_outcome_from_its_evidence(res, label, kind):
    got, why = faults.attribute(res, LIM)
    assert got is label
    assert why.startswith(kind) or kind in why


def test_memory_error_seen_is_agent_oom():
    assert faults.attribute(r(returncode=1), LIM, memory_error_seen=True)[0] is Label.AGENT_OOM


def test_sigxcpu_signal_decoding():
    assert r(returncode=152).signal == signal.SIGXCPU
    assert r(returncode=-9).signal == signal.SIGKILL
    assert r(returncode=1).signal is None


def test_draw_fault_rates():
    rng = random.Random(0)
    n = 20000
    draws = [faults.draw_fault({"host_kill": 0.1, "flaky_test": 0.3}, rng) for _ in range(n)]
    assert abs(draws.count("host_kill") / n - 0.1) < 0.01
    assert abs(draws.count("flaky_test") / n - 0.3) < 0.015
    assert abs(draws.count(None) / n - 0.6) < 0.015
    assert faults.draw_fault({}, rng) is None
    with pytest.raises(ValueError, match="unknown"):
        faults.draw_fault({"host_kil": 0.1}, rng)
    with pytest.raises(ValueError, match="sum"):
        faults.draw_fault({"host_kill": 0.7, "flaky_test": 0.7}, rng)


def _verdict(label, kind="host_kill", fp="env1"):
    return Verdict(
        reward=0.0,
        label=label,
        tests_expected=1,
        tests_run=1,
        tests_passed=0,
        tests_skipped=0,
        evidence={"attribution": f"{kind}: details {random.random()}"},
        verifier_version="v",
        env_fingerprint=fp,
    )


def test_retry_stops_on_correlated_root_cause():
    s = faults.retry_init()
    s, again = faults.retry_update(s, _verdict(Label.INFRA_FAULT))
    assert again  # first infra fault: retry
    s, again = faults.retry_update(s, _verdict(Label.INFRA_FAULT))
    assert not again  # same root cause twice: correlated, stop
    assert s.attempts == 2


def test_retry_independent_causes_until_budget():
    s, decisions = faults.retry_init(), []
    for kind in ("host_kill", "sandbox_start", "verifier_crash", "flaky_test"):
        s, again = faults.retry_update(s, _verdict(Label.INFRA_FAULT, kind), max_attempts=4)
        decisions.append(again)
    assert decisions == [True, True, True, False]  # the 4th attempt exhausts the budget


def test_no_retry_for_agent_labels():
    for label in (Label.PASS, Label.FAIL, Label.AGENT_TIMEOUT, Label.REWARD_HACK):
        assert faults.retry_update(faults.retry_init(), _verdict(label))[1] is False


def test_root_cause_depends_on_kind_and_env_not_details():
    a, b = _verdict(Label.INFRA_FAULT), _verdict(Label.INFRA_FAULT)
    assert faults.root_cause(a) == faults.root_cause(b)
    assert faults.root_cause(a) != faults.root_cause(_verdict(Label.INFRA_FAULT, fp="env2"))
    assert faults.root_cause(a) != faults.root_cause(_verdict(Label.INFRA_FAULT, "sandbox_start"))


def test_env_fingerprint_sensitivity():
    files, tools = [("a.py", b"x = 1\n")], [("python", "3.11.2")]
    fp = faults.env_fingerprint(files, tools)
    assert fp == faults.env_fingerprint(list(reversed(files)), tools)
    assert fp != faults.env_fingerprint([("a.py", b"x = 2\n")], tools)
    assert fp != faults.env_fingerprint(files, [("python", "3.11.3")])
    assert fp != faults.env_fingerprint(files, tools, {"verifier": "v2"})
    versions = dict(faults.tool_versions())
    assert set(versions) == {"python", "pytest", "bwrap", "git", "kernel"}


def test_injection_hooks_shapes():
    assert faults.injection_hooks(None) == {}
    assert "bwrap_extra" in faults.injection_hooks("sandbox_start")
    assert callable(faults.injection_hooks("host_kill")["on_start"])
    assert faults.injection_hooks("host_starvation")["launch_prefix"][0] == "nice"
    with pytest.raises(ValueError):
        faults.injection_hooks("meteor_strike")
