"""The policy a run trains: the built-in model with the task's word tokenizer, or a HF directory.

``model.hf_path=DIR`` (a local HF checkpoint: ``config.json``, ``*.safetensors``,
``tokenizer.json``, ``tokenizer_config.json`` with a chat template) gives the architecture, the
weights, the tokenizer and the chat template; the run config gives only :data:`HF_FIELDS`
(dtype, ``max_seq_len``, kernel choices) and ``model.tool_format`` (how the model writes tool
calls: ``hermes`` or ``plain``). Without it, the model is built from the ``model`` fields and the
vocabulary the task names (minirepo's word tokenizer).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from agentjax.envs import toolcalls
from agentjax.policy.config import ConfigError, ModelConfig
from agentjax.policy.hf import OVERRIDABLE

HF_FIELDS = ("hf_path", "tool_format", "param_dtype", *OVERRIDABLE)
SOURCE_DIR = "hf_source"  # <workdir>/hf_source: the source config.json and tokenizer files


@dataclasses.dataclass(frozen=True)
class Policy:
    config: ModelConfig
    tokenizer: Any
    codec: Any
    hf_path: str = ""  # "" = random init of the built-in model


def check(model: dict) -> None:
    """Field-level checks of the ``model`` section (the checkpoint itself is read in :func:`build`)."""
    if "vocab_size" in model:
        raise ConfigError("model.vocab_size is set by the tokenizer; remove it from the config")
    path = model.get("hf_path") or ""
    if not path:
        extra = sorted({"hf_path", "tool_format"} & set(model))
        rest = {k: v for k, v in model.items() if k not in extra}
        ModelConfig.from_dict({**rest, "vocab_size": 8})  # field names and values checked now
        return
    bad = sorted(set(model) - set(HF_FIELDS))
    if bad:
        raise ConfigError(
            f"model fields {[f'model.{b}' for b in bad]} come from {path}/config.json "
            f"with model.hf_path; allowed here: {sorted(HF_FIELDS)}"
        )
    if not Path(path).is_dir():
        raise ConfigError(f"model.hf_path={path!r} is not a directory (a local HF checkpoint)")
    fmt = model.get("tool_format", "hermes")
    if fmt not in toolcalls.FORMATS:
        raise ConfigError(f"model.tool_format={fmt!r} is invalid; allowed values: {list(toolcalls.FORMATS)}")


def build(model: dict, suite) -> Policy:
    """Config, tokenizer and codec; every file of a HF directory is checked here, before training."""
    from agentjax.policy.codec import Codec  # noqa: PLC0415
    from agentjax.policy.tokenizer import WordTokenizer  # noqa: PLC0415

    path = model.get("hf_path") or ""
    if not path:
        words = suite.vocabulary()
        if words is None:
            raise ConfigError(
                f"task.name={suite.name!r} needs a real tokenizer: set model.hf_path "
                "to a HF directory (e.g. python -m launch.make_tiny_hf)"
            )
        tok = WordTokenizer(words)
        rest = {k: v for k, v in model.items() if k not in ("hf_path", "tool_format")}
        return Policy(ModelConfig.from_dict({**rest, "vocab_size": tok.vocab_size}), tok, Codec(tok))
    from agentjax.policy import hf_tensors  # noqa: PLC0415
    from agentjax.policy.chat import load_chat_tokenizer  # noqa: PLC0415
    from agentjax.policy.hf import HFImportError, load_hf_config, tensor_names  # noqa: PLC0415
    from agentjax.policy.model import param_spec  # noqa: PLC0415
    from agentjax.sampling.chat_codec import ChatCodec  # noqa: PLC0415

    over = {k: v for k, v in model.items() if k in OVERRIDABLE}
    config = load_hf_config(path, dtype=model.get("param_dtype", "float32"), **over)
    tok, chat = load_chat_tokenizer(path)
    if tok.vocab_size > config.vocab_size:
        raise HFImportError(
            f"{path}/tokenizer.json has {tok.vocab_size} tokens but config.json's "
            f"vocab_size is {config.vocab_size}"
        )
    files = hf_tensors.open_checkpoint(Path(path), HFImportError)  # shapes checked before training
    prefix = "model." if "model.embed_tokens.weight" in files.names else ""
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
        tool_format=model.get("tool_format", "hermes"),
    )
    return Policy(config, tok, codec, str(path))


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
