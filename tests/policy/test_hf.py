"""HF import: logits of tiny random transformers models match agentjax's forward (float32)."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import abstract_params, forward
from agentjax.policy.hf import HFImportError, config_from_hf, load_hf_checkpoint, load_hf_config
from agentjax.sharding import ShardingRules, make_mesh, param_shardings

torch = pytest.importorskip("torch", reason="torch (extra 'hf') is needed for reference models")
transformers = pytest.importorskip("transformers", reason="transformers (extra 'hf') is needed")

BASE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    rope_theta=500.0,
)
CASES = {
    # GQA 4:2, untied head, non-default theta and eps
    "llama_untied": ("Llama", dict(tie_word_embeddings=False)),
    "llama_tied_mha": ("Llama", dict(tie_word_embeddings=True, num_key_value_heads=4)),
    "qwen2_bias_tied": ("Qwen2", dict(tie_word_embeddings=True)),
    # head_dim 16 != hidden/heads = 8; q/k norms; GQA 4:1
    "qwen3_headdim": ("Qwen3", dict(tie_word_embeddings=False, head_dim=16, num_key_value_heads=1)),
}


def _tiny_hf(family: str, overrides: dict, seed: int = 0):
    """A random model whose every weight (norms and biases included) is far from its init value."""
    cfg_cls = getattr(transformers, f"{family}Config")
    model_cls = getattr(transformers, f"{family}ForCausalLM")
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**{**BASE, **overrides}, attn_implementation="eager")).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    return model


def _hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case, tmp_path):
    family, overrides = CASES[case]
    model = _tiny_hf(family, overrides)
    model.save_pretrained(tmp_path)
    config, params = load_hf_checkpoint(tmp_path)
    assert config.tie_embeddings == overrides["tie_word_embeddings"]
    assert ("lm_head" in params) != config.tie_embeddings
    assert config.rope_theta == 500.0 and config.norm_eps == 1e-5
    tokens = np.random.default_rng(0).integers(0, 64, (2, 12))
    positions = jnp.broadcast_to(jnp.arange(12), (2, 12))
    logits, _, _ = forward(params, jnp.asarray(tokens), positions, config=config)
    ref = _hf_logits(model, tokens)
    assert logits.dtype == jnp.float32
    assert np.max(np.abs(np.asarray(logits) - ref)) <= 1e-4


def test_sharded_checkpoint_bf16_and_shardings(tmp_path):
    """A multi-file bf16 checkpoint with an index, placed straight onto a 4x2 mesh."""
    model = _tiny_hf("Qwen3", dict(tie_word_embeddings=False, head_dim=16)).to(torch.bfloat16)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    config = load_hf_config(tmp_path, max_seq_len=16)
    assert config.max_seq_len == 16
    mesh = make_mesh({"fsdp": 4, "tensor": 2})
    shardings = param_shardings(abstract_params(config), mesh, ShardingRules())
    config, params = load_hf_checkpoint(tmp_path, max_seq_len=16, shardings=shardings)
    assert params["layers"]["wq"].sharding == shardings["layers"]["wq"]
    assert params["layers"]["wq"].dtype == jnp.float32
    # bf16 -> float32 is exact: every value equals torch's, transposed to x @ W.
    want = model.model.layers[1].self_attn.q_proj.weight.float().detach().numpy().T
    np.testing.assert_array_equal(np.asarray(params["layers"]["wq"][1]), want)
    np.testing.assert_array_equal(
        np.asarray(params["layers"]["k_norm"][0]),
        model.model.layers[0].self_attn.k_norm.weight.float().detach().numpy(),
    )
    _, bf = load_hf_checkpoint(tmp_path, dtype="bfloat16")
    assert bf["embed"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(bf["embed"], np.float32), model.model.embed_tokens.weight.float().detach().numpy()
    )


def _cfg(**kw):
    return {**BASE, "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", **kw}


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(architectures=["PhiForCausalLM"]), "architectures"),
        (dict(architectures=["GemmaForCausalLM"]), "architectures"),
        (dict(rope_scaling={"rope_type": "dynamic", "factor": 8.0}), "rope_scaling.rope_type"),
        (dict(rope_parameters={"rope_type": "longrope", "rope_theta": 1e4}), "rope_parameters.rope_type"),
        (dict(rope_parameters={"rope_type": "default", "mrope_section": [2]}), "rope_parameters"),
        (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "rope_scaling.low_freq_factor"),
        (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0}), "original_max_position_embeddings"),
        (dict(use_sliding_window=True), "use_sliding_window"),
        (dict(layer_types=["full_attention", "chunked_attention"]), "layer_types"),
        (dict(layer_types=["full_attention", "sliding_attention"]), "sliding_window"),
        (dict(attention_bias=True), "attention_bias"),
        (dict(hidden_act="gelu"), "hidden_act"),
        (dict(mlp_bias=True), "mlp_bias"),
    ],
)
def test_unsupported_config_names_field(kw, field):
    with pytest.raises(HFImportError, match=field.replace(".", r"\.")) as e:
        config_from_hf(_cfg(**kw))
    assert "\n" not in str(e.value)


def test_config_mapping_by_hand():
    c = config_from_hf(
        _cfg(
            architectures=["Qwen2ForCausalLM"],
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        ),
        compute_dtype="bfloat16",
    )
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff) == (4, 2, 8, 48)
    assert c.qkv_bias and not c.qk_norm and c.tie_embeddings and c.rope_theta == 1e6
    assert c.param_dtype == "float32" and c.compute_dtype == "bfloat16"
    # transformers 4.x layout: top-level rope_theta, rope_scaling null; head_dim from hidden/heads
    c4 = config_from_hf(_cfg(rope_scaling=None, head_dim=None, num_key_value_heads=None))
    assert (c4.rope_theta, c4.head_dim, c4.n_kv_heads, c4.norm_eps) == (500.0, 8, 4, 1e-5)
    assert not c4.tie_embeddings and c4.max_seq_len == 64
    assert config_from_hf(_cfg(), score_chunk=2048).score_chunk == 2048  # a run's long rows
    with pytest.raises(HFImportError, match="hidden_size"):
        config_from_hf({k: v for k, v in _cfg().items() if k != "hidden_size"})
    with pytest.raises(HFImportError, match="vocab_size"):
        config_from_hf(_cfg(), vocab_size=8)


def test_checkpoint_tensor_errors(tmp_path):
    model = _tiny_hf("Llama", dict(tie_word_embeddings=False))
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    # Tied per config but the file holds an lm_head: ignored, as transformers does.
    load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 40}))
    with pytest.raises(HFImportError, match=r"mlp\.\w+_proj\.weight.*has shape.*expected"):
        load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 3}))
    with pytest.raises(HFImportError, match=r"layers\.2\..*missing"):
        load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 1}))
    with pytest.raises(HFImportError, match=r"layers\.1\..*no place"):
        load_hf_checkpoint(tmp_path)
    with pytest.raises(HFImportError, match="config.json not found"):
        load_hf_checkpoint(tmp_path / "nowhere")
