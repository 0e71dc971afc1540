"""Invalid configs fail before any work, naming the field and the allowed values."""

import pytest

from agentjax.policy.config import ConfigError
from agentjax.runconfig import parse
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


def test_codefix_is_for_evaluation_only():
    match = r"task.name='codefix' is invalid for training; allowed values: \['minirepo'\]"
    with pytest.raises(ConfigError, match=match):
        parse(_codefix())
    run = parse(_codefix(), evaluation=True)
    assert run.task.name == "codefix" and run.codefix.agents == ("oracle", "no_op", "wrong_fix")
    c = default.get_config()
    c.task.name = "swe"
    match = r"task.name='swe' is invalid; allowed values: \['minirepo', 'codefix'\]"
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
