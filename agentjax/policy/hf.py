"""Import a local Hugging Face checkpoint (Llama, Mistral, Qwen2/3, Qwen3-MoE, Gemma-2/3) into agentjax.

    config, params = load_hf_checkpoint("/path/to/Qwen3-0.6B", max_seq_len=4096, shardings=sh)

``config.json`` maps to :class:`ModelConfig` (:func:`config_from_hf` in ``hf_config.py``;
:func:`config_to_hf` is the way back, for export). Tensors are read with the ``safetensors``
library (single file or sharded with ``model.safetensors.index.json``), every name, shape and
dtype checked against the config before any data is read, then transposed from torch's
``Linear.weight`` [out, in] to the ``x @ W`` layout [in, out] and stacked over layers (and
experts). Each parameter is built with ``jax.make_array_from_callback``: a device reads only its
own shard's slice of the file (no full host copy per device). Anything the model cannot
reproduce exactly (another architecture, another RoPE scaling, biases we have no slot for,
unnormalised top-k routing) is refused with an :class:`HFImportError` naming the file and field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import jax

from agentjax.policy import hf_tensors
from agentjax.policy.config import ModelConfig
from agentjax.policy.hf_config import (
    ARCHITECTURES,
    OVERRIDABLE,
    HFImportError,
    architecture,
    config_from_hf,
    text_config,
)
from agentjax.policy.model import param_spec

__all__ = [
    "ARCHITECTURES",
    "OVERRIDABLE",
    "HFImportError",
    "architecture",
    "config_from_hf",
    "config_to_hf",
    "load_hf_checkpoint",
    "load_hf_config",
    "read_config_json",
    "tensor_names",
    "tensor_prefix",
]


def config_to_hf(config: ModelConfig, source: Mapping) -> dict:
    """``config.json`` for exported weights: the source checkpoint's, with our shapes and dtype
    (a multimodal Gemma-3's text decoder is written as a ``Gemma3ForCausalLM``)."""
    out = dict(source)
    if "text_config" in source:
        out = {**text_config(source), "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text"}
    out.update(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        head_dim=config.head_dim,
        tie_word_embeddings=config.tie_embeddings,
        rms_norm_eps=config.norm_eps,
        dtype=config.param_dtype,
    )
    out.pop("torch_dtype", None)
    if config.is_moe:
        out.update(
            num_experts=config.n_experts,
            num_experts_per_tok=config.n_experts_per_token,
            moe_intermediate_size=config.d_ff,
        )
    else:
        out["intermediate_size"] = config.d_ff
    return out


def read_config_json(path: str | os.PathLike) -> dict:
    file = Path(path) / "config.json"
    if not file.is_file():
        raise HFImportError(f"{file} not found: a HF checkpoint directory needs config.json")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise HFImportError(f"{file}: not valid JSON ({e})") from None


def load_hf_config(path: str | os.PathLike, *, dtype: str = "float32", **overrides) -> ModelConfig:
    """Reads ``<path>/config.json`` into a :class:`ModelConfig` without touching the weights."""
    try:
        return config_from_hf(read_config_json(path), dtype=dtype, **overrides)
    except HFImportError as e:
        msg = str(e)
        raise HFImportError(
            msg.replace("config.json:", f"{Path(path) / 'config.json'}:", 1)
            if msg.startswith("config.json:")
            else msg
        ) from None


# Where the decoder's tensors sit: text models, then multimodal Gemma-3 (hub layout, and the one
# transformers 5 uses in memory); the vision tower of a multimodal checkpoint is not read.
PREFIXES = ("model.", "", "language_model.model.", "model.language_model.")
VISION = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def tensor_prefix(names) -> str:
    """The prefix of the decoder's tensor names in a checkpoint (``model.`` for most)."""
    return next((p for p in PREFIXES if f"{p}embed_tokens.weight" in names), "")


def _lm_head(prefix: str) -> str:
    return "language_model.lm_head.weight" if prefix.startswith("language_model.") else "lm_head.weight"


def tensor_names(config: ModelConfig, prefix: str = "model.") -> dict:
    """Per agentjax parameter, ``(names, transpose)``: ``names`` nests lists over the stacked axes
    (layers, then experts for MoE weights) down to one HF tensor name."""
    spec = param_spec(config)
    n = range(config.n_layers)
    lay = lambda hf: [f"{prefix}layers.{i}.{hf}" for i in n]
    experts = lambda hf: [
        [f"{prefix}layers.{i}.mlp.experts.{e}.{hf}" for e in range(config.n_experts)] for i in n
    ]
    table = {
        "attn_norm": (lay("input_layernorm.weight"), False),
        "mlp_norm": (lay("post_attention_layernorm.weight"), False),
        # Gemma-2/3: post_attention_layernorm is the norm after attention
        "post_attn_norm": (lay("post_attention_layernorm.weight"), False),
        "post_mlp_norm": (lay("post_feedforward_layernorm.weight"), False),
        "wq": (lay("self_attn.q_proj.weight"), True),
        "wk": (lay("self_attn.k_proj.weight"), True),
        "wv": (lay("self_attn.v_proj.weight"), True),
        "wo": (lay("self_attn.o_proj.weight"), True),
        "bq": (lay("self_attn.q_proj.bias"), False),
        "bk": (lay("self_attn.k_proj.bias"), False),
        "bv": (lay("self_attn.v_proj.bias"), False),
        "q_norm": (lay("self_attn.q_norm.weight"), False),
        "k_norm": (lay("self_attn.k_norm.weight"), False),
    }
    if config.post_norms:
        table["mlp_norm"] = (lay("pre_feedforward_layernorm.weight"), False)
    if config.is_moe:
        table.update(
            router=(lay("mlp.gate.weight"), True),
            w_gate=(experts("gate_proj.weight"), True),
            w_up=(experts("up_proj.weight"), True),
            w_down=(experts("down_proj.weight"), True),
        )
    else:
        table.update(
            w_gate=(lay("mlp.gate_proj.weight"), True),
            w_up=(lay("mlp.up_proj.weight"), True),
            w_down=(lay("mlp.down_proj.weight"), True),
        )
    unknown = sorted(set(spec) - {"embed", "layers", "final_norm", "lm_head"})
    if unknown:
        raise HFImportError(f"parameters {unknown} (value heads, critics) have no HF counterpart")
    names = {
        "embed": (f"{prefix}embed_tokens.weight", False),
        "layers": {k: table[k] for k in spec["layers"]},
        "final_norm": (f"{prefix}norm.weight", False),
    }
    if "lm_head" in spec:
        names["lm_head"] = (_lm_head(prefix), True)
    return names


def load_hf_checkpoint(
    path: str | os.PathLike, *, dtype: str = "float32", shardings=None, **overrides
) -> tuple[ModelConfig, dict]:
    """Loads a local ``*ForCausalLM`` directory of :data:`ARCHITECTURES`.

    Args:
      path: directory with ``config.json`` and ``*.safetensors`` (single file or sharded with
        ``model.safetensors.index.json``).
      dtype: parameter (and default compute) dtype: "float32", "bfloat16" or "float16".
      shardings: optional pytree of ``jax.sharding.Sharding`` matching the params (e.g.
        ``param_shardings(abstract_params(load_hf_config(path)), mesh, rules)``); each device
        then reads only its own shard from the files. None: every array on the first device.
      **overrides: ModelConfig fields in :data:`OVERRIDABLE` (e.g. ``max_seq_len``).
    Returns:
      ``(config, params)`` with params in the layout of :func:`agentjax.policy.init_params`.
    """
    path = Path(path)
    config = load_hf_config(path, dtype=dtype, **overrides)
    files = hf_tensors.open_checkpoint(path, HFImportError)
    prefix = tensor_prefix(files.names)
    names = tensor_names(config, prefix)
    spec = param_spec(config)
    leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], bool)
    pairs = jax.tree.map(lambda src, sp: (src, sp[0]), names, {k: spec[k] for k in names}, is_leaf=leaf)
    pair_leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and leaf(x[0])
    used: set[str] = set()
    jax.tree.map(lambda p: used.update(files.check(*p[0], p[1])), pairs, is_leaf=pair_leaf)
    ignorable = {_lm_head(prefix)} if config.tie_embeddings else set()
    multimodal = prefix in PREFIXES[2:]
    extra = sorted(
        n
        for n in files.names - used - ignorable
        if not n.endswith("rotary_emb.inv_freq") and not (multimodal and n.startswith(VISION))
    )  # a buffer old checkpoints saved
    if extra:
        raise HFImportError(
            f"{path}: tensors {extra[:5]} ({len(extra)} in all) have no place in "
            f"the agentjax model; the checkpoint uses features it does not support"
        )
    if shardings is None:
        one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        shardings = jax.tree.map(lambda _: one, pairs, is_leaf=pair_leaf)
    params = jax.tree.map(
        lambda p, s: files.array(*p[0], p[1], s, config.pdtype), pairs, shardings, is_leaf=pair_leaf
    )
    return config, params
