"""The scheduler's retry policy for infrastructure faults, from :func:`agentjax.envs.faults.retry_update`.

An ``infra_fault`` trajectory is masked (never a zero reward). With a retry policy the scheduler
also submits the same task again, with a fresh episode seed (the same seed would replay the same
fault), until ``max_attempts`` attempts or until one root cause (label, fault kind, environment
fingerprint) has failed ``max_same_cause`` times: failures sharing a cause are correlated, and
retrying them only wastes compute and hides a broken environment (PROBLEMS.md s8).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from agentjax.envs import faults
from agentjax.envs.protocol import Label
from agentjax.trajectory import Trajectory

SEED_STRIDE = 2_147_483_647  # a retried episode's seed: (seed + attempts * stride) mod 2^32


class _Verdict(NamedTuple):  # what faults.root_cause reads from a verdict
    label: Label
    evidence: dict
    env_fingerprint: str


def make_retry(max_attempts: int, max_same_cause: int):
    """``retry(state, task, trajectory) -> (state, task_or_None)`` for the scheduler."""

    def retry(state: Any, task: Any, traj: Trajectory):
        state = faults.retry_init() if state is None else state
        v = _Verdict(Label(traj.label or "infra_fault"), dict(traj.reward_evidence), traj.env_fingerprint)
        state, again = faults.retry_update(state, v, max_attempts=max_attempts, max_same_cause=max_same_cause)
        if not again:
            return state, None
        return state, dataclasses.replace(task, seed=(int(task.seed) + state.attempts * SEED_STRIDE) % 2**32)

    return retry
