"""Pieces of the training loop built from the run config's feature sections (issue #16).

Pure functions of the config and the batch; :mod:`agentjax.run.build` and
:mod:`agentjax.run.learner` call them. See :mod:`agentjax.run.sections` for what each section
means.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from agentjax.envs import curriculum as cur
from agentjax.envs.protocol import InfraError
from agentjax.sampling.retry import make_retry
from agentjax.trajectory import Trajectory

ENV_CRASH = "env_crash"  # per-episode infra fault injected around any environment (loop level)


class InjectedEnvCrash(InfraError):
    """The injected infrastructure failure: the environment process 'dies' at the first step."""


class NoisyEnv:
    """Wraps a task's environment with the configured fault injection at ``rates`` (the rates in
    force when the episode's environment was made; a noise curriculum publishes new ones for
    later episodes): the environment's own classes go to its ``reset(..., fault_rates=...)``;
    ``env_crash`` is drawn here from a stream seeded by the episode seed and task (runs
    replay), and a crashing episode raises at its first step, which
    the rollout records as ``infra_fault``: masked by the scheduler, never a zero reward."""

    def __init__(self, env, rates: dict):
        self.env, self.rates, self.crash = env, rates, False

    def reset(self, task, seed, *args, **kw):
        rate = float(self.rates.get(ENV_CRASH, 0.0))
        self.crash = random.Random(f"{ENV_CRASH}:{seed}:{task.task_id}").random() < rate
        own = env_rates(self.rates)
        return self.env.reset(task, seed, *args, **({**kw, "fault_rates": own} if own else kw))

    def step(self, action):
        if self.crash:
            raise InjectedEnvCrash(f"injected {ENV_CRASH}", {"injected": ENV_CRASH})
        return self.env.step(action)

    def __getattr__(self, name):
        return getattr(self.env, name)


def env_rates(rates: dict) -> dict:
    """The rates the task's own environment injects (everything but the loop's ``env_crash``)."""
    return {k: v for k, v in rates.items() if k != ENV_CRASH}


def retry_policy(run):
    """The scheduler's retry callable, or None (``faults.retry_max_attempts == 1``)."""
    f = run.faults
    return None if f.retry_max_attempts <= 1 else make_retry(f.retry_max_attempts, f.retry_max_same_cause)


def make_curriculum(c):
    """The noise curriculum of a ``curriculum`` section, or None when it is off."""
    if not c.enabled:
        return None
    return cur.noise_curriculum(
        c.start,
        c.cap,
        ramp_steps=c.ramp_steps,
        warmup_steps=c.warmup_steps,
        gate=c.gate,
        floor=c.floor,
        backoff=c.backoff,
        decay=c.decay,
    )


def initial_rates(run) -> dict[str, float]:
    """The fault rates of the first episodes: the curriculum's start, else ``faults.rates``."""
    return dict(run.curriculum.start) if run.curriculum.enabled else dict(run.faults.rates)


def rubric_score(t: Trajectory) -> float:
    s = (t.reward_evidence or {}).get("rubric", {}).get("score", math.nan)
    return float(s) if s == s else 0.0


def batch_rewards(run, trajs: Sequence[Trajectory]) -> list[float]:
    """The reward each trajectory's advantage is computed from: the verdict's reward, plus
    ``rubric.weight x`` the rubric score with ``rubric.mode='reward'``."""
    if run.rubric.mode != "reward":
        return [float(t.final_reward) for t in trajs]
    w = run.rubric.weight
    return [(1.0 - w) * float(t.final_reward) + w * rubric_score(t) for t in trajs]


def fingerprint_weights(run, trajs: Sequence[Trajectory], weights: Sequence[float]) -> tuple[list, dict]:
    """With ``fingerprints.mode='group'`` a trajectory whose environment fingerprint differs
    from its group's first one gets weight 0 (dropped); metrics count the fingerprints. An empty
    fingerprint (a record that carries none) is no evidence of another environment: it is
    neither a group's reference nor dropped."""
    first: dict[str, str] = {}
    out, dropped = [], 0
    for t, w in zip(trajs, weights, strict=True):
        fp = first.setdefault(t.task_id, t.env_fingerprint) if t.env_fingerprint else ""
        if run.fingerprints.mode == "group" and fp and t.env_fingerprint != fp:
            w, dropped = 0.0, dropped + 1
        out.append(w)
    return out, {
        "fingerprints/distinct": float(len({t.env_fingerprint for t in trajs})),
        "fingerprints/dropped": float(dropped),
    }


def success(trajs: Sequence[Trajectory]) -> float | None:
    xs = [t.label == "pass" for t in trajs]
    return float(np.mean(xs)) if xs else None
