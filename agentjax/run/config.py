"""The run configuration: an ``ml_collections.ConfigDict`` checked into small frozen dataclasses.

Each check lives with what it concerns. A check of one section is that section's type's own:
its ``__post_init__`` (what the type itself requires, wherever it is built) or its ``check()``
method (what a training run requires of the section; the parser calls it on every section that
has one, after the type and range checks of :mod:`agentjax.run.checks`). Only the checks that
relate two sections (or a section and a top-level field) are here, each a small named function
of :data:`CROSS_CHECKS`, run in order on the assembled :class:`RunConfig`.

Every section is validated before any work starts; an invalid value fails with the field's full
name and the allowed values (``task.name='swe' is invalid; allowed values: [...]``). Each section
is the component's own config (``scheduler`` is the scheduler's :class:`SchedulerConfig`,
``admission`` the staleness manager's :class:`StalenessConfig`, ``loss`` the learner's
:class:`LossConfig`, ``model`` a :class:`ModelConfig` or, with ``model.hf_path``, an
:class:`HFModel`), every setting is defined once (the batch size is ``rl.batch_size`` only), and
every closed choice is a :class:`~agentjax.choice.Choice` enum.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing

from agentjax import rundefaults
from agentjax.learner.objective import Advantage, LossConfig
from agentjax.learner.step import OptimConfig
from agentjax.policy.config import ConfigError, ModelConfig, ValueHead
from agentjax.run import checks
from agentjax.run.sections import (
    CodefixSection,
    ContextSection,
    CurriculumSection,
    FaultsSection,
    FingerprintSection,
    PlacementSection,
    RLConfig,
    RubricSection,
    TaskConfig,
    TaskName,
    WarmStartConfig,
)
from agentjax.sampling.precision import SamplerPrecision
from agentjax.sampling.queue import Caps, Clock
from agentjax.sampling.runlog import SchedulerConfig
from agentjax.sampling.staleness import StalenessConfig
from agentjax.tasks.model import HFModel


@dataclasses.dataclass(frozen=True)
class RunConfig:
    seed: int
    model: ModelConfig | HFModel  # ModelConfig: vocab_size 0, set by the task's tokenizer
    task: TaskConfig
    caps: Caps
    warm_start: WarmStartConfig
    rl: RLConfig
    scheduler: SchedulerConfig
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
    admission: StalenessConfig = dataclasses.field(default_factory=StalenessConfig)
    checkpoint_every: int = 50  # 0: never
    log_every: int = 5
    report: bool = True
    targets: dict = dataclasses.field(default_factory=dict)  # rundefaults.TARGET_NAMES -> bar; {}: none


_SECTIONS = {
    "task": TaskConfig,
    "caps": Caps,
    "warm_start": WarmStartConfig,
    "rl": RLConfig,
    "scheduler": SchedulerConfig,
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
    "admission": StalenessConfig,
}
# Fields that moved: where a config written for an older agentjax finds them now.
MOVED = {"scheduler.max_version_gap": "admission.max_version_gap"}
_TOP = {"seed", "model", "checkpoint_every", "log_every", "report", "targets", *_SECTIONS}


def _build(section: str, cls, values: dict, fixed: dict | None = None):
    """``cls(**values, **fixed)``, every failure a :class:`ConfigError` naming ``section.field``;
    ``fixed`` fields are set by the system, not by the config."""
    fixed = fixed or {}
    names = {f.name for f in dataclasses.fields(cls) if f.name not in fixed}
    unknown = sorted(set(values) - names)
    for u in unknown:
        if f"{section}.{u}" in MOVED:
            raise ConfigError(f"{section}.{u} is now {MOVED[f'{section}.{u}']}; set it there")
    if unknown:
        raise ConfigError(f"unknown fields {[f'{section}.{u}' for u in unknown]}; allowed: {sorted(names)}")
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    hints = checks.type_hints(cls)
    for k, v in kw.items():  # a nested component config given as a dict (scheduler.caps)
        kinds = (hints[k], *typing.get_args(hints[k]))  # the type, or the members of `X | None`
        nested = next((t for t in kinds if dataclasses.is_dataclass(t)), None)
        if isinstance(v, dict) and nested is not None:
            kw[k] = _build(f"{section}.{k}", nested, v)
    checks.check_types(section, cls, kw)  # a string where a number belongs, NaN, ...
    try:
        obj = cls(**kw, **fixed)
    except ValueError as e:  # the dataclasses' own checks: name every field as section.field
        msg = str(e)
        if not msg.startswith(section + "."):
            fields = "|".join(sorted(names, key=len, reverse=True))
            named = re.sub(rf"(?<![.\w])({fields})([.=])", rf"{section}.\1\2", msg)
            msg = named if named != msg else f"{section}: {msg}"
        raise ConfigError(msg) from None
    checks.check_ranges(section, obj)
    if hasattr(obj, "check"):  # what a training run requires of the section (its type's own check)
        try:
            obj.check()
        except ValueError as e:
            msg = str(e)
            raise ConfigError(
                msg if msg.startswith((section + ".", section + ":")) else f"{section}: {msg}"
            ) from None
    return obj


def _targets(value) -> dict:
    """The learning targets the run declares (``targets``; the report's headline checks them)."""
    names = list(rundefaults.TARGET_NAMES)
    if not isinstance(value, dict):
        raise ConfigError(f"targets={value!r} is invalid; must be a dict of {names} -> a number ({{}}: none)")
    for k, v in value.items():
        if k not in rundefaults.TARGET_NAMES:
            raise ConfigError(f"targets.{k} is unknown; allowed: {names}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and -1 <= v <= 1):
            raise ConfigError(f"targets.{k}={v!r} is invalid; must be a number in [-1, 1] (a share of tasks)")
    return {k: float(v) for k, v in value.items()}


def _model(model: dict) -> ModelConfig | HFModel:
    """The ``model`` section: an :class:`HFModel` with ``hf_path``, else the built-in model's
    :class:`ModelConfig` (its ``vocab_size`` left 0: the task's tokenizer sets it)."""
    if "vocab_size" in model:
        raise ConfigError("model.vocab_size is set by the tokenizer; remove it from the config")
    if model.get("hf_path"):  # a local HF directory: its files are checked in system.build
        bad = sorted(set(model) - {f.name for f in dataclasses.fields(HFModel)})
        if bad:
            raise ConfigError(
                f"model fields {[f'model.{b}' for b in bad]} come from {model['hf_path']}/config.json "
                f"with model.hf_path; allowed here: {sorted(f.name for f in dataclasses.fields(HFModel))}"
            )
        return _build("model", HFModel, model)
    model = {k: v for k, v in model.items() if k not in ("hf_path", "tool_format")}  # HF-only
    return _build("model", ModelConfig, model, fixed={"vocab_size": 0})


# -- checks that relate two sections (each section's own checks are its type's) -------------------


def codefix_trains_with_a_tokenizer(run: RunConfig, evaluation: bool) -> None:
    if run.task.name == TaskName.CODEFIX and not evaluation and not isinstance(run.model, HFModel):
        raise ConfigError(
            "task.name='codefix' needs a real tokenizer for training: set model.hf_path "
            "to a HF directory (configs/codefix_tiny.py; python -m launch.make_tiny_hf)"
        )


def partial_rollout_is_not_checkpointed(run: RunConfig, evaluation: bool) -> None:
    s, every = run.scheduler, run.checkpoint_every
    if s.round_budget and s.clock == Clock.VIRTUAL and every:
        raise ConfigError(
            f"scheduler.round_budget={s.round_budget} with scheduler.clock='virtual' needs "
            f"checkpoint_every=0 (is {every}): a paused episode (its environment "
            "and KV cache) is not written into the scheduler snapshot"
        )


def value_loss_has_a_critic(run: RunConfig, evaluation: bool) -> None:
    if (
        run.loss.advantage == Advantage.GAE
        and getattr(run.model, "value_head", ValueHead.NONE) == ValueHead.NONE
    ):
        raise ConfigError(
            "loss.advantage='gae' needs a critic: set model.value_head to one of "
            "['shared', 'separate'] (it is 'none')"
        )


def group_advantages_need_groups(run: RunConfig, evaluation: bool) -> None:
    if run.rl.group_size < 2 and run.loss.advantage != Advantage.GAE:
        raise ConfigError(
            f"rl.group_size={run.rl.group_size} is invalid with group advantages: a "
            "group of one has advantage 0 (no gradient); must be >= 2, or use "
            "loss.advantage='gae'"
        )


def dropping_uniform_groups_needs_groups(run: RunConfig, evaluation: bool) -> None:
    if run.scheduler.uniform_groups == "drop" and run.rl.group_size < 2:
        raise ConfigError(
            f"scheduler.uniform_groups='drop' needs groups to judge: rl.group_size={run.rl.group_size} "
            "must be >= 2 (or uniform_groups='keep')"
        )


def queue_holds_a_batch(run: RunConfig, evaluation: bool) -> None:
    cap, batch = run.admission.queue_capacity, run.rl.batch_size
    if cap and cap < batch:
        raise ConfigError(
            f"admission.queue_capacity={cap} must be >= "
            f"rl.batch_size={batch} (else the learner starves), or 0 (derived)"
        )


def minibatches_divide_the_batch(run: RunConfig, evaluation: bool) -> None:
    if run.rl.batch_size % run.optim.minibatches:
        raise ConfigError(
            f"optim.minibatches={run.optim.minibatches} must divide rl.batch_size={run.rl.batch_size}"
        )


def demonstrations_need_a_warm_start(run: RunConfig, evaluation: bool) -> None:
    if run.loss.demo_coef and not run.warm_start.steps:
        raise ConfigError(
            f"loss.demo_coef={run.loss.demo_coef} trains on the warm start's demonstrations: set "
            "warm_start.steps > 0, or loss.demo_coef to 0"
        )


def one_owner_of_fault_rates(run: RunConfig, evaluation: bool) -> None:
    if run.curriculum.enabled and run.faults.rates:
        raise ConfigError(
            "faults.rates and curriculum.enabled=True both set the fault rates; "
            "use curriculum.start/cap (faults keeps the retry policy)"
        )


def fault_classes_fit_the_task(run: RunConfig, evaluation: bool) -> None:
    own = sorted(k for k in {**run.faults.rates, **run.curriculum.cap} if k != "env_crash")
    if own and run.task.name != TaskName.MINIREPO:
        raise ConfigError(
            f"fault classes {own} are injected by minirepo's environment only; with "
            f"task.name={run.task.name!r} use faults.rates.env_crash (the loop's injector)"
        )


# Run in this order on the assembled RunConfig: the first failure is the error reported.
CROSS_CHECKS = (
    codefix_trains_with_a_tokenizer,
    partial_rollout_is_not_checkpointed,
    value_loss_has_a_critic,
    group_advantages_need_groups,
    dropping_uniform_groups_needs_groups,
    queue_holds_a_batch,
    minibatches_divide_the_batch,
    demonstrations_need_a_warm_start,
    one_owner_of_fault_rates,
    fault_classes_fit_the_task,
)


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
    d = rundefaults.merged(d)  # one set of defaults: a partial section keeps the default run's rest
    top = {k: d[k] for k in ("seed", "checkpoint_every", "log_every", "report") if k in d}
    checks.check_types("", RunConfig, top)
    for k, v in top.items():
        checks.check_value(k, v)
    parts = {name: _build(name, cls, dict(d.get(name, {}))) for name, cls in _SECTIONS.items()}
    model = _model(dict(d.get("model", {})))
    run = RunConfig(model=model, targets=_targets(d.get("targets", {})), **top, **parts)
    for check in CROSS_CHECKS:
        check(run, evaluation)
    return run
