"""The run config's own sections: ``task``, ``warm_start``, ``rl``, ``placement``, ``context``,
``codefix`` (each with its checks), and those of the environment-noise and reward features
(issue #16). The components' own configs (``scheduler``, ``admission``, ``loss``, ``optim``,
``caps``, ``sampler``, ``model``) live with their components; :mod:`agentjax.run.config` parses
them all.

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
from typing import Any

from agentjax import importpath
from agentjax import tasks as task_registry
from agentjax.choice import Choice, coerce
from agentjax.policy.config import ConfigError
from agentjax.run import checks
from agentjax.sampling.context import ContextKind
from agentjax.sharding.mesh import MESH_AXES
from agentjax.sharding.placement import PlacementKind


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


def _choice(field: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{field}={value!r} is invalid; allowed values: {list(allowed)}")


def _positive(field: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field}={value!r} is invalid; must be an integer >= 1")


class TaskName(Choice):  # the built-ins; task.name may also be an import path 'package.module:factory'
    MINIREPO = "minirepo"
    CODEFIX = "codefix"  # trains with model.hf_path (a BPE tokenizer); evaluates scripted agents
    DATASET = "dataset"  # JSONL prompts + a verifier named by import path (agentjax.tasks.dataset)


class Latency(Choice):
    FIXED = "fixed"
    LONG_TAILED = "long_tailed"


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    name: str = TaskName.MINIREPO  # a TaskName, or a user's 'package.module:factory' (agentjax.tasks)
    kwargs: dict = dataclasses.field(default_factory=dict)  # a user task's factory(run, **kwargs)
    difficulty: str = "default"  # a minirepo preset (agentjax.envs.minirepo.PRESETS)
    latency: Latency = Latency.LONG_TAILED
    max_steps: int = 6
    eval_tasks: int = 256
    hack_tool: bool = True  # keep planted hack opportunities (hack rate is measured)

    def __post_init__(self):
        if not importpath.is_path(self.name):
            if self.name not in TaskName.values():
                raise ValueError(
                    f"task.name={self.name!r} is invalid; allowed values: {TaskName.values()} "
                    "or an import path 'package.module:factory'"
                )
            coerce(self, name=TaskName)
        coerce(self, latency=Latency)

    def check(self) -> None:
        from agentjax.envs import minirepo  # noqa: PLC0415 - host-only, cheap

        if importpath.is_path(self.name):
            task_registry.resolve(self.name)  # the module imports and the factory is there: before any work
        _choice("task.difficulty", self.difficulty, sorted(minirepo.PRESETS))
        _positive("task.eval_tasks", self.eval_tasks)


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
    episodes: int = 2000
    steps: int = 300
    batch_size: int = 64
    learning_rate: float = 3e-3


@dataclasses.dataclass(frozen=True)
class RLConfig:
    steps: int = 100
    group_size: int = 8
    batch_size: int = 64  # trajectories per learner step
    eval_every: int = 25
    temperature: float = 1.0

    def check(self) -> None:
        for f in ("steps", "group_size", "batch_size", "eval_every"):
            _positive(f"rl.{f}", getattr(self, f))
        if self.batch_size % self.group_size:
            raise ConfigError(
                f"rl.batch_size={self.batch_size} must be a multiple of rl.group_size={self.group_size}"
            )
        if self.temperature <= 0:
            raise ConfigError(f"rl.temperature={self.temperature} is invalid; must be > 0")


@dataclasses.dataclass(frozen=True)
class PlacementSection:
    kind: PlacementKind = PlacementKind.COLOCATED
    learner_mesh: dict = dataclasses.field(default_factory=dict)
    sampler_mesh: dict = dataclasses.field(default_factory=dict)
    sync_every: int = 1
    host_devices: int = 0  # CPU-only hosts: launch.train asks XLA for this many host devices (0: as is)
    peer_timeout_s: float = 300.0  # several processes: a peer silent this long fails the run

    def __post_init__(self):
        coerce(self, kind=PlacementKind)
        checks.check_mesh("placement.learner_mesh", self.learner_mesh, MESH_AXES, lowest=1)
        checks.check_mesh("placement.sampler_mesh", self.sampler_mesh, MESH_AXES, lowest=0)
        if not (isinstance(self.host_devices, int) and self.host_devices >= 0):
            raise ConfigError(
                f"placement.host_devices={self.host_devices!r} is invalid; "
                "must be an integer >= 0 (0: leave XLA's host device count as it is)"
            )
        if not self.peer_timeout_s > 0:
            raise ConfigError(
                f"placement.peer_timeout_s={self.peer_timeout_s!r} is invalid; must be > 0 "
                "(seconds a multi-process run waits for a silent process before it fails)"
            )


@dataclasses.dataclass(frozen=True)
class ContextSection:
    policy: ContextKind = ContextKind.KEEP_ALL
    arg: int = 0

    def __post_init__(self):
        coerce(self, policy=ContextKind)


@dataclasses.dataclass(frozen=True)
class CodefixSection:
    """``task.name='codefix'``: real-sandbox tasks; scripted agents (eval, warm-start demonstrations)."""

    tasks: tuple = ()  # bundled task names (agentjax.envs.codefix.list_tasks()); () = all of them
    agents: tuple = ("oracle", "no_op", "wrong_fix")  # agentjax.envs.codefix.agents.AGENTS
    inject: str = ""  # an infra fault class injected into every final verification; "" = none
    audit: bool = True  # judge every final tree again with the independent audit (H)
    max_obs_chars: int = 8000  # a longer tool output keeps its head and tail (recorded cut)
    tools: tuple = ()  # the tools offered to the model (agentjax.envs.codefix.env.TOOLS); () = all

    def check(self) -> None:
        from agentjax.envs import codefix, faults  # noqa: PLC0415 - host-only, cheap
        from agentjax.envs.codefix.agents import AGENTS  # noqa: PLC0415
        from agentjax.envs.codefix.env import TOOLS  # noqa: PLC0415

        for name in self.tools:
            _choice("codefix.tools", name, list(TOOLS))
        if self.tools and "submit" not in self.tools:
            raise ConfigError(f"codefix.tools={tuple(self.tools)} is invalid: it must include 'submit'")

        for name in self.tasks:
            _choice("codefix.tasks", name, codefix.list_tasks())
        if not self.agents:
            raise ConfigError(f"codefix.agents=() is invalid; name at least one of {sorted(AGENTS)}")
        for name in self.agents:
            _choice("codefix.agents", name, sorted(AGENTS))
        _choice("codefix.inject", self.inject, ["", *faults.FAULT_CLASSES])
