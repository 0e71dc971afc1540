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
