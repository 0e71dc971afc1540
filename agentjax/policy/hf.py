"""Import a local Hugging Face checkpoint (Llama, Qwen2, Qwen3) into agentjax parameters.

    config, params = load_hf_checkpoint("/path/to/Qwen2.5-0.5B")  # config.json + *.safetensors

Tensors are read straight from the ``.safetensors`` files (memory-mapped, no torch), transposed
from torch's ``Linear.weight`` [out, in] to the ``x @ W`` layout [in, out] and stacked over
layers. Anything the model cannot reproduce exactly (another architecture, RoPE scaling, sliding
windows, biases we have no slot for) is refused with an :class:`HFImportError` naming the field.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Mapping
from pathlib import Path

import jax
import ml_dtypes
import numpy as np

from agentjax.policy.config import ConfigError, ModelConfig
from agentjax.policy.model import param_spec

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3"}
# ModelConfig fields a caller may set; everything else comes from config.json.
OVERRIDABLE = ("max_seq_len", "compute_dtype", "head_dtype", "exact_tile", "layer_unroll")
_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
              "BOOL": np.bool_}
# agentjax layer name -> (HF module path inside a layer, transpose?)
_LAYER_MAP = {
    "attn_norm": ("input_layernorm.weight", False),
    "mlp_norm": ("post_attention_layernorm.weight", False),
    "wq": ("self_attn.q_proj.weight", True),
    "wk": ("self_attn.k_proj.weight", True),
    "wv": ("self_attn.v_proj.weight", True),
    "wo": ("self_attn.o_proj.weight", True),
    "bq": ("self_attn.q_proj.bias", False),
    "bk": ("self_attn.k_proj.bias", False),
    "bv": ("self_attn.v_proj.bias", False),
    "q_norm": ("self_attn.q_norm.weight", False),
    "k_norm": ("self_attn.k_norm.weight", False),
    "w_gate": ("mlp.gate_proj.weight", True),
    "w_up": ("mlp.up_proj.weight", True),
    "w_down": ("mlp.down_proj.weight", True),
}


class HFImportError(ConfigError):
    """A checkpoint agentjax cannot import exactly; the message names the field or tensor."""


def _require(cfg: Mapping, field: str, ok, allowed: str) -> None:
    if field in cfg and cfg[field] is not None and not ok(cfg[field]):
        raise HFImportError(f"config.json: {field}={cfg[field]!r} is not supported; "
                            f"supported: {allowed}")


def _rope_theta(cfg: Mapping) -> float:
    """RoPE base from ``rope_parameters`` (transformers 5) or ``rope_theta`` (4.x); no scaling."""
    theta = cfg.get("rope_theta")
    for field in ("rope_parameters", "rope_scaling"):
        rp = cfg.get(field)
        if rp is None:
            continue
        kind = rp.get("rope_type", rp.get("type", "default"))
        if kind != "default":
            raise HFImportError(f"config.json: {field}.rope_type={kind!r} is not supported; "
                                f"supported: ['default'] (plain RoPE, no scaling)")
        _require(rp, "partial_rotary_factor", lambda v: v == 1.0, "1.0")
        theta = rp.get("rope_theta", theta)
    _require(cfg, "partial_rotary_factor", lambda v: v == 1.0, "1.0")
    return float(10000.0 if theta is None else theta)


def config_from_hf(cfg: Mapping, *, dtype: str = "float32", **overrides) -> ModelConfig:
    """Maps a transformers ``config.json`` dict to :class:`ModelConfig` (or raises HFImportError).

    ``dtype`` is the parameter and compute dtype; ``overrides`` may set :data:`OVERRIDABLE`.
    """
    archs = cfg.get("architectures") or []
    kinds = {ARCHITECTURES.get(a) for a in archs}
    if len(archs) != 1 or None in kinds:
        raise HFImportError(f"config.json: architectures={archs!r} is not supported; "
                            f"supported: {sorted(ARCHITECTURES)}")
    kind = kinds.pop()
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
    heads = cfg.get("num_attention_heads")
    seq = overrides.pop("max_seq_len", None) or cfg.get("max_position_embeddings", 2048)
    compute = overrides.pop("compute_dtype", dtype)
    try:
        return ModelConfig(
            vocab_size=cfg["vocab_size"], d_model=cfg["hidden_size"],
            n_layers=cfg["num_hidden_layers"], n_heads=cfg["num_attention_heads"],
            n_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
            d_ff=cfg["intermediate_size"],
            max_seq_len=seq,
            rope_theta=_rope_theta(cfg), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=kind == "qwen2", qk_norm=kind == "qwen3",
            param_dtype=dtype, compute_dtype=compute, **overrides,
        )
    except KeyError as e:
        raise HFImportError(f"config.json: required field {e.args[0]!r} is missing") from None


def load_hf_config(path: str | os.PathLike, *, dtype: str = "float32", **overrides) -> ModelConfig:
    """Reads ``<path>/config.json`` into a :class:`ModelConfig` without touching the weights."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise HFImportError(f"{file} not found: a HF checkpoint directory needs config.json")
    return config_from_hf(json.loads(file.read_text()), dtype=dtype, **overrides)


def _read_safetensors(file: Path) -> dict[str, np.ndarray]:
    """Zero-copy views of every tensor in one ``.safetensors`` file (numpy; bfloat16 included).

    Format: 8-byte little-endian header length, a JSON header of ``{name: {dtype, shape,
    data_offsets}}``, then the raw little-endian data. Read by hand because
    ``safetensors.numpy`` cannot represent bfloat16, the usual dtype of released checkpoints.
    """
    with open(file, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise HFImportError(f"{file}: tensor {name!r} has dtype {info['dtype']!r}; "
                                f"supported: {sorted(_ST_DTYPES)}")
        begin, end = info["data_offsets"]
        arr = np.frombuffer(buf, _ST_DTYPES[info["dtype"]], (end - begin) // np.dtype(
            _ST_DTYPES[info["dtype"]]).itemsize, 8 + n + begin)
        out[name] = arr.reshape(info["shape"])
    return out


def _read_tensors(path: Path) -> dict[str, np.ndarray]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise HFImportError(f"{path}: no *.safetensors files (torch .bin checkpoints are not read)")
    tensors = {}
    for name in files:
        if not (path / name).is_file():
            raise HFImportError(f"{path / name} is listed in {index.name} but missing")
        tensors.update(_read_safetensors(path / name))
    return tensors


def _hf_names(config: ModelConfig, prefix: str) -> dict:
    """Per agentjax parameter, the HF tensor names (one per layer for stacked parameters)."""
    spec = param_spec(config)
    layers = {k: [f"{prefix}layers.{i}.{_LAYER_MAP[k][0]}" for i in range(config.n_layers)]
              for k in spec["layers"]}
    names = {"embed": f"{prefix}embed_tokens.weight", "layers": layers,
             "final_norm": f"{prefix}norm.weight"}
    if "lm_head" in spec:
        names["lm_head"] = "lm_head.weight"
    return names


def load_hf_checkpoint(path: str | os.PathLike, *, dtype: str = "float32", shardings=None,
                       **overrides) -> tuple[ModelConfig, dict]:
    """Loads a local ``LlamaForCausalLM``/``Qwen2ForCausalLM``/``Qwen3ForCausalLM`` directory.

    Args:
      path: directory with ``config.json`` and ``*.safetensors`` (single file or sharded with
        ``model.safetensors.index.json``).
      dtype: parameter (and default compute) dtype: "float32", "bfloat16" or "float16".
      shardings: optional pytree of ``jax.sharding.Sharding`` matching the params (e.g.
        ``param_shardings(abstract_params(load_hf_config(path)), mesh, rules)``); each array is
        then placed straight from host memory onto its shards.
      **overrides: ModelConfig fields in :data:`OVERRIDABLE` (e.g. ``max_seq_len``).
    Returns:
      ``(config, params)`` with params in the layout of :func:`agentjax.policy.init_params`.
    """
    path = Path(path)
    config = load_hf_config(path, dtype=dtype, **overrides)
    tensors = _read_tensors(path)
    prefix = "model." if "model.embed_tokens.weight" in tensors else ""
    names = _hf_names(config, prefix)
    shapes = jax.tree.map(lambda leaf: leaf[0], param_spec(config),
                          is_leaf=lambda x: isinstance(x, tuple) and isinstance(x[0], tuple))
    used = set()

    def get(name, transpose, want):
        if name not in tensors:
            raise HFImportError(f"{path}: tensor {name!r} is missing from the checkpoint")
        used.add(name)
        x = tensors[name].T if transpose else tensors[name]
        if x.shape != want:
            raise HFImportError(f"{path}: tensor {name!r} has shape {tensors[name].shape}; "
                                f"expected {want[::-1] if transpose else want} from config.json")
        return x.astype(config.pdtype)

    params = {k: get(names[k], k == "lm_head", shapes[k]) for k in names if k != "layers"}
    params["layers"] = {
        k: np.stack([get(n, _LAYER_MAP[k][1], shapes["layers"][k][1:]) for n in hf_names])
        for k, hf_names in names["layers"].items()
    }
    ignorable = {"lm_head.weight"} if config.tie_embeddings else set()
    extra = sorted(n for n in set(tensors) - used - ignorable
                   if not n.endswith("rotary_emb.inv_freq"))  # a buffer old checkpoints saved
    if extra:
        raise HFImportError(f"{path}: tensors {extra[:5]} ({len(extra)} in all) have no place in "
                            f"the agentjax model; the checkpoint uses features it does not support")
    if shardings is None:
        return config, jax.tree.map(jax.numpy.asarray, params)
    return config, jax.tree.map(jax.device_put, params, shardings)
