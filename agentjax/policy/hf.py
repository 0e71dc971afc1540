"""Import a local Hugging Face checkpoint (Llama, Qwen2, Qwen3, Qwen3-MoE) into agentjax parameters.

    config, params = load_hf_checkpoint("/path/to/Qwen3-0.6B", max_seq_len=4096, shardings=sh)

``config.json`` maps to :class:`ModelConfig` (:func:`config_from_hf`; :func:`config_to_hf` is the
way back, for export). Tensors are read with the ``safetensors`` library (single file or sharded
with ``model.safetensors.index.json``), every name, shape and dtype checked against the config
before any data is read, then transposed from torch's ``Linear.weight`` [out, in] to the ``x @ W``
layout [in, out] and stacked over layers (and experts). Each parameter is built with
``jax.make_array_from_callback``: a device reads only its own shard's slice of the file (no full
host copy per device). Anything the model cannot reproduce exactly (another architecture, RoPE
scaling, sliding windows, biases we have no slot for, unnormalised top-k routing) is refused with
an :class:`HFImportError` naming the file and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import jax

from agentjax.policy import hf_tensors
from agentjax.policy.config import ConfigError, ModelConfig
from agentjax.policy.model import param_spec

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
# ModelConfig fields a caller may set; everything else comes from config.json.
OVERRIDABLE = (
    "max_seq_len",
    "compute_dtype",
    "head_dtype",
    "exact_tile",
    "layer_unroll",
    "remat",
    "activation_rows",
)


class HFImportError(ConfigError):
    """A checkpoint agentjax cannot import exactly; the message names the file and the field."""


def _require(cfg: Mapping, field: str, ok, allowed: str) -> None:
    if field in cfg and cfg[field] is not None and not ok(cfg[field]):
        raise HFImportError(f"config.json: {field}={cfg[field]!r} is not supported; supported: {allowed}")


def _rope_theta(cfg: Mapping) -> float:
    """RoPE base from ``rope_parameters`` (transformers 5) or ``rope_theta`` (4.x); no scaling."""
    theta = cfg.get("rope_theta")
    for field in ("rope_parameters", "rope_scaling"):
        rp = cfg.get(field)
        if rp is None:
            continue
        kind = rp.get("rope_type", rp.get("type", "default"))
        if kind != "default":
            raise HFImportError(
                f"config.json: {field}.rope_type={kind!r} is not supported; "
                f"supported: ['default'] (plain RoPE, no scaling)"
            )
        _require(rp, "partial_rotary_factor", lambda v: v == 1.0, "1.0")
        theta = rp.get("rope_theta", theta)
    _require(cfg, "partial_rotary_factor", lambda v: v == 1.0, "1.0")
    return float(10000.0 if theta is None else theta)


def architecture(cfg: Mapping) -> str:
    """``llama`` | ``qwen2`` | ``qwen3`` | ``qwen3_moe`` from ``config.json``'s architectures."""
    archs = cfg.get("architectures") or []
    kinds = {ARCHITECTURES.get(a) for a in archs}
    if len(archs) != 1 or None in kinds:
        raise HFImportError(
            f"config.json: architectures={archs!r} is not supported; supported: {sorted(ARCHITECTURES)}"
        )
    return kinds.pop()


def _moe_fields(cfg: Mapping) -> dict:
    _require(cfg, "norm_topk_prob", lambda v: v is True, "true (top-k gates renormalised)")
    _require(cfg, "mlp_only_layers", lambda v: not v, "[] (every layer a mixture of experts)")
    _require(cfg, "decoder_sparse_step", lambda v: v == 1, "1")
    if cfg.get("norm_topk_prob") is not True:
        raise HFImportError(
            "config.json: norm_topk_prob must be true (the model renormalises "
            "the chosen experts' gates); it is missing or false"
        )
    experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    if not experts:
        raise HFImportError("config.json: required field 'num_experts' is missing")
    return dict(
        n_experts=int(experts),
        n_experts_per_token=int(cfg["num_experts_per_tok"]),
        d_ff=int(cfg["moe_intermediate_size"]),
    )


def config_from_hf(cfg: Mapping, *, dtype: str = "float32", **overrides) -> ModelConfig:
    """Maps a transformers ``config.json`` dict to :class:`ModelConfig` (or raises HFImportError).

    ``dtype`` is the parameter and compute dtype; ``overrides`` may set :data:`OVERRIDABLE`
    (``max_seq_len`` comes from the run, not from ``max_position_embeddings``).
    """
    kind = architecture(cfg)
    bad = sorted(set(overrides) - set(OVERRIDABLE))
    if bad:
        raise HFImportError(f"cannot override {bad}; overridable fields: {list(OVERRIDABLE)}")
    _require(cfg, "hidden_act", lambda v: v == "silu", "'silu'")
    _require(cfg, "mlp_bias", lambda v: v is False, "false")
    _require(cfg, "pretraining_tp", lambda v: v == 1, "1")
    # Llama/Qwen3 attention_bias also adds an o_proj bias, which the model has no slot for.
    _require(cfg, "attention_bias", lambda v: v is False, "false (no attention biases)")
    _require(cfg, "use_sliding_window", lambda v: v is False, "false (full attention only)")
    _require(cfg, "layer_types", lambda v: set(v) <= {"full_attention"}, "['full_attention', ...]")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    seq = overrides.pop("max_seq_len", None) or cfg.get("max_position_embeddings", 2048)
    compute = overrides.pop("compute_dtype", dtype)
    try:
        heads = cfg["num_attention_heads"]
        moe = _moe_fields(cfg) if kind == "qwen3_moe" else {"d_ff": cfg["intermediate_size"]}
        return ModelConfig(
            vocab_size=cfg["vocab_size"],
            d_model=cfg["hidden_size"],
            n_layers=cfg["num_hidden_layers"],
            n_heads=heads,
            n_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            max_seq_len=seq,
            rope_theta=_rope_theta(cfg),
            norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=kind == "qwen2",
            qk_norm=kind in ("qwen3", "qwen3_moe"),
            param_dtype=dtype,
            compute_dtype=compute,
            **moe,
            **overrides,
        )
    except KeyError as e:
        raise HFImportError(f"config.json: required field {e.args[0]!r} is missing") from None
    except ConfigError as e:
        if isinstance(e, HFImportError):
            raise
        raise HFImportError(f"config.json: {e}") from None


def config_to_hf(config: ModelConfig, source: Mapping) -> dict:
    """``config.json`` for exported weights: the source checkpoint's, with our shapes and dtype."""
    out = dict(source)
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
        names["lm_head"] = ("lm_head.weight", True)
    return names


def load_hf_checkpoint(
    path: str | os.PathLike, *, dtype: str = "float32", shardings=None, **overrides
) -> tuple[ModelConfig, dict]:
    """Loads a local Llama / Qwen2 / Qwen3 / Qwen3-MoE ``*ForCausalLM`` directory.

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
    prefix = "model." if "model.embed_tokens.weight" in files.names else ""
    names = tensor_names(config, prefix)
    spec = param_spec(config)
    leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], bool)
    pairs = jax.tree.map(lambda src, sp: (src, sp[0]), names, {k: spec[k] for k in names}, is_leaf=leaf)
    pair_leaf = lambda x: isinstance(x, tuple) and len(x) == 2 and leaf(x[0])
    used: set[str] = set()
    jax.tree.map(lambda p: used.update(files.check(*p[0], p[1])), pairs, is_leaf=pair_leaf)
    ignorable = {"lm_head.weight"} if config.tie_embeddings else set()
    extra = sorted(
        n for n in files.names - used - ignorable if not n.endswith("rotary_emb.inv_freq")
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
