"""Settings that were silently accepted now fail at start naming the field: a context beyond the
checkpoint's positions, a chat template that drops the task's tool schemas. (A partial section
keeping the default run's other values: tests/test_doors.py.)"""

import json
import shutil
import types

import pytest

from agentjax.policy.config import ConfigError
from agentjax.tasks import model as task_model
from agentjax.tasks.codefix import TOOLS
from launch.make_tiny_hf import CHAT_TEMPLATE

SUITE = types.SimpleNamespace(name="with_tools", tools=TOOLS, system="fix it", vocabulary=lambda: None)


def _build(path, **model):
    return task_model.build(task_model.HFModel(hf_path=str(path), **model), SUITE)


def test_max_seq_len_beyond_the_checkpoints_positions_fails_naming_the_field(tiny_hf_dir, tmp_path):
    d = shutil.copytree(tiny_hf_dir, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 64}))
    with pytest.raises(
        ConfigError, match=r"model.max_seq_len=128 is invalid .* max_position_embeddings=64; must be <= 64"
    ):
        _build(d, max_seq_len=128)
    assert _build(d, max_seq_len=64).config.max_seq_len == 64
    yarn = {**cfg, "max_position_embeddings": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    (d / "config.json").write_text(json.dumps(yarn))
    with pytest.raises(ConfigError, match=r"x rope_scaling factor 4.0; must be <= 256"):
        task_model._check_positions(task_model.HFModel(hf_path=str(d), max_seq_len=512))
    task_model._check_positions(task_model.HFModel(hf_path=str(d), max_seq_len=256))  # YaRN's reach


def test_a_chat_template_that_ignores_tools_fails_naming_it(tiny_hf_dir, tmp_path):
    d = shutil.copytree(tiny_hf_dir, tmp_path / "t")
    _build(d)  # the ChatML template renders the tool schemas
    tc = json.loads((d / "tokenizer_config.json").read_text())
    no_tools = "{%- if" + CHAT_TEMPLATE.split("{%- elif", 1)[1]  # the same template without its tools block
    (d / "tokenizer_config.json").write_text(json.dumps({**tc, "chat_template": no_tools}))
    with pytest.raises(ConfigError, match=r"its chat template ignores `tools`.*task.name='with_tools'"):
        _build(d)
    plain = types.SimpleNamespace(**{**vars(SUITE), "tools": ()})  # a task without tools needs none
    task_model.build(task_model.HFModel(hf_path=str(d)), plain)
