"""The run configuration: an ``ml_collections.ConfigDict`` checked into small frozen dataclasses.

Every section is validated before any work starts; an invalid value fails with the field's full
name and the allowed values (``task.name='swe' is invalid; allowed values: [...]``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from agentjax import configcheck
from agentjax.learner.objective import LossConfig
from agentjax.learner.step import OptimConfig
from agentjax.policy.config import ConfigError, ModelConfig
from agentjax.runsections import (
    AdmissionSection,
    CurriculumSection,
    FaultsSection,
    FingerprintSection,
    RubricSection,
)
from agentjax.sampling.precision import SamplerPrecision
from agentjax.sampling.queue import MODES
from agentjax.sampling.rollout import Caps


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    name: str = "minirepo"
    difficulty: str = "default"
    latency: str = "long_tailed"
    max_steps: int = 6
    eval_tasks: int = 256
    hack_tool: bool = True  # keep planted hack opportunities (hack rate is measured)


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


@dataclasses.dataclass(frozen=True)
class SchedulerSection:
    mode: str = "windowed_fifo"
    window: int = 64
    num_slots: int = 128
    max_version_gap: int = 2
    gen_seconds_per_token: float = 0.02
    learner_step_time: float = 2.0
    engine_slots: int = 0  # > 0: sample on the slot engine (EngineRollout) with this many slots
    engine_chunk: int = 8  # decode tokens per slot-engine generate call
    env_workers: int = 8  # slot engine: environment pool size
    env_pool: str = "thread"  # slot engine: "thread" or "process" workers


@dataclasses.dataclass(frozen=True)
class PlacementSection:
    kind: str = "colocated"
    learner_mesh: dict = dataclasses.field(default_factory=dict)
    sampler_mesh: dict = dataclasses.field(default_factory=dict)
    sync_every: int = 1
    host_devices: int = 0  # CPU-only hosts: launch.train asks XLA for this many host devices (0: as is)


@dataclasses.dataclass(frozen=True)
class ContextSection:
    policy: str = "keep_all"
    arg: int = 0


@dataclasses.dataclass(frozen=True)
class CodefixSection:
    """``task.name='codefix'``: real-sandbox tasks; scripted agents (eval, warm-start demonstrations)."""

    tasks: tuple = ()  # bundled task names (agentjax.envs.codefix.list_tasks()); () = all of them
    agents: tuple = ("oracle", "no_op", "wrong_fix")  # agentjax.envs.codefix.agents.AGENTS
    inject: str = ""  # an infra fault class injected into every final verification; "" = none
    audit: bool = True  # judge every final tree again with the independent audit (H)
    max_obs_chars: int = 8000  # a longer tool output keeps its head and tail (recorded cut)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    seed: int
    model: dict  # ModelConfig fields but vocab_size (tokenizer); or hf_path + agentjax.tasks.model.HF_FIELDS
    task: TaskConfig
    caps: Caps
    warm_start: WarmStartConfig
    rl: RLConfig
    scheduler: SchedulerSection
    placement: PlacementSection
    context: ContextSection
    loss: LossConfig
    optim: OptimConfig
    codefix: CodefixSection = dataclasses.field(default_factory=CodefixSection)
    sampler: SamplerPrecision = dataclasses.field(default_factory=SamplerPrecision)
    faults: FaultsSection = dataclasses.field(default_factory=FaultsSection)
    curriculum: CurriculumSection = dataclasses.field(default_factory=CurriculumSection)
    rubric: RubricSection = dataclasses.field(default_factory=RubricSection)
    fingerprints: FingerprintSection = dataclasses.field(default_factory=FingerprintSection)
    admission: AdmissionSection = dataclasses.field(default_factory=AdmissionSection)
    checkpoint_every: int = 50  # 0: never
    log_every: int = 5
    report: bool = True


_SECTIONS = {
    "task": TaskConfig,
    "caps": Caps,
    "warm_start": WarmStartConfig,
    "rl": RLConfig,
    "scheduler": SchedulerSection,
    "placement": PlacementSection,
    "context": ContextSection,
    "loss": LossConfig,
    "optim": OptimConfig,
    "codefix": CodefixSection,
    "sampler": SamplerPrecision,
    "faults": FaultsSection,
    "curriculum": CurriculumSection,
    "rubric": RubricSection,
    "fingerprints": FingerprintSection,
    "admission": AdmissionSection,
}
TASKS = ("minirepo", "codefix")  # codefix trains with model.hf_path (a BPE tokenizer)
_TOP = {"seed", "model", "checkpoint_every", "log_every", "report", *_SECTIONS}


def _build(section: str, cls, values: dict):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown fields {[f'{section}.{u}' for u in unknown]}; allowed: {sorted(names)}")
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    configcheck.check_types(section, cls, kw)  # a string where a number belongs, NaN, ...
    try:
        obj = cls(**kw)
    except ConfigError:
        raise
    except ValueError as e:  # the dataclasses' own checks: prefix the section
        msg = str(e)
        raise ConfigError(msg if msg.startswith(section + ".") else f"{section}: {msg}") from None
    configcheck.check_ranges(section, obj)
    return obj


def _choice(field: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{field}={value!r} is invalid; allowed values: {list(allowed)}")


def _positive(field: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field}={value!r} is invalid; must be an integer >= 1")


def _check_codefix(c: CodefixSection) -> None:
    from agentjax.envs import codefix, faults  # noqa: PLC0415 - host-only, cheap
    from agentjax.envs.codefix.agents import AGENTS  # noqa: PLC0415

    for name in c.tasks:
        _choice("codefix.tasks", name, codefix.list_tasks())
    if not c.agents:
        raise ConfigError(f"codefix.agents=() is invalid; name at least one of {sorted(AGENTS)}")
    for name in c.agents:
        _choice("codefix.agents", name, sorted(AGENTS))
    _choice("codefix.inject", c.inject, ["", *faults.FAULT_CLASSES])


def parse(cfg, *, evaluation: bool = False) -> RunConfig:
    """Checks a ConfigDict (or plain dict) and returns the typed :class:`RunConfig`.

    ``evaluation=True`` (``launch/eval.py``) also accepts ``task.name='codefix'``, which trains
    nothing: it runs scripted agents in the real sandbox.
    """
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    unknown = sorted(set(d) - _TOP)
    if unknown:
        raise ConfigError(f"unknown config sections {unknown}; allowed: {sorted(_TOP)}")
    for name in _SECTIONS.keys() | {"model"}:
        if not isinstance(d.get(name, {}), dict):
            raise ConfigError(f"{name}={d[name]!r} is invalid; must be a section (a dict of fields)")
    top = {k: d[k] for k in ("seed", "checkpoint_every", "log_every", "report") if k in d}
    configcheck.check_types("", RunConfig, top)
    for k, v in top.items():
        configcheck.check_value(k, v)
    parts = {name: _build(name, cls, dict(d.get(name, {}))) for name, cls in _SECTIONS.items()}
    model = dict(d.get("model", {}))
    if "vocab_size" in model:
        raise ConfigError("model.vocab_size is set by the tokenizer; remove it from the config")
    if model.get("hf_path"):  # a local HF directory: its files are checked in system.build
        from agentjax.tasks import model as task_model  # noqa: PLC0415

        task_model.check(model)
    else:
        plain = {k: v for k, v in model.items() if k not in ("hf_path", "tool_format")}
        configcheck.check_types("model", ModelConfig, plain)
        try:  # field names and values checked now
            ModelConfig.from_dict({**plain, "vocab_size": 8})
        except ConfigError as e:  # name every field the model's own message mentions as model.<field>
            fields = "|".join(f.name for f in dataclasses.fields(ModelConfig))
            raise ConfigError(re.sub(rf"(?<![.\w])({fields})=", r"model.\1=", str(e))) from None
    t, s, rl = parts["task"], parts["scheduler"], parts["rl"]
    from agentjax.envs import minirepo  # noqa: PLC0415 - host-only, cheap

    if t.name == "codefix" and not evaluation and not model.get("hf_path"):
        raise ConfigError(
            "task.name='codefix' needs a real tokenizer for training: set model.hf_path "
            "to a HF directory (configs/codefix_tiny.py; python -m launch.make_tiny_hf)"
        )
    _choice("task.name", t.name, TASKS)
    _check_codefix(parts["codefix"])
    _choice("task.difficulty", t.difficulty, sorted(minirepo.PRESETS))
    _choice("task.latency", t.latency, ["fixed", "long_tailed"])
    _choice("scheduler.mode", s.mode, MODES)
    _choice("scheduler.env_pool", s.env_pool, ["thread", "process"])
    _choice("placement.kind", parts["placement"].kind, ["colocated", "disaggregated"])
    if not (isinstance(parts["placement"].host_devices, int) and parts["placement"].host_devices >= 0):
        raise ConfigError(
            f"placement.host_devices={parts['placement'].host_devices!r} is invalid; "
            "must be an integer >= 0 (0: leave XLA's host device count as it is)"
        )
    _choice(
        "context.policy",
        parts["context"].policy,
        ["keep_all", "drop_oldest_observations", "truncate_observations"],
    )
    for f in ("steps", "group_size", "batch_size", "eval_every"):
        _positive(f"rl.{f}", getattr(rl, f))
    _positive("task.eval_tasks", t.eval_tasks)
    _positive("scheduler.num_slots", s.num_slots)
    _positive("scheduler.window", s.window)
    if rl.batch_size % rl.group_size:
        raise ConfigError(
            f"rl.batch_size={rl.batch_size} must be a multiple of rl.group_size={rl.group_size}"
        )
    if parts["loss"].value_coef and parts["loss"].advantage != "gae":
        raise ConfigError(
            f"loss.value_coef={parts['loss'].value_coef} needs returns from a critic: set "
            "loss.advantage to 'gae' or value_coef to 0"
        )
    if parts["loss"].advantage == "gae" and model.get("value_head", "none") == "none":
        raise ConfigError(
            "loss.advantage='gae' needs a critic: set model.value_head to one of "
            "['shared', 'separate'] (it is 'none')"
        )
    if rl.group_size < 2 and parts["loss"].advantage != "gae":
        raise ConfigError(
            f"rl.group_size={rl.group_size} is invalid with group advantages: a "
            "group of one has advantage 0 (no gradient); must be >= 2, or use "
            "loss.advantage='gae'"
        )
    if rl.batch_size % parts["optim"].minibatches:
        raise ConfigError(
            f"optim.minibatches={parts['optim'].minibatches} must divide rl.batch_size={rl.batch_size}"
        )
    if parts["curriculum"].enabled:
        from agentjax.loopparts import make_curriculum  # noqa: PLC0415 - checks start/cap pairs

        try:
            make_curriculum(parts["curriculum"])
        except ValueError as e:
            raise ConfigError(f"curriculum: {e}") from None
        if parts["faults"].rates:
            raise ConfigError(
                "faults.rates and curriculum.enabled=True both set the fault rates; "
                "use curriculum.start/cap (faults keeps the retry policy)"
            )
    own = sorted(k for k in {**parts["faults"].rates, **parts["curriculum"].cap} if k != "env_crash")
    if own and t.name != "minirepo":
        raise ConfigError(
            f"fault classes {own} are injected by minirepo's environment only; with "
            f"task.name={t.name!r} use faults.rates.env_crash (the loop's injector)"
        )
    if rl.temperature <= 0:
        raise ConfigError(f"rl.temperature={rl.temperature} is invalid; must be > 0")
    return RunConfig(
        seed=int(d.get("seed", 0)),
        model=model,
        checkpoint_every=int(d.get("checkpoint_every", 50)),
        log_every=int(d.get("log_every", 5)),
        report=bool(d.get("report", True)),
        **parts,
    )
