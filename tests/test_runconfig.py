"""Invalid configs fail before any work, naming the field and the allowed values."""

import dataclasses

import pytest

from agentjax.policy.config import ConfigError
from agentjax.run.config import parse
from configs import default, smoke


def test_default_and_smoke_parse():
    run = parse(default.get_config())
    assert run.scheduler.mode == "windowed_fifo" and run.loss.name == "grpo"
    assert parse(smoke.get_config()).rl.steps == 12


@pytest.mark.parametrize(
    "section,field,value,match",
    [
        ("scheduler", "mode", "fastest", r"scheduler.mode='fastest' is invalid; allowed values: \['sync'"),
        ("loss", "name", "ppo2", r"loss.name='ppo2' is invalid; allowed values"),
        ("loss", "filter", "topk", r"loss.filter='topk' is invalid"),
        ("task", "difficulty", "nightmare", r"task.difficulty='nightmare' is invalid; allowed values"),
        ("placement", "kind", "remote", r"placement.kind='remote' is invalid"),
        ("context", "policy", "summarise", r"context.policy='summarise' is invalid"),
        ("rl", "group_size", 0, r"rl.group_size=0 is invalid"),
        ("optim", "grad_accum", 0, r"optim.grad_accum=0 is invalid"),
        ("optim", "empty_batches", "drop", r"optim.empty_batches='drop' is invalid; must be one of"),
        ("model", "compute_dtype", "fp8", r"compute_dtype='fp8' is invalid; allowed values"),
    ],
)
def test_bad_value_names_field(section, field, value, match):
    c = default.get_config()
    c[section][field] = value
    with pytest.raises(ConfigError, match=match):
        parse(c)


def test_unknown_field_and_section():
    c = default.get_config().to_dict()
    c["rl"]["stepz"] = 3
    with pytest.raises(ConfigError, match=r"rl.stepz"):
        parse(c)
    c = default.get_config().to_dict()
    c["learner"] = {}
    with pytest.raises(ConfigError, match="unknown config sections"):
        parse(c)


def test_batch_must_hold_whole_groups():
    c = default.get_config()
    c.rl.batch_size = 60
    with pytest.raises(ConfigError, match="multiple of rl.group_size"):
        parse(c)


def _codefix():
    c = default.get_config()
    c.task.name = "codefix"
    return c


def test_codefix_training_needs_a_hf_tokenizer():
    match = r"task.name='codefix' needs a real tokenizer for training: set model.hf_path"
    with pytest.raises(ConfigError, match=match):
        parse(_codefix())
    run = parse(_codefix(), evaluation=True)
    assert run.task.name == "codefix" and run.codefix.agents == ("oracle", "no_op", "wrong_fix")
    c = default.get_config()
    c.task.name = "swe"
    match = r"task.name='swe' is invalid; allowed values: \['minirepo', 'codefix', 'dataset'\]"
    with pytest.raises(ConfigError, match=match):
        parse(c, evaluation=True)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("tasks", ("clamp", "nosuch"), r"codefix.tasks='nosuch' is invalid; allowed values: \["),
        ("agents", ("oracle", "cheater"), r"codefix.agents='cheater' is invalid; allowed values: \["),
        ("agents", (), r"codefix.agents=\(\) is invalid"),
        ("inject", "meteor", r"codefix.inject='meteor' is invalid; allowed values: \['', 'sandbox_start'"),
    ],
)
def test_bad_codefix_value_names_field(field, value, match):
    c = _codefix().to_dict()
    c["codefix"] = {field: value}
    with pytest.raises(ConfigError, match=match):
        parse(c, evaluation=True)


def _with(path: str, value):
    """The default config (as a plain dict, like a config file's values) with one field set."""
    c = default.get_config().to_dict()
    *sections, name = path.split(".")
    d = c
    for s in sections:
        d = d[s]
    d[name] = value
    return c


@pytest.mark.parametrize(
    "path,value,match",
    [
        # degenerate values that ran (or crashed after real work) before they were checked
        ("rl.group_size", 1, r"rl.group_size=1 is invalid with group advantages.*>= 2"),
        ("optim.learning_rate", float("nan"), r"optim.learning_rate=nan is invalid; must be a finite"),
        ("optim.learning_rate", float("inf"), r"optim.learning_rate=inf is invalid"),
        ("optim.learning_rate", 0.0, r"optim.learning_rate=0.0 is invalid; must be a finite number > 0"),
        ("optim.learning_rate", -1e-3, r"optim.learning_rate=-0.001 is invalid"),
        ("log_every", 0, r"log_every=0 is invalid; must be >= 1"),
        ("log_every", -3, r"log_every=-3 is invalid; must be >= 1"),
        ("warm_start.batch_size", 0, r"warm_start.batch_size=0 is invalid; must be >= 1"),
        ("caps.max_tool_calls", 0, r"caps.max_tool_calls=0 is invalid; must be >= 1"),
        ("task.max_steps", 0, r"task.max_steps=0 is invalid; must be >= 1"),
        ("loss.icepop_low", 3.0, r"loss.icepop_low=3.0, loss.icepop_high=2.0 are invalid; must satisfy"),
        ("admission.max_version_gap", -1, r"admission.max_version_gap=-1 is invalid; must be >= 0"),
        ("loss.grpo.clip_low", 2.0, r"loss.grpo.clip_low=2.0 is invalid; must be in \[0, 1\)"),
        ("optim.b2", 1.0, r"optim.b2=1.0 is invalid; must be in \[0.0, 1.0\)"),
        ("optim.weight_decay", -0.1, r"optim.weight_decay=-0.1 is invalid; must be >= 0"),
        ("loss.demo_coef", -1.0, r"loss.demo_coef=-1.0 is invalid; must be >= 0"),
        ("loss.demo_rows", 0, r"loss.demo_rows=0 is invalid; must be >= 1"),
        ("rl.temperature", float("nan"), r"rl.temperature=nan is invalid"),
        # a string (or a bool, a list) where a number belongs: named, never a bare TypeError
        ("rl.steps", "100", r"rl.steps='100' is invalid; must be an integer"),
        ("optim.learning_rate", "fast", r"optim.learning_rate='fast' is invalid; must be a finite number"),
        ("task.max_steps", True, r"task.max_steps=True is invalid; must be an integer"),
        ("model.max_seq_len", "96", r"model.max_seq_len='96' is invalid; must be an integer"),
        ("model.n_layers", 0, r"model.n_layers=0 is invalid"),
        ("loss.grpo.aggregation", "sum", r"loss.grpo.aggregation='sum' is invalid; allowed values"),
        ("seed", "zero", r"seed='zero' is invalid; must be an integer"),
        ("report", "yes", r"report='yes' is invalid; must be True or False"),
        ("rl", 5, r"rl=5 is invalid; must be a section"),
        ("targets", 0.7, r"targets=0.7 is invalid; must be a dict of \['success'"),
        ("targets.success", "high", r"targets.success='high' is invalid; must be a number in \[-1, 1\]"),
        ("targets.success", 70.0, r"targets.success=70.0 is invalid; must be a number in \[-1, 1\]"),
        ("targets.speed", 0.5, r"targets.speed is unknown; allowed: \['success', 'gain_over_rl_start'"),
    ],
)
def test_degenerate_and_mistyped_values_are_named(path, value, match):
    with pytest.raises(ConfigError, match=match):
        parse(_with(path, value))


def test_the_demonstration_term_needs_a_warm_start():
    c = _with("loss.demo_coef", 0.5)
    c["warm_start"]["steps"] = 0
    with pytest.raises(
        ConfigError, match=r"loss.demo_coef=0.5 trains on the warm start's .*warm_start.steps > 0"
    ):
        parse(c)
    assert parse(_with("loss.demo_coef", 0.5)).loss.demo_coef == 0.5


def test_only_the_default_run_declares_learning_targets():
    """configs/default.py declares the default run's targets; configs built on it (smoke, codefix)
    start from default.base() and declare none; a resumed run may change them."""
    from agentjax.learner.resume import config_differences  # noqa: PLC0415
    from configs import codefix_tiny, sync_exact  # noqa: PLC0415

    assert parse(default.get_config()).targets == default.TARGETS
    assert parse(smoke.get_config()).targets == {} and parse(sync_exact.get_config()).targets == {}
    assert "targets" not in codefix_tiny.get_config()
    assert parse(_with("targets", {"success": 1})).targets == {"success": 1.0}
    assert config_differences({"targets": {"success": 0.7}, "seed": 0}, {"targets": {}, "seed": 0}) == []


def test_optimizer_fields_are_settable_from_the_command_line():
    """weight_decay, b1 and b2 are keys of the config the --config flag loads (the default run
    leaves them at OptimConfig's values; launch.configflag fills every field), so
    --config.optim.b1=... works."""
    from launch import configflag

    c = configflag.complete(default.get_config())
    c.lock()  # as config_flags locks it: only existing keys can be overridden from the CLI
    c.optim.weight_decay, c.optim.b1, c.optim.b2 = 0.01, 0.8, 0.95
    o = parse(c).optim
    assert (o.weight_decay, o.b1, o.b2) == (0.01, 0.8, 0.95)


def test_ppo_loss_rejects_out_of_range_clip():
    import numpy as np

    from agentjax import objectives as obj

    x = np.zeros((2, 3), np.float32)
    adv, mask = np.ones((2,), np.float32), np.ones((2, 3), np.float32)
    for fn, kw in (
        (obj.ppo_loss, dict(clip_low=2.0, clip_high=0.2, aggregation="token_mean")),
        (obj.ppo_loss, dict(clip_low=0.2, clip_high=-0.1, aggregation="token_mean")),
        (obj.grpo_loss, dict(clip_low=-0.5, clip_high=0.2, aggregation="token_mean")),
        (obj.gspo_loss, dict(clip_low=1.0, clip_high=0.2)),
        (obj.cispo_loss, dict(clip_low=None, clip_high=float("inf"), aggregation="token_mean")),
    ):
        with pytest.raises(ValueError, match=r"clip_(low|high)=.* is invalid"):
            fn(x, x, adv, mask, **kw)
    loss, _ = obj.ppo_loss(
        x, x, adv, mask, clip_low=0.2, clip_high=0.28, aggregation="token_mean"
    )  # in range: runs
    assert float(loss) == pytest.approx(-1.0)


_VALUES = [
    -7,
    -1,
    0,
    1,
    2,
    3,
    10**9,
    -0.5,
    0.0,
    0.25,
    1.0,
    1.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "x",
    "5",
    "nan",
    True,
    False,
    None,
    [],
    [1, 2],
    (0.5, 2.0),
    {},
    {"a": 1},
]


def test_fuzzed_configs_parse_or_name_the_field():
    """Random field/value mutations of the default config (1-3 at a time): ``parse`` either
    accepts the result or raises ConfigError naming one of the mutated fields -- never another
    exception type (a TypeError, ZeroDivisionError, ...) and never an unnamed error."""
    import random

    rng = random.Random(14)
    base = default.get_config().to_dict()
    fields = [(s, f) for s, v in base.items() if isinstance(v, dict) for f in v]
    fields += [(None, k) for k, v in base.items() if not isinstance(v, dict)]
    accepted = rejected = 0
    for _ in range(1500):
        c = default.get_config().to_dict()
        names = []
        for _ in range(rng.randint(1, 3)):
            section, f = rng.choice(fields)
            value = rng.choice(_VALUES)
            (c[section] if section else c)[f] = value
            names.append(f"{section}.{f}" if section else f)
        try:
            parse(c)
            accepted += 1
        except ConfigError as e:
            rejected += 1
            msg = str(e)
            assert any(n in msg for n in names), (names, msg)
        except Exception as e:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"{names}: {type(e).__name__}: {e}") from e
    assert accepted > 50 and rejected > 500  # both outcomes are exercised


def test_a_context_too_small_for_any_episode_is_rejected_before_work():
    from agentjax.run.build import build  # noqa: PLC0415

    c = smoke.get_config()
    c.model.max_seq_len = 8  # shorter than the shortest prompt plus one action
    with pytest.raises(
        ConfigError, match=r"model.max_seq_len=8 is too small for any episode.*must be >= \d+"
    ):
        build(parse(c))
    assert build(parse(smoke.get_config())).model.max_seq_len == 96


def test_partial_rollout_needs_the_slot_engine_and_no_virtual_checkpoints():
    c = default.get_config()
    c.scheduler.update(round_budget=4, engine_slots=0)
    with pytest.raises(
        ConfigError, match=r"scheduler.round_budget=4 \(partial rollout\) needs the slot engine"
    ):
        parse(c)
    c.scheduler.update(engine_slots=8, clock="virtual")
    with pytest.raises(ConfigError, match=r"needs checkpoint_every=0 \(is 20\)"):
        parse(c)
    c.checkpoint_every = 0
    assert parse(c).scheduler.round_budget == 4
    c.checkpoint_every, c.scheduler.clock = 20, "real"
    assert parse(c).scheduler.round_budget == 4
    c.scheduler.caps = dict(max_tokens=3)
    with pytest.raises(ConfigError, match=r"takes its per-task caps from the caps"):
        parse(c)


def test_env_latency_as_real_waiting_needs_the_real_clock():
    c = default.get_config()
    c.scheduler.update(env_latency_scale=0.5, clock="virtual")
    with pytest.raises(ConfigError, match=r"scheduler.env_latency_scale=0.5 .* needs scheduler.clock='real'"):
        parse(c)
    c.scheduler.update(env_latency_scale=-1.0, clock="real")
    with pytest.raises(ConfigError, match=r"env_latency_scale=-1.0 is invalid; must be >= 0"):
        parse(c)
    c.scheduler.env_latency_scale = 0.5
    assert parse(c).scheduler.env_latency_scale == 0.5


def _default_of(f):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def test_the_default_run_writes_only_what_differs_from_the_components_defaults():
    """Defaults are written once: no value of ``rundefaults.run_defaults()`` (nor of a loss's own
    section in it) equals its dataclass's default or its loss's paper value (the registry's)."""
    from agentjax import rundefaults
    from agentjax.objectives import registry
    from agentjax.policy.config import ModelConfig
    from agentjax.run.config import _SECTIONS, RunConfig

    sections = {**_SECTIONS, "model": ModelConfig}
    top = {f.name: f for f in dataclasses.fields(RunConfig)}
    restated = []
    for key, value in rundefaults.run_defaults().items():
        if key not in sections:
            if _default_of(top[key]) == value:
                restated.append(key)
            continue
        fields = {f.name: f for f in dataclasses.fields(sections[key])}
        for name, v in value.items():
            if name in registry.LOSSES and key == "loss":
                paper = {f.name: f.default for f in dataclasses.fields(registry.LOSSES[name])}
                restated += [f"loss.{name}.{k}" for k, x in v.items() if paper[k] == x]
            elif _default_of(fields[name]) == v:
                restated.append(f"{key}.{name}")
    assert not restated, f"restate their components' defaults: {restated}"
    assert set(rundefaults.run_defaults()) >= set(_SECTIONS), (
        "every section present (c.<section>.<field> = ...)"
    )
