"""The consistency contract: exact mode is bitwise (dense and MoE, f32 and bf16, any batch,
any padding, shapes the fixed tests do not use)."""

import jax
import numpy as np
import pytest

from agentjax.diagnostics.consistency import (
    Mode,
    delta_report,
    fake_quantize,
    format_table,
    learner_inputs,
    measure,
    rescore,
)
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import init_params
from agentjax.sampling.sampler import Sampler
from agentjax.sampling.transforms import Temperature, TopK, TopP, compose
from agentjax.testing.models import tiny_dense, tiny_moe

T = compose(Temperature(0.9), TopK(40), TopP(0.95))
L = 32  # tiny max_seq_len
MAX_NEW = 12


def test_delta_report_by_hand():
    learner = np.log(np.array([[0.5, 0.5, 0.25, 0.9], [0.05, 0.5, 0.5, 0.5]]))
    behaviour = np.log(np.array([[0.5, 0.25, 0.25, 0.9], [0.05, 0.5, 1.0, 0.5]]))
    mask = np.array([[0, 1, 1, 1], [0, 1, 1, 0]], bool)
    r = delta_report(learner, behaviour, mask, position_buckets=(0, 2, 4), prob_buckets=(0, 0.5, 1.0))
    # masked deltas: log 2, 0, 0, 0, -log 2
    assert r["all"]["n"] == 5 and r["all"]["frac_zero"] == pytest.approx(0.6)
    assert r["all"]["mean"] == pytest.approx(2 * np.log(2) / 5)
    assert r["all"]["max"] == pytest.approx(np.log(2)) and r["all"]["p50"] == 0.0
    assert r["by_position"]["[0,2)"]["n"] == 2 and r["by_position"]["[2,4)"]["n"] == 3
    assert r["by_prob"]["[0,0.5)"]["n"] == 2  # mu = 0.25 twice
    assert r["by_prob"]["[0.5,1)"]["mean"] == pytest.approx(np.log(2) / 3)  # mu = 1 included
    routes = np.zeros((2, 4, 1, 1), np.int32)
    routes[0, 1] = 3  # predicts token (0, 2)
    by_e = delta_report(learner, behaviour, mask, routes=routes)["by_expert"]
    assert by_e["e3"]["n"] == 1 and by_e["e0"]["n"] == 4


def test_fake_quantize_int8():
    w = np.array([[1.0, -0.5], [0.3, 0.25], [-0.2, 0.0]], np.float32)
    q = np.asarray(fake_quantize({"w": w, "norm": np.ones(2, np.float32)}, 8)["w"])
    s = np.array([1.0, 0.5]) / 127  # per output column
    np.testing.assert_allclose(q, np.round(w / s) * s, rtol=1e-6)
    assert not np.array_equal(q, w)


def _learner_batch(samples, rng, seq_len=L, vocab=64, n_experts=4):
    """All sampled rows in one learner batch: shuffled, random left padding, garbage pads."""
    rows = [(inp, i) for inp in samples for i in range(len(inp["length"]))]
    order = rng.permutation(len(rows))
    n_layers_k = samples[0]["routes"].shape[2:] if samples[0]["routes"] is not None else None
    tok = rng.integers(0, vocab, (len(rows), seq_len)).astype(np.int32)
    pos = np.full((len(rows), seq_len), seq_len, np.int32)
    routes = None if n_layers_k is None else rng.integers(0, n_experts, (len(rows), seq_len, *n_layers_k))
    mu, mask = np.zeros((len(rows), seq_len), np.float32), np.zeros((len(rows), seq_len), bool)
    for r, k in enumerate(order):
        inp, i = rows[k]
        n = int(inp["length"][i])
        o = int(rng.integers(0, seq_len - n + 1))
        tok[r, o : o + n] = inp["tokens"][i, :n]
        pos[r, o : o + n] = np.arange(n)
        mu[r, o : o + n] = inp["logp"][i, :n]
        mask[r, o : o + n] = inp["mask"][i, :n]
        if routes is not None:
            routes[r, o : o + n] = inp["routes"][i, :n]
    routes = None if routes is None else routes.astype(np.int32)
    return {"tokens": tok, "positions": pos, "routes": routes, "mask": mask, "logp": mu}


def _unrolled_dense(**kw):
    return tiny_dense(layer_unroll=2, **kw)  # the learner's layer scan unrolled


def _bf16(make):
    return lambda **kw: make(param_dtype="bfloat16", compute_dtype="bfloat16", **kw)


def _check_contract(
    cfg, params, sampler_batches, rng, transform=T, max_new=MAX_NEW, prompt_width=12, compositions=2
):
    """Samples at each sampler batch size, rescores all rows in shuffled, left-padded learner
    batches (with and without routing replay for MoE) and asserts learner == sampler bitwise."""
    sampler = Sampler(cfg, transform=transform)
    samples = []
    for j, b in enumerate(sampler_batches):
        lens = rng.integers(1, prompt_width + 1, b)
        prompts = rng.integers(0, cfg.vocab_size, (b, prompt_width))
        st = sampler.extend(params, sampler.init(b), prompts, lens, version=0)
        st, _ = sampler.generate(params, st, jax.random.key(100 * b + j), max_new_tokens=max_new, version=0)
        samples.append(learner_inputs(st))
    n_tokens = sum(int(s["mask"].sum()) for s in samples)
    replays = (True, False) if cfg.is_moe else (True,)
    for composition in range(compositions):  # other batch-mates, order and (left) padding
        batch = _learner_batch(
            samples,
            np.random.default_rng(composition),
            cfg.max_seq_len,
            cfg.vocab_size,
            max(cfg.n_experts, 1),
        )
        for replay in replays:
            lp, _ = rescore(params, batch, config=cfg, transform=transform, replay=replay)
            m = batch["mask"]
            assert m.sum() == n_tokens
            np.testing.assert_array_equal(lp[m], batch["logp"][m])
            np.testing.assert_array_equal(np.exp(lp[m] - batch["logp"][m]), 1.0)  # ratios
    return samples, n_tokens


def _tiled_dense(**kw):
    return tiny_dense(exact_kernels="tiled", **kw)  # the reference construction, kept working


def _exact_sum(make):  # the float64 construction (GPU's; "auto" picks "ordered" on CPU)
    return lambda **kw: make(exact_kernels="exact_sum", **kw)


@pytest.mark.parametrize(
    "make",
    [
        tiny_dense,
        tiny_moe,
        _unrolled_dense,
        _bf16(tiny_dense),
        _bf16(tiny_moe),
        _tiled_dense,
        _exact_sum(_bf16(tiny_moe)),  # GPU's kernels: every dense kernel, the experts and bf16
    ],
    ids=[
        "dense",
        "moe",
        "dense_unrolled",
        "dense_bf16",
        "moe_bf16",
        "dense_tiled",
        "moe_bf16_exact_sum",
    ],
)
def test_exact_mode_is_bitwise(make):
    cfg = make(exact_tile=4)
    assert cfg.invariant in (
        "ordered",
        "exact_sum",
        "pallas",
        "",
    )  # "auto": "ordered" on CPU, "pallas" on GPU
    params = init_params(cfg, jax.random.key(0))
    assert jax.tree.leaves(params)[0].dtype == cfg.pdtype
    _, n_tokens = _check_contract(cfg, params, (1, 3, 8, 1, 3, 8), np.random.default_rng(1))
    assert n_tokens >= 100


def _random_config(seed: int) -> ModelConfig:
    """A small model with shapes the fixed tests do not use: head dims that are not powers of
    two, GQA ratios 1..3, q/k norm and q/k/v bias on or off, dense or MoE, f32 or bf16."""
    r = np.random.default_rng(seed)
    n_kv = int(r.integers(1, 3))
    dtype = ("float32", "bfloat16")[seed % 2]
    return ModelConfig(
        vocab_size=int(r.choice([48, 61, 96])),
        d_model=int(r.choice([24, 40, 48])),
        n_layers=int(r.integers(1, 3)),
        n_heads=n_kv * int(r.integers(1, 4)),
        n_kv_heads=n_kv,
        head_dim=int(r.choice([6, 10, 12, 20])),
        d_ff=int(r.choice([40, 72, 96])),
        max_seq_len=int(r.choice([20, 24, 29])),
        qk_norm=bool(r.integers(2)),
        qkv_bias=bool(r.integers(2)),
        n_experts=int(r.choice([0, 3, 4])),
        n_experts_per_token=int(r.integers(1, 3)),
        exact_tile=int(r.integers(1, 5)),
        param_dtype=dtype,
        compute_dtype=dtype,
        init_scale=float(r.choice([0.02, 0.2])),
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_contract_holds_on_random_shapes(seed):
    """One random model per seed, each sampler batch size a fresh draw from 1..12 (one compile
    each): the issue-18 defect (qk_norm, head_dim 10, batch 1) broke here before the
    exact-summation kernels."""
    cfg = _random_config(seed)
    params = init_params(cfg, jax.random.key(seed))
    r = np.random.default_rng(100 + seed)
    batches = (1, *sorted(r.choice(np.arange(2, 13), 2, replace=False).tolist()))
    transform = (T, None)[seed % 2]
    _, n_tokens = _check_contract(
        cfg, params, batches, r, transform=transform, max_new=8, prompt_width=10, compositions=1
    )
    assert n_tokens >= 8 * len(batches)


def test_issue_18_shape_is_bitwise():
    """The issue's report: qk_norm, head_dim 10, GQA 2:1, one prompt, the same key for row 0;
    the tiled kernels differed at sampler batch 1 (9/10 tokens bitwise), and row 0's recorded
    log-probs changed between batch 1 and batch 9."""
    cfg = ModelConfig(
        vocab_size=64,
        d_model=32,
        n_layers=1,
        n_heads=2,
        n_kv_heads=1,
        head_dim=10,
        d_ff=64,
        max_seq_len=16,
        qk_norm=True,
        exact_tile=4,
    )
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg)
    records = []
    for b in (1, 9):
        st = sampler.extend(
            params, sampler.init(b), np.tile([[5, 9, 2, 11]], (b, 1)), np.full(b, 4), version=0
        )
        st, _ = sampler.generate(
            params, st, jax.numpy.stack([jax.random.key(7)] * b), max_new_tokens=10, version=0
        )
        tokens, pos = np.asarray(st.tokens[:1, :14]), np.arange(14)[None]
        lp, _ = rescore(
            params, {"tokens": tokens, "positions": pos, "routes": None}, config=cfg, replay=False
        )
        np.testing.assert_array_equal(lp[0, 4:14], np.asarray(st.logp[0, 4:14]))
        records.append(np.asarray(st.logp[0, 4:14]))
    np.testing.assert_array_equal(records[0], records[1])


@pytest.mark.slow
def test_learner_rows_do_not_depend_on_the_batch_size_at_the_benchmark_shape():
    """launch.consistency's model (d_model 128, 64 slots) at learner batches 8, 16 and 32: with
    plain converts XLA kept float64 where the kernels round to float32 (excess precision), in
    fusions that depend on the batch size, and 17% of the learner's log-probs at batch 32 differed
    from the sampler's by 1 ulp; every narrowing now rounds explicitly (kernels.cast)."""
    cfg = ModelConfig(
        vocab_size=64, d_model=128, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=512,
        max_seq_len=64, exact_tile=8,
    )  # fmt: skip
    params = init_params(cfg, jax.random.key(0))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 64, (32, 64))
    pos = np.tile(np.arange(64), (32, 1))
    out = {
        b: rescore(params, {"tokens": tokens[:b], "positions": pos[:b], "routes": None}, config=cfg)[0]
        for b in (8, 16, 32)
    }
    np.testing.assert_array_equal(out[8], out[16][:8])
    np.testing.assert_array_equal(out[8], out[32][:8])


def test_sampled_tokens_do_not_depend_on_batch_mates():
    cfg = tiny_dense(exact_tile=4)
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg, transform=T)
    rng = np.random.default_rng(2)
    prompts, lens = rng.integers(0, 64, (8, 12)), rng.integers(1, 13, 8)
    keys = jax.random.split(jax.random.key(5), 8)
    run = lambda idx: sampler.generate(
        params,
        sampler.extend(params, sampler.init(len(idx)), prompts[idx], lens[idx], version=0),
        keys[np.asarray(idx)],
        max_new_tokens=MAX_NEW,
        version=0,
    )[0]
    full = run(list(range(8)))
    sub = run([6, 2, 5])
    for j, i in enumerate([6, 2, 5]):
        np.testing.assert_array_equal(sub.tokens[j], full.tokens[i])
        np.testing.assert_array_equal(sub.logp[j], full.logp[i])


def test_fast_mode_report_measures_a_small_nonzero_gap():
    cfg = tiny_dense()
    params = init_params(cfg, jax.random.key(0))
    rng = np.random.default_rng(3)
    prompts, lens = rng.integers(0, 64, (3, 12)), rng.integers(4, 13, 3)
    fast = measure(
        Mode("fast f32", {"exact_tile": 0}, {"exact_tile": 0}),
        cfg,
        params,
        prompts,
        lens,
        jax.random.key(0),
        max_new_tokens=MAX_NEW,
    )
    bf16 = measure(
        Mode("bf16", {"compute_dtype": "bfloat16"}, {}),
        cfg,
        params,
        prompts,
        lens,
        jax.random.key(0),
        max_new_tokens=MAX_NEW,
    )
    assert fast["logp"]["all"]["n"] == 3 * MAX_NEW
    assert fast["logp"]["all"]["max"] < 1e-4
    assert bf16["logp"]["all"]["mean"] > fast["logp"]["all"]["mean"]
    assert bf16["logp"]["all"]["frac_zero"] < 0.5
    table = format_table([fast, bf16])
    assert table.count("\n") == 3 and "| bf16 |" in table
