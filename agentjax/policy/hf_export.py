"""Export agentjax parameters as a HF directory that transformers loads (the inverse of import).

    export_hf(params, config, source_config, out_dir, tokenizer_dir=src)

writes ``config.json`` (the source checkpoint's, with our shapes and parameter dtype),
``model.safetensors`` (or shards with an index) in torch's ``Linear.weight`` [out, in] layout,
and copies the tokenizer files (``tokenizer.json``, ``tokenizer_config.json``, a chat template,
``generation_config.json``, special-token maps) from ``tokenizer_dir``. Export then import is
bitwise (:func:`agentjax.policy.hf.load_hf_checkpoint` reads exactly these tensors).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np

from agentjax.policy import hf_tensors
from agentjax.policy.config import ModelConfig
from agentjax.policy.hf import architecture, config_to_hf, tensor_names

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
)


def hf_tensors_of(params, config: ModelConfig) -> dict[str, np.ndarray]:
    """Every parameter as HF-named host arrays (the checkpoint's own dtype)."""
    names = tensor_names(config)
    out: dict[str, np.ndarray] = {}
    leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], bool)
    flat_names = jax.tree.leaves(names, is_leaf=leaf)
    flat_params = jax.tree.leaves({k: params[k] for k in names})
    for (src, transpose), value in zip(flat_names, flat_params, strict=True):
        hf_tensors.flatten(src, np.asarray(jax.device_get(value)), transpose, out)
    return out


def export_hf(
    params,
    config: ModelConfig,
    source_config: Mapping,
    out: str | os.PathLike,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    max_shard_bytes: int = 0,
) -> Path:
    """Writes the HF directory ``out`` (created; must not hold a checkpoint already)."""
    out = Path(out)
    architecture(source_config)  # a supported architecture, else HFImportError
    if (out / "config.json").exists():
        raise FileExistsError(f"{out} already holds a checkpoint (config.json); use a new --out")
    out.mkdir(parents=True, exist_ok=True)
    hf_tensors.write(out, hf_tensors_of(params, config), max_shard_bytes=max_shard_bytes)
    cfg = config_to_hf(config, source_config)
    if tokenizer_dir is not None:
        for name in TOKENIZER_FILES:
            src = Path(tokenizer_dir) / name
            if src.is_file():
                shutil.copyfile(src, out / name)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    return out
