"""The policy a run trains: the built-in model with the task's word tokenizer, or a HF directory.

``model.hf_path=DIR`` (a local HF checkpoint: ``config.json``, ``*.safetensors``,
``tokenizer.json``, ``tokenizer_config.json`` with a chat template) gives the architecture, the
weights, the tokenizer and the chat template; the run config gives only the fields of
:class:`HFModel` (dtype, ``max_seq_len``, kernel choices, and ``tool_format``: how the model
writes tool calls: ``hermes``, ``llama3_json``, ``pythonic``, ``mistral``, ``mistral_args`` or
``plain``). Without it, the ``model`` section is a :class:`~agentjax.policy.config.ModelConfig`
and the task's vocabulary (minirepo's word tokenizer) sets its ``vocab_size``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from agentjax.policy.config import ConfigError, DType, ModelConfig, Remat
from agentjax.policy.hf import OVERRIDABLE
from agentjax.toolcall import calls as toolcalls

SOURCE_DIR = "hf_source"  # <workdir>/hf_source: the source config.json and tokenizer files


@dataclasses.dataclass(frozen=True)
class HFModel:
    """The run config's ``model`` section with ``model.hf_path``: the architecture, weights and
    tokenizer come from that directory; the run sets only these (None: the checkpoint's value,
    or the model's default where config.json has none)."""

    hf_path: str
    tool_format: toolcalls.ToolFormat = toolcalls.ToolFormat.HERMES
    param_dtype: DType = DType.FLOAT32
    max_seq_len: int | None = None
    compute_dtype: DType | None = None
    head_dtype: DType | None = None
    exact_tile: int | None = None
    layer_unroll: int | None = None
    remat: Remat | None = None
    activation_rows: tuple[str, ...] | None = None
    score_chunk: int | None = None  # ModelConfig.score_chunk: long rows' log-probs by chunks

    def __post_init__(self):
        object.__setattr__(self, "tool_format", toolcalls.ToolFormat.parse("tool_format", self.tool_format))
        object.__setattr__(self, "param_dtype", DType.parse("param_dtype", self.param_dtype))
        for f, cls in (("compute_dtype", DType), ("head_dtype", DType), ("remat", Remat)):
            if getattr(self, f) is not None:
                object.__setattr__(self, f, cls.parse(f, getattr(self, f)))
        if not Path(self.hf_path).is_dir():
            raise ConfigError(f"model.hf_path={self.hf_path!r} is not a directory (a local HF checkpoint)")

    def overrides(self) -> dict:
        """The :data:`~agentjax.policy.hf.OVERRIDABLE` fields the run sets."""
        return {k: getattr(self, k) for k in OVERRIDABLE if getattr(self, k) is not None}


@dataclasses.dataclass(frozen=True)
class Policy:
    config: ModelConfig
    tokenizer: Any
    codec: Any
    hf_path: str = ""  # "" = random init of the built-in model


def build(model: ModelConfig | HFModel, suite) -> Policy:
    """Config, tokenizer and codec; every file of a HF directory is checked here, before training.
    A built-in ``model`` gets the task's word tokenizer and its ``vocab_size``."""
    from agentjax.policy.codec import Codec  # noqa: PLC0415
    from agentjax.policy.tokenizer import WordTokenizer  # noqa: PLC0415

    if isinstance(model, ModelConfig):
        words = suite.vocabulary()
        if words is None:
            raise ConfigError(
                f"task.name={suite.name!r} needs a real tokenizer: set model.hf_path "
                "to a HF directory (e.g. python -m launch.make_tiny_hf)"
            )
        tok = WordTokenizer(words)
        return Policy(dataclasses.replace(model, vocab_size=tok.vocab_size), tok, Codec(tok))
    from agentjax.policy import hf_tensors  # noqa: PLC0415
    from agentjax.policy.chat import load_chat_tokenizer  # noqa: PLC0415
    from agentjax.policy.chat_codec import ChatCodec  # noqa: PLC0415
    from agentjax.policy.hf import HFImportError, load_hf_config, tensor_names, tensor_prefix  # noqa: PLC0415
    from agentjax.policy.model import param_spec  # noqa: PLC0415

    path = model.hf_path
    _check_positions(model)
    config = load_hf_config(path, dtype=model.param_dtype, **model.overrides())
    tok, chat = load_chat_tokenizer(path)
    _check_tools(chat, suite, path)
    if tok.vocab_size > config.vocab_size:
        raise HFImportError(
            f"{path}/tokenizer.json has {tok.vocab_size} tokens but config.json's "
            f"vocab_size is {config.vocab_size}"
        )
    files = hf_tensors.open_checkpoint(Path(path), HFImportError)  # shapes checked before training
    prefix = tensor_prefix(files.names)
    names, spec = tensor_names(config, prefix), param_spec(config)
    for k, (src, tr) in [(k, v) for k, v in names.items() if k != "layers"]:
        files.check(src, tr, spec[k][0])
    for k, (src, tr) in names["layers"].items():
        files.check(src, tr, spec["layers"][k][0])
    codec = ChatCodec(
        tok,
        chat,
        tools=tuple(suite.tools),
        system=suite.system,
        tool_format=model.tool_format,
        raw_replies=bool(getattr(suite, "parses_replies", False)),
    )
    return Policy(config, tok, codec, str(path))


_EXTENDING = ("yarn", "linear", "dynamic")  # rope scalings whose factor extends max_position_embeddings


def _check_positions(model: HFModel) -> None:
    """``model.max_seq_len`` within the positions the checkpoint was trained for (x the factor
    of a rope scaling that extends them, as transformers reads YaRN's config)."""
    import json  # noqa: PLC0415

    if model.max_seq_len is None:
        return
    try:
        cfg = json.loads((Path(model.hf_path) / "config.json").read_text())
    except (OSError, ValueError):
        return  # load_hf_config names the file's problem
    mpe = cfg.get("max_position_embeddings")
    if not isinstance(mpe, int):
        return
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    limit = int(mpe * scaling.get("factor", 1.0)) if kind in _EXTENDING else mpe
    if model.max_seq_len > limit:
        raise ConfigError(
            f"model.max_seq_len={model.max_seq_len} is invalid for {model.hf_path}: beyond its "
            f"config.json max_position_embeddings={mpe}"
            + (f" x rope_scaling factor {scaling['factor']}" if limit != mpe else "")
            + f"; must be <= {limit}"
        )


def _check_tools(chat, suite, path) -> None:
    """A task with tools needs a chat template that renders them: else the prompt would carry no
    tool schemas and the model could not know what it may call."""
    tools = list(getattr(suite, "tools", ()) or ())
    if not tools:
        return
    names = [t.get("function", t).get("name", "") for t in tools]
    with_tools = chat.prompt("x", system=suite.system, tools=tools)
    if with_tools == chat.prompt("x", system=suite.system) or not all(n in with_tools for n in names):
        raise ConfigError(
            f"model.hf_path={path!r}: its chat template ignores `tools`, so the prompt would carry "
            f"none of task.name={suite.name!r}'s tool schemas {names}; use a checkpoint whose "
            "template renders tools (tokenizer_config.json chat_template)"
        )


def load_params(policy: Policy, shardings):
    """The checkpoint's weights placed straight onto ``shardings`` (each device reads its slice)."""
    from agentjax.policy.hf import load_hf_checkpoint  # noqa: PLC0415

    c = policy.config
    over = {k: getattr(c, k) for k in OVERRIDABLE}
    _, params = load_hf_checkpoint(policy.hf_path, dtype=c.param_dtype, shardings=shardings, **over)
    return params


def save_source(policy: Policy, out: str) -> None:
    """Copies the source ``config.json`` and tokenizer files into ``out`` (for launch.export)."""
    import shutil  # noqa: PLC0415

    from agentjax.policy.hf_export import TOKENIZER_FILES  # noqa: PLC0415

    os.makedirs(out, exist_ok=True)
    for name in ("config.json", *TOKENIZER_FILES):
        src = Path(policy.hf_path) / name
        if src.is_file():
            shutil.copyfile(src, os.path.join(out, name))
