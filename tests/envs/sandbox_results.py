"""A sandbox run's result for the attribution and verifier tests: a clean exit unless overridden.

A plain function, not a fixture: the tests build results inside ``parametrize`` lists."""

import dataclasses

from agentjax.envs.sandbox import SandboxResult

CLEAN = SandboxResult(
    returncode=0,
    stdout="",
    stderr="",
    wall_s=1.0,
    started=True,
    timed_out=False,
    killed_by_us=False,
    cpu_s=0.5,
    runq_wait_s=0.0,
    starved_s=0.0,
    psi_cpu_some_s=0.0,
    cgroup={"mem_oom_kill": 0, "pids_max_events": 0, "mem_failcnt": 0},
    host_oom_kills=0,
    limits_held={},
    isolation="bwrap+setpriv",
)


def sandbox_result(**kw) -> SandboxResult:
    """:data:`CLEAN` with the fields ``kw`` replaced."""
    return dataclasses.replace(CLEAN, **kw)
