"""Run-config sections for the environment-noise and reward features (issue #16).

Each is a small frozen dataclass checked at parse time (a bad value names the field and the
allowed values); :mod:`agentjax.run.build` and :mod:`agentjax.run.learner` turn them into the
pieces the loop uses:

* ``faults``: per-class injection rates for the task's environment (minirepo: ``tool_error``,
  ``timeout``, ``truncated_output`` per step; ``verifier_crash`` per submit, an ``infra_fault``
  verdict) and the loop's own injector ``env_crash`` (per episode: the environment dies at the
  first step, an ``infra_fault``; :class:`agentjax.run.loopparts.NoisyEnv`), and the
  correlated-failure-aware retry policy the scheduler applies to infra faults
  (:func:`agentjax.envs.faults.retry_update`; ``retry_max_attempts=1``: never retried).
* ``curriculum``: a noise curriculum (:mod:`agentjax.envs.curriculum`) that moves the fault rates
  from ``start`` to ``cap`` with steps and the batch's success.
* ``rubric``: the environment's rubric score ``"evidence"`` only (beside the verdict, the default)
  or added to the reward used for advantages with ``weight`` (``"reward"``); infra faults stay
  masked either way.
* ``fingerprints``: ``"record"`` counts distinct environment fingerprints per step;
  ``"group"`` also masks a trajectory whose fingerprint differs from its GRPO group's first one
  (a group compared across environments would credit the environment, not the policy).

(The ``admission`` section is :class:`agentjax.sampling.staleness.StalenessConfig` itself.)
"""

from __future__ import annotations

import dataclasses

from agentjax.choice import Choice, coerce


def _err(field, value, allowed):
    return ValueError(f"{field}={value!r} is invalid; allowed values: {allowed}")


def _rates(field: str, rates: dict, known) -> None:
    for k, v in rates.items():
        if k not in known:
            raise _err(f"{field}.{k}", v, f"fault classes {list(known)}")
        number = isinstance(v, int | float) and not isinstance(v, bool)
        if not (number and 0.0 <= v <= 1.0):  # NaN fails too
            raise ValueError(f"{field}.{k}={v!r} is invalid; a rate in [0, 1]")


def _known_faults():
    from agentjax.envs.minirepo.env import FAULTS  # noqa: PLC0415 - host-only, cheap

    return (*FAULTS, "env_crash")


@dataclasses.dataclass(frozen=True)
class FaultsSection:
    rates: dict = dataclasses.field(default_factory=dict)  # fault class -> probability
    retry_max_attempts: int = 1  # attempts per task (1: an infra fault is masked, never retried)
    retry_max_same_cause: int = 2  # stop retrying a root cause seen this often (correlated)

    def __post_init__(self):
        object.__setattr__(self, "rates", dict(self.rates))
        _rates("faults.rates", self.rates, _known_faults())
        if self.retry_max_attempts < 1 or self.retry_max_same_cause < 1:
            raise ValueError(
                f"faults.retry_max_attempts={self.retry_max_attempts}, "
                f"faults.retry_max_same_cause={self.retry_max_same_cause}: each must be >= 1"
            )


@dataclasses.dataclass(frozen=True)
class CurriculumSection:
    enabled: bool = False
    start: dict = dataclasses.field(default_factory=dict)
    cap: dict = dataclasses.field(default_factory=dict)
    ramp_steps: int = 100
    warmup_steps: int = 0
    gate: float = 0.0  # the smoothed success needed to raise the noise
    floor: float = 0.0  # below this smoothed success the noise backs off
    backoff: float = 0.0
    decay: float = 0.9

    def __post_init__(self):
        object.__setattr__(self, "start", dict(self.start))
        object.__setattr__(self, "cap", dict(self.cap))
        _rates("curriculum.start", self.start, _known_faults())
        _rates("curriculum.cap", self.cap, _known_faults())
        if self.enabled and not self.cap:
            raise ValueError("curriculum.enabled=True needs curriculum.cap (the final fault rates)")
        if self.ramp_steps < 1:
            raise ValueError(f"curriculum.ramp_steps={self.ramp_steps} is invalid; must be >= 1")

    def check(self) -> None:
        """An enabled curriculum builds (its start/cap pairs are checked by the curriculum itself)."""
        if self.enabled:
            from agentjax.run.loopparts import make_curriculum  # noqa: PLC0415 - host-only, when enabled

            try:
                make_curriculum(self)
            except ValueError as e:
                raise ValueError(f"curriculum: {e}") from None


class RubricMode(Choice):
    EVIDENCE = "evidence"  # the rubric score is recorded beside the verdict
    REWARD = "reward"  # (1 - weight) verdict + weight rubric score is the reward


class FingerprintMode(Choice):
    RECORD = "record"  # count distinct environment fingerprints per step
    GROUP = "group"  # drop a group member whose fingerprint differs from the group's


@dataclasses.dataclass(frozen=True)
class RubricSection:
    mode: RubricMode = RubricMode.EVIDENCE
    weight: float = 0.0

    def __post_init__(self):
        coerce(self, mode=RubricMode)
        if self.mode == "reward" and not 0.0 < self.weight <= 1.0:
            raise ValueError(f"rubric.weight={self.weight} is invalid with rubric.mode='reward'; in (0, 1]")
        if self.mode == "evidence" and self.weight:
            raise ValueError(f"rubric.weight={self.weight} is only used with rubric.mode='reward'")


@dataclasses.dataclass(frozen=True)
class FingerprintSection:
    mode: FingerprintMode = FingerprintMode.RECORD

    def __post_init__(self):
        coerce(self, mode=FingerprintMode)


SECTIONS = {
    "faults": FaultsSection,
    "curriculum": CurriculumSection,
    "rubric": RubricSection,
    "fingerprints": FingerprintSection,
}
