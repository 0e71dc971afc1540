"""HF import: Qwen3-MoE (routes recorded and replayed) and bad checkpoints, each a clear error
naming the file and the problem before any training (issue #14 loader defects included)."""

import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import forward
from agentjax.policy.config import ConfigError
from agentjax.policy.hf import HFImportError, load_hf_checkpoint

torch = pytest.importorskip("torch", reason="torch (extra 'hf') is needed for reference models")
transformers = pytest.importorskip("transformers", reason="transformers (extra 'hf') is needed")

MOE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    num_experts=4,
    num_experts_per_tok=2,
    norm_topk_prob=True,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    attn_implementation="eager",
)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**MOE)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("qwen3_moe")
    model.save_pretrained(path)
    return path, model


def test_qwen3_moe_logits_match_transformers_and_routes_replay(moe_dir):
    path, model = moe_dir
    config, params = load_hf_checkpoint(path, max_seq_len=32)
    assert (config.n_experts, config.n_experts_per_token, config.d_ff, config.max_seq_len) == (4, 2, 24, 32)
    assert params["layers"]["w_gate"].shape == (2, 4, 32, 24) and params["layers"]["router"].shape == (
        2,
        32,
        4,
    )
    tokens = np.random.default_rng(0).integers(0, 64, (2, 10))
    pos = jnp.broadcast_to(jnp.arange(10), (2, 10))
    logits, _, aux = forward(params, jnp.asarray(tokens), pos, config=config)
    with torch.no_grad():
        ref = model(torch.tensor(tokens)).logits.numpy()
    assert np.max(np.abs(np.asarray(logits) - ref)) <= 1e-4
    assert aux["routes"].shape == (2, 10, 2, 2)
    replay, _, aux2 = forward(params, jnp.asarray(tokens), pos, config=config, routes=aux["routes"])
    np.testing.assert_array_equal(np.asarray(replay), np.asarray(logits))
    np.testing.assert_array_equal(np.asarray(aux2["routes"]), np.asarray(aux["routes"]))


def test_moe_without_renormalised_gates_is_refused(moe_dir, tmp_path):
    path, _ = moe_dir
    d = shutil.copytree(path, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "norm_topk_prob": False}))
    with pytest.raises(HFImportError, match=r"m/config.json: norm_topk_prob=False is not supported"):
        load_hf_checkpoint(d)
    (d / "config.json").write_text(json.dumps({**cfg, "mlp_only_layers": [1]}))
    with pytest.raises(HFImportError, match=r"mlp_only_layers=\[1\] is not supported"):
        load_hf_checkpoint(d)


def _dense(tmp_path, **save):
    torch.manual_seed(1)
    cfg = transformers.Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=False,
    )
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(tmp_path, **save)
    return tmp_path


def test_truncated_file_and_header_disagreeing_with_data(tmp_path):
    d = _dense(tmp_path / "a")
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-100])
    with pytest.raises(
        HFImportError,
        match=r"a/model.safetensors: not a readable safetensors file "
        r"\(truncated or corrupt\)",
    ):
        load_hf_checkpoint(d)
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    name = "model.norm.weight"
    header[name]["shape"] = [header[name]["shape"][0] // 2]  # the header no longer fits its bytes
    raw = json.dumps(header).encode().ljust(n)
    f.write_bytes(data[:8] + raw + data[8 + n :])
    with pytest.raises(HFImportError, match=r"a/model.safetensors: not a readable safetensors file"):
        load_hf_checkpoint(d)
    f.write_bytes(b"\x05\x00")
    with pytest.raises(HFImportError, match=r"a/model.safetensors: not a readable"):
        load_hf_checkpoint(d)


def test_missing_shard_and_index_disagreeing_with_files(tmp_path):
    d = _dense(tmp_path / "s", max_shard_size="20KB")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    load_hf_checkpoint(d)
    moved = d / shards[1]
    moved.rename(tmp_path / "elsewhere")
    with pytest.raises(
        HFImportError,
        match=rf"s/{shards[1]}: shard is missing \(listed in "
        r"model.safetensors.index.json\)",
    ):
        load_hf_checkpoint(d)
    (tmp_path / "elsewhere").rename(moved)
    name = next(k for k, v in index["weight_map"].items() if v == shards[0])
    index["weight_map"][name] = shards[1]
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(HFImportError, match=rf"index.json: tensor '{name}' is listed in {shards[1]}"):
        load_hf_checkpoint(d)


def test_bad_checkpoint_stops_training_before_any_work(tmp_path, tiny_hf_dir):
    """Through the run config: every bad-input error is a ConfigError out of run.build.build."""
    from agentjax.run import config as runconfig  # noqa: PLC0415
    from agentjax.run.build import build  # noqa: PLC0415
    from configs import codefix_tiny

    d = shutil.copytree(tiny_hf_dir, tmp_path / "bad")
    c = codefix_tiny.get_config()
    c.model.hf_path = str(d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 100}))
    with pytest.raises(
        HFImportError,
        match=r"bad/model.safetensors: tensor 'model.layers.0.mlp.\w+_proj.weight' "
        r"has shape .*expected .* from config.json",
    ):
        build(runconfig.parse(c))
    (d / "config.json").write_text(json.dumps({**cfg, "architectures": ["GemmaForCausalLM"]}))
    with pytest.raises(
        HFImportError,
        match=r"bad/config.json: architectures=\['GemmaForCausalLM'\] is not "
        r"supported; supported: \[.*'LlamaForCausalLM'",
    ):
        build(runconfig.parse(c))
    c.model.d_model = 8
    with pytest.raises(ConfigError, match=r"model fields \['model.d_model'\] come from"):
        runconfig.parse(c)


def test_hf_configs_parse_and_name_a_missing_directory(tiny_hf_dir):
    from agentjax.run import config as runconfig
    from configs import codefix_tiny, qwen3_codefix

    for mod in (codefix_tiny, qwen3_codefix):
        c = mod.get_config()
        c.model.hf_path = str(tiny_hf_dir) + "_missing"
        with pytest.raises(ConfigError, match=r"model.hf_path='.*' is not a directory"):
            runconfig.parse(c)
        c.model.hf_path = str(tiny_hf_dir)
        run = runconfig.parse(c)
        assert run.task.name == "codefix" and run.model.tool_format == "hermes"
    c.model.tool_format = "xml"
    with pytest.raises(
        ConfigError,
        match=r"model.tool_format='xml' is invalid; allowed values: "
        r"\['plain', 'hermes', 'llama3_json', 'pythonic', 'mistral', 'mistral_args'\]",
    ):
        runconfig.parse(c)


def test_qwen3_moe_export_loads_in_transformers_and_reimports_bitwise(moe_dir, tmp_path):
    from agentjax.policy.hf import read_config_json
    from agentjax.policy.hf_export import export_hf

    path, _ = moe_dir
    config, params = load_hf_checkpoint(path, max_seq_len=32)
    out = export_hf(params, config, read_config_json(path), tmp_path / "out", max_shard_bytes=20_000)
    assert (out / "model.safetensors.index.json").is_file()
    _, again = load_hf_checkpoint(out, max_seq_len=32)
    jax = pytest.importorskip("jax")
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), again, params)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = np.random.default_rng(1).integers(0, 64, (2, 8))
    pos = jnp.broadcast_to(jnp.arange(8), (2, 8))
    logits, _, _ = forward(params, jnp.asarray(tokens), pos, config=config)
    with torch.no_grad():
        ref = model(torch.tensor(tokens)).logits.numpy()
    assert np.max(np.abs(np.asarray(logits) - ref)) <= 1e-5
