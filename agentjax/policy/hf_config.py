"""A transformers ``config.json`` as a :class:`ModelConfig` (the way back, ``config_to_hf``, and
the tensors are in ``agentjax.policy.hf``).

Architectures: Llama (Llama-3.x rope scaling), Mistral (sliding window), Qwen2 (q/k/v biases,
YaRN), Qwen3 (q/k norms), Qwen3-MoE, Gemma-2 and Gemma-3 (``Gemma3ForCausalLM``, and the text
decoder of ``Gemma3ForConditionalGeneration``). Every field the model cannot reproduce exactly is
refused with an :class:`HFImportError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from agentjax.policy.config import ConfigError, ModelConfig

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3",  # the text decoder only (4B, 12B, 27B)
}
GEMMA = ("gemma2", "gemma3")
# transformers' config-class defaults of the fields that change the model, for a config.json that
# omits them (a key present with null keeps null): absent is the class default, not "off".
CLASS_DEFAULTS = {
    "mistral": dict(sliding_window=4096),
    "gemma2": dict(
        sliding_window=4096,
        query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh",
    ),
    "gemma3": dict(
        sliding_window=4096,
        query_pre_attn_scalar=256,
        hidden_activation="gelu_pytorch_tanh",
        rope_theta=1e6,
        rope_local_base_freq=1e4,
    ),
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
    "score_chunk",
)
ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_ROPE_KEYS = {
    "rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings", "low_freq_factor",
    "high_freq_factor", "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
    "truncate", "partial_rotary_factor",
}  # fmt: skip
_LAYER_TYPES = {"full_attention", "sliding_attention"}


class HFImportError(ConfigError):
    """A checkpoint agentjax cannot import exactly; the message names the file and the field."""


def _require(cfg: Mapping, field: str, ok, allowed: str) -> None:
    if field in cfg and cfg[field] is not None and not ok(cfg[field]):
        raise HFImportError(f"config.json: {field}={cfg[field]!r} is not supported; supported: {allowed}")


def architecture(cfg: Mapping) -> str:
    """``llama`` | ``mistral`` | ``qwen2`` | ``qwen3`` | ``qwen3_moe`` | ``gemma2`` | ``gemma3``."""
    archs = cfg.get("architectures") or []
    kinds = {ARCHITECTURES.get(a) for a in archs}
    if len(archs) != 1 or None in kinds:
        raise HFImportError(
            f"config.json: architectures={archs!r} is not supported; supported: {sorted(ARCHITECTURES)}"
        )
    return kinds.pop()


def text_config(cfg: Mapping) -> dict:
    """The decoder's config: a multimodal checkpoint's ``text_config`` (with its architecture
    and tying), else ``cfg`` itself."""
    if "text_config" not in cfg:
        return dict(cfg)
    text = dict(cfg["text_config"] or {})
    tie = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))
    return {**text, "architectures": cfg["architectures"], "tie_word_embeddings": tie}


def _yarn_attention_factor(rp: Mapping, factor: float) -> float:
    mscale = lambda s, m=1.0: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
    if rp.get("attention_factor") is not None:
        return float(rp["attention_factor"])
    if rp.get("mscale") and rp.get("mscale_all_dim"):
        return mscale(factor, rp["mscale"]) / mscale(factor, rp["mscale_all_dim"])
    return mscale(factor)


def _rope_of(cfg: Mapping, field: str, rp: Mapping) -> dict:
    """ModelConfig rope fields of one HF rope dict (``field`` names it in errors)."""
    unknown = sorted(set(rp) - _ROPE_KEYS)
    if unknown:
        raise HFImportError(f"config.json: {field} has fields {unknown} agentjax does not implement")
    kind = rp.get("rope_type", rp.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise HFImportError(
            f"config.json: {field}.rope_type={kind!r} is not supported; supported: {list(ROPE_TYPES)}"
        )
    _require(rp, "partial_rotary_factor", lambda v: v == 1.0, "1.0")
    out = dict(rope_type=kind)
    if rp.get("rope_theta") is not None:
        out["rope_theta"] = float(rp["rope_theta"])
    if kind == "default":
        return out
    need = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}
    need = need.get(kind, ()) + (() if kind == "linear" else ("original_max_position_embeddings",))
    missing = [k for k in need if rp.get(k) is None and not (kind == "yarn" and k == "factor")]
    if missing:  # (YaRN without a factor: max_position_embeddings / original, as transformers)
        raise HFImportError(f"config.json: {field}.{missing[0]} is missing (rope_type={kind!r})")
    old = rp.get("original_max_position_embeddings")
    factor = rp.get("factor") or cfg.get("max_position_embeddings", 0) / old
    out.update(rope_factor=float(factor), rope_original_max_len=int(old or 0))
    if kind == "llama3":
        out.update(rope_low_freq_factor=float(rp["low_freq_factor"]))
        out.update(rope_high_freq_factor=float(rp["high_freq_factor"]))
    if kind == "yarn":
        out.update(
            rope_beta_fast=float(rp.get("beta_fast") or 32),
            rope_beta_slow=float(rp.get("beta_slow") or 1),
            rope_truncate=bool(rp.get("truncate", True)),
            rope_attention_factor=float(_yarn_attention_factor(rp, factor)),
        )
    return out


def _rope_fields(cfg: Mapping, kind: str) -> dict:
    """RoPE from ``rope_parameters`` (transformers 5; per layer type for Gemma-3) or
    ``rope_theta`` + ``rope_scaling`` (4.x; Gemma-3's ``rope_local_base_freq``)."""
    _require(cfg, "partial_rotary_factor", lambda v: v == 1.0, "1.0")
    out = {"rope_theta": float(cfg.get("rope_theta") or 10000.0)}
    for field in ("rope_scaling", "rope_parameters"):
        rp = cfg.get(field)
        if rp is None:
            continue
        if set(rp) & _LAYER_TYPES:
            if kind != "gemma3" or not set(rp) <= _LAYER_TYPES:
                raise HFImportError(f"config.json: {field} per layer type is supported for Gemma-3 only")
            local = _rope_of(cfg, f"{field}.sliding_attention", rp.get("sliding_attention") or {})
            if local["rope_type"] != "default":
                raise HFImportError(
                    f"config.json: {field}.sliding_attention.rope_type={local['rope_type']!r} is not "
                    "supported; supported: ['default'] (local layers use plain RoPE)"
                )
            out["local_rope_theta"] = local.get("rope_theta", 10000.0)
            rp = rp.get("full_attention") or {}
            field = f"{field}.full_attention"
        out.update(_rope_of(cfg, field, rp))
    if kind == "gemma3" and "local_rope_theta" not in out:
        out["local_rope_theta"] = float(cfg.get("rope_local_base_freq") or 10000.0)
    return out


def _sliding_fields(cfg: Mapping, kind: str, n_layers: int) -> dict:
    types = cfg.get("layer_types")
    if types is None and kind == "gemma2":  # 4.x configs: every other layer, from the first
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    if types is None and kind == "gemma3":
        every = int(cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or 6)
        types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]
    if types is None and cfg.get("use_sliding_window"):
        raise HFImportError(
            "config.json: use_sliding_window=true without layer_types is not supported; "
            "supported: layer_types naming each layer's attention"
        )
    if types is None:
        types = ["sliding_attention" if kind == "mistral" and cfg.get("sliding_window") else "full_attention"]
        types = types * n_layers
    if not set(types) <= _LAYER_TYPES or len(types) != n_layers:
        raise HFImportError(
            f"config.json: layer_types={types!r} is not supported; supported: "
            f"{n_layers} of {sorted(_LAYER_TYPES)}"
        )
    local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if not local:
        return {}
    window = cfg.get("sliding_window")
    if not isinstance(window, int) or window <= 0:
        raise HFImportError(f"config.json: sliding_window={window!r} must be a positive integer")
    return dict(sliding_window=window, sliding_layers=() if len(local) == n_layers else local)


def _gemma_fields(cfg: Mapping, kind: str) -> dict:
    act = cfg.get("hidden_activation") or cfg.get("hidden_act")
    if act != "gelu_pytorch_tanh":
        raise HFImportError(
            f"config.json: hidden_activation={act!r} is not supported; supported: 'gelu_pytorch_tanh'"
        )
    _require(cfg, "use_bidirectional_attention", lambda v: v is False, "false (causal attention)")
    if cfg.get("query_pre_attn_scalar") is None:
        raise HFImportError("config.json: required field 'query_pre_attn_scalar' is missing")
    return dict(
        embed_scale=True,
        norm_offset=1.0,
        mlp_act="gelu_tanh",
        post_norms=True,
        attn_scalar=float(cfg["query_pre_attn_scalar"]),
        attn_softcap=float(cfg.get("attn_logit_softcapping") or 0.0),
        final_softcap=float(cfg.get("final_logit_softcapping") or 0.0),
        qk_norm=kind == "gemma3",
    )


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
    cfg = {**CLASS_DEFAULTS.get(kind, {}), **text_config(cfg)}
    bad = sorted(set(overrides) - set(OVERRIDABLE))
    if bad:
        raise HFImportError(f"cannot override {bad}; overridable fields: {list(OVERRIDABLE)}")
    if kind not in GEMMA:
        _require(cfg, "hidden_act", lambda v: v == "silu", "'silu'")
    _require(cfg, "mlp_bias", lambda v: v is False, "false")
    _require(cfg, "pretraining_tp", lambda v: v == 1, "1")
    # Llama/Qwen3 attention_bias also adds an o_proj bias, which the model has no slot for.
    _require(cfg, "attention_bias", lambda v: v is False, "false (no attention biases)")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    seq = overrides.pop("max_seq_len", None) or cfg.get("max_position_embeddings", 2048)
    compute = overrides.pop("compute_dtype", dtype)
    try:
        heads, layers = cfg["num_attention_heads"], cfg["num_hidden_layers"]
        moe = _moe_fields(cfg) if kind == "qwen3_moe" else {"d_ff": cfg["intermediate_size"]}
        family = dict(qkv_bias=kind == "qwen2", qk_norm=kind in ("qwen3", "qwen3_moe"))
        if kind in GEMMA:
            family = _gemma_fields(cfg, kind)
        return ModelConfig(
            vocab_size=cfg["vocab_size"],
            d_model=cfg["hidden_size"],
            n_layers=layers,
            n_heads=heads,
            n_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            max_seq_len=seq,
            norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", kind in GEMMA)),
            param_dtype=dtype,
            compute_dtype=compute,
            **_rope_fields(cfg, kind),
            **_sliding_fields(cfg, kind, layers),
            **family,
            **moe,
            **overrides,
        )
    except KeyError as e:
        raise HFImportError(f"config.json: required field {e.args[0]!r} is missing") from None
    except ConfigError as e:
        if isinstance(e, HFImportError):
            raise
        raise HFImportError(f"config.json: {e}") from None
