"""Checkpoints people have: Llama-3.x rope scaling, YaRN, Mistral, Gemma-2, Gemma-3.

Each family is a tiny random transformers model built here (one per module, saved once); agentjax's
teacher-forced logits and the sampler's decode-path log-probs (one token per step against the KV
cache) must match transformers' within 1e-5 in float32. The settings are chosen so that every
feature acts: sequences longer than the sliding windows, RoPE wavelengths on both sides of the
Llama-3 and YaRN bands, soft-caps small enough to bend the values.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import forward
from agentjax.policy.config import ConfigError
from agentjax.policy.hf import config_from_hf, load_hf_checkpoint
from agentjax.policy.hf_export import export_hf
from agentjax.policy.scoring import token_logprobs
from agentjax.sampling.sampler import Sampler, take

torch = pytest.importorskip("torch", reason="torch (extra 'hf') is needed for reference models")
transformers = pytest.importorskip("transformers", reason="transformers (extra 'hf') is needed")

TOL = 1e-5
T = 20  # tokens compared (teacher-forced); windows are 4 and 6
BASE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
)
LLAMA3 = dict(
    rope_type="llama3",
    rope_theta=10000.0,
    factor=4.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=16,
)
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16)
GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
}
FAMILIES = {
    "llama3_rope": ("Llama", dict(rope_parameters=LLAMA3, tie_word_embeddings=False)),
    "qwen2_yarn": ("Qwen2", dict(rope_parameters=YARN, tie_word_embeddings=True)),
    "mistral_window": ("Mistral", dict(sliding_window=4, tie_word_embeddings=False)),
    "gemma2": (
        "Gemma2",
        dict(
            sliding_window=4,
            query_pre_attn_scalar=12,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
        ),
    ),
    "gemma3": (
        "Gemma3Text",
        dict(
            sliding_window=6,
            query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters=GEMMA3_ROPE,
        ),
    ),
    # Gemma-3 4B+ checkpoints: the text decoder of Gemma3ForConditionalGeneration (a tiny vision
    # tower beside it, not read; image tokens outside the vocabulary)
    "gemma3_multimodal": ("Gemma3", dict(sliding_window=6, query_pre_attn_scalar=24)),
}
VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28)
IMAGE = dict(mm_tokens_per_image=4, image_token_index=1000, boi_token_index=998, eoi_token_index=999)


def _config(family: str, overrides: dict):
    if family == "Gemma3":
        text = {**BASE, **overrides}
        return transformers.Gemma3Config(
            text_config=text, vision_config=dict(VISION, patch_size=14), **IMAGE, attn_implementation="eager"
        )
    return getattr(transformers, f"{family}Config")(**{**BASE, **overrides}, attn_implementation="eager")


def _build(family: str, overrides: dict):
    cfg = _config(family, overrides)
    name = {"Gemma3Text": "Gemma3ForCausalLM", "Gemma3": "Gemma3ForConditionalGeneration"}.get(
        family, f"{family}ForCausalLM"
    )
    torch.manual_seed(0)
    model = getattr(transformers, name)(cfg).eval()
    with torch.no_grad():  # every weight far from its init value (norms around 1, or 0 for Gemma)
        for pname, p in model.named_parameters():
            gemma = family.startswith("Gemma")
            p.copy_(
                (0.0 if gemma else 1.0) + 0.2 * torch.randn_like(p)
                if "norm" in pname
                else 0.2 * torch.randn_like(p)
            )
    return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(name)``: (transformers model, agentjax config, params) of a family, built once."""
    cache = {}

    def get(name):
        if name not in cache:
            path = tmp_path_factory.mktemp(name)
            model = _build(*FAMILIES[name])
            model.save_pretrained(path)
            cache[name] = (model, *load_hf_checkpoint(path, max_seq_len=32))
            get.paths[name] = path
        return cache[name]

    get.paths = {}
    return get


def _decode(config, params, n_new: int = 15):
    """Tokens [2, 5 + n_new] and their ``logp_raw`` from a 5-token prompt and n_new decode steps."""
    sampler = Sampler(config)
    prompts = np.random.default_rng(1).integers(0, 64, (2, 5))
    state = sampler.extend(params, sampler.init(2), prompts, np.array([5, 5]), version=0)
    state, _ = sampler.generate(params, state, jax.random.key(0), max_new_tokens=n_new, version=0)
    recs = take(state)
    return np.stack([r["tokens"] for r in recs]), np.stack([r["logp_raw"] for r in recs])


def _ref_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_config_fields(built, name):
    _, c, _ = built(name)
    want = {
        "llama3_rope": dict(rope_type="llama3", rope_original_max_len=16, rope_factor=4.0),
        "qwen2_yarn": dict(rope_type="yarn", qkv_bias=True),
        "mistral_window": dict(sliding_window=4, sliding_layers=()),
        "gemma2": dict(sliding_layers=(0,), attn_softcap=2.0, final_softcap=3.0, attn_scalar=12.0),
        "gemma3": dict(sliding_layers=(0,), local_rope_theta=1e4, rope_type="linear", qk_norm=True),
        "gemma3_multimodal": dict(sliding_window=6, sliding_layers=(), local_rope_theta=1e4, rope_theta=1e6),
    }[name]
    assert {k: getattr(c, k) for k in want} == want
    if name.startswith("gemma"):
        assert (c.embed_scale, c.norm_offset, c.mlp_act, c.post_norms) == (True, 1.0, "gelu_tanh", True)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_teacher_forced_logits_match_transformers(built, name):
    model, config, params = built(name)
    tokens = np.random.default_rng(0).integers(0, 64, (2, T))
    positions = jnp.broadcast_to(jnp.arange(T), (2, T))
    logits, _, _ = forward(params, jnp.asarray(tokens), positions, config=config)
    diff = np.max(np.abs(np.asarray(logits) - _ref_logits(model, tokens)))
    assert diff <= TOL, diff


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_sampler_decode_logprobs_match_transformers(built, name):
    """A 5-token prompt, then 15 tokens sampled one decode step at a time through the KV cache:
    each token's ``logp_raw`` is transformers' log-softmax of the whole sequence at that place."""
    model, config, params = built(name)
    tokens, logp_raw = _decode(config, params)
    assert tokens.shape == (2, 20)
    ref = torch.log_softmax(torch.tensor(_ref_logits(model, tokens)), -1).numpy()
    want = np.take_along_axis(ref[:, 4:-1], tokens[:, 5:, None], -1)[..., 0]
    diff = np.max(np.abs(logp_raw[:, 5:] - want))
    assert diff <= TOL, diff


@pytest.mark.parametrize(
    "name, kernels", [("gemma2", "auto"), ("gemma3", "tiled"), ("llama3_rope", "ordered")]
)
def test_exact_mode_sampler_equals_learner(built, name, kernels):
    """Exact mode honours every feature: the sampler's records equal the learner's bitwise
    (Gemma-2's soft-caps and GeGLU make ``auto`` pick the exact-sum kernels)."""
    model, config, params = built(name)
    exact = config.replace(exact_tile=4, exact_kernels=kernels)
    if kernels == "auto":
        assert exact.invariant == "exact_sum"
    tokens, logp_raw = _decode(exact, params, n_new=7)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    _, learner = token_logprobs(params, jnp.asarray(tokens), positions, config=exact)
    np.testing.assert_array_equal(np.asarray(learner)[:, 5:], logp_raw[:, 5:])
    ref = torch.log_softmax(torch.tensor(_ref_logits(model, tokens)), -1).numpy()
    want = np.take_along_axis(ref[:, 4:-1], tokens[:, 5:, None], -1)[..., 0]
    assert np.max(np.abs(logp_raw[:, 5:] - want)) <= TOL


def test_ordered_kernels_refuse_what_they_lack(built):
    config = built("gemma2")[1]
    with pytest.raises(
        ConfigError, match=r"^mlp_act='gelu_tanh' is not implemented by exact_kernels='ordered'"
    ):
        config.replace(exact_tile=4, exact_kernels="ordered")
    with pytest.raises(ConfigError, match=r"^attn_softcap=2\.0 .*'ordered'"):
        config.replace(exact_tile=4, exact_kernels="ordered", mlp_act="silu")


@pytest.mark.parametrize(
    "family, arch", [("Gemma2", "Gemma2"), ("Gemma3Text", "Gemma3"), ("Mistral", "Mistral")]
)
def test_absent_fields_are_transformers_class_defaults(family, arch):
    """A config.json without the family's fields means transformers' defaults, not "off"."""
    full = getattr(transformers, f"{family}Config")(**BASE).to_dict()
    full["architectures"] = [f"{arch}ForCausalLM"]
    keys = {"sliding_window", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"}
    keys |= {"hidden_activation", "rope_parameters", "layer_types"}
    sparse = {k: v for k, v in full.items() if k not in keys}
    assert config_from_hf({k: v for k, v in sparse.items() if v is not None}) == config_from_hf(full)


def test_gemma3_multimodal_exports_as_a_text_model(built, tmp_path):
    """The text decoder of a Gemma3ForConditionalGeneration exports as a Gemma3ForCausalLM that
    transformers loads with the same logits."""
    model, config, params = built("gemma3_multimodal")
    source = json.loads((built.paths["gemma3_multimodal"] / "config.json").read_text())
    export_hf(params, config, source, tmp_path / "out")
    text = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager")
    assert type(text).__name__ == "Gemma3ForCausalLM"
    tokens = np.random.default_rng(0).integers(0, 64, (2, T))
    assert np.max(np.abs(_ref_logits(text.eval(), tokens) - _ref_logits(model, tokens))) <= TOL
