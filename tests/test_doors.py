"""The three doors a user's code comes in by: ``task.name`` and ``loss.name`` as import paths (the
built-ins through the same registry), and every section field settable from the command line;
plus one set of defaults (a partial section keeps the default run's other values)."""

import dataclasses
import os

import numpy as np
import pytest
from absl import flags

from agentjax import tasks
from agentjax.learner.objective import LossConfig, policy_objective
from agentjax.policy.config import ConfigError
from agentjax.run.config import parse
from configs import default, smoke
from launch.configflag import define_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _batch():
    rng = np.random.default_rng(0)
    logp = rng.normal(-1.0, 0.3, (2, 3)).astype(np.float32)
    behav = (logp + rng.normal(0, 0.1, (2, 3))).astype(np.float32)
    batch = {
        "loss_mask": np.ones((2, 3), np.float32),
        "behav_logp": behav,
        "advantages": np.array([1.0, -0.5], np.float32),
        "weight": np.ones((2,), np.float32),
    }
    return batch, logp


def test_a_loss_by_import_path_is_the_builtin_through_the_same_door():
    batch, logp = _batch()
    builtin = LossConfig(name="ppo", ppo={"clip_high": 0.3})
    by_class = LossConfig(name="agentjax.objectives.registry:PPO", kwargs={"clip_high": 0.3})
    by_function = LossConfig(name="agentjax.objectives:ppo_loss", kwargs={"clip_high": 0.3, "clip_low": 0.2})
    assert by_class.objective == builtin.objective
    want, _ = policy_objective(builtin, batch, logp)
    for cfg in (by_class, by_function):
        got, _ = policy_objective(cfg, batch, logp)
        assert float(got) == pytest.approx(float(want), abs=1e-7)
    other, _ = policy_objective(
        LossConfig(name="agentjax.objectives:ppo_loss", kwargs={"clip_high": 0.01, "clip_low": 0.2}),
        batch,
        logp,
    )
    assert float(other) != pytest.approx(float(want))  # the kwargs reach the function
    hash(by_function)  # a jit static argument


def _with(**fields):
    c = default.get_config().to_dict()
    for path, v in fields.items():
        section, name = path.split("__")
        c[section][name] = v
    return c


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"loss__name": "nosuch_pkg.losses:fn"}, r"loss.name='nosuch_pkg.losses:fn': cannot import module"),
        ({"loss__name": "agentjax.objectives:nope"}, r"module 'agentjax.objectives' has no attribute 'nope'"),
        ({"loss__name": "agentjax.objectives:AGGREGATION_MODES"}, r"loss.name=.* is a tuple; name a loss"),
        ({"loss__name": "a:b:c"}, r"loss.name='a:b:c' is invalid; an import path is written"),
        (
            {"loss__name": "agentjax.objectives:ppo_loss", "loss__kwargs": {"beta": 1.0}},
            r"loss.name='agentjax.objectives:ppo_loss' does not take .* loss.kwargs=\['beta'\]",
        ),
        ({"loss__kwargs": {"beta": 1.0}}, r"loss.kwargs.beta is not a field of loss 'grpo'; its fields"),
        ({"task__name": "nosuch_pkg.tasks:make"}, r"task.name='nosuch_pkg.tasks:make': cannot import module"),
        (
            {"task__name": "examples.colour_task:nope"},
            r"module 'examples.colour_task' has no attribute 'nope'",
        ),
        ({"task__name": "examples.colour_task:WORDS"}, r"task.name=.* is a tuple; name a factory"),
        (
            {"task__name": "swe"},
            r"task.name='swe' is invalid; allowed values: \['minirepo', 'codefix', 'dataset'\] or an",
        ),
    ],
)
def test_a_bad_import_path_fails_at_start_naming_the_field(fields, match):
    with pytest.raises(ConfigError, match=match) as e:
        parse(_with(**fields))
    assert "\n" not in str(e.value)  # one line


def test_a_task_factory_returning_the_wrong_shape_is_named():
    with pytest.raises(ConfigError, match=r"task.name='builtins:str' returned a str without \['heldout'"):
        tasks.make(parse(_with(task__name="builtins:str")))  # str(run): not a task suite
    run = parse(_with(task__name="examples.colour_task:make_suite", task__kwargs={"accuracy": 1.0}))
    suite = tasks.make(run)
    assert suite.baseline() == 1.0 and suite.tools == () and suite.audit_fn is None  # optional members
    with pytest.raises(ConfigError, match=r"task.kwargs=\['nope'\]"):
        tasks.make(parse(_with(task__name="examples.colour_task:make_suite", task__kwargs={"nope": 1})))


def _cli(*args, config="configs/smoke.py"):
    fv = flags.FlagValues()
    argv = ["prog", f"--config={os.path.join(ROOT, config)}", *args]
    holder = define_config("config", os.path.join(ROOT, config), "", flag_values=fv, sys_argv=argv)
    fv(argv)
    return holder.value


def test_every_section_field_is_settable_from_the_command_line():
    c = _cli(
        "--config.loss.gspo.clip_low=0.001",  # a loss the file does not choose
        "--config.codefix.audit=False",  # a section the file does not mention
        "--config.curriculum.ramp_steps=7",
        "--config.loss.name=examples.colour_task:clipped_pg_with_entropy",
        "--config.loss.kwargs.beta=0.1",  # a user loss's own arguments
        "--config.task.kwargs.accuracy=0.9",
    )
    run = parse(c)
    assert dict(run.loss.gspo)["clip_low"] == 0.001 and run.codefix.audit is False
    assert run.curriculum.ramp_steps == 7 and dict(run.loss.kwargs) == {"beta": 0.1}
    assert run.task.kwargs == {"accuracy": 0.9}
    assert parse(_cli()) == parse(smoke.get_config())  # filling in every field changes no run
    with pytest.raises(ConfigError, match=r"unknown fields \['rl.stepz'\]"):
        parse(_cli("--config.rl.stepz=3"))  # still validated by parse


def test_a_partial_section_keeps_the_default_runs_other_values():
    """configs/codefix_tiny.py replaces the whole scheduler section: the real clock and the slot
    engine of the default run stay (one set of defaults)."""
    c = default.get_config().to_dict()
    c["scheduler"] = dict(mode="windowed_fifo", window=8, num_slots=8)
    c["loss"] = dict(name="grpo", grpo=dict(clip_high=0.3))
    run = parse(c)
    assert run.scheduler.clock == "real" and run.scheduler.engine_slots == 64 and run.scheduler.window == 8
    assert dict(run.loss.grpo) == {"clip_low": 0.2, "clip_high": 0.3, "aggregation": "seq_mean_token_mean"}
    assert run.loss.filter == "icepop" and run.checkpoint_every == 20
    assert parse({}) == parse(default.base())  # the default run's values (its targets are its own)
    assert dataclasses.replace(parse(default.get_config()), targets={}) == parse({})
