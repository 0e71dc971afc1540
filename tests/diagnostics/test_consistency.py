"""The consistency contract: exact mode is bitwise (dense and MoE, any batch, any padding)."""

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
    r = delta_report(learner, behaviour, mask, position_buckets=(0, 2, 4),
                     prob_buckets=(0, 0.5, 1.0))
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


def _learner_batch(samples, rng):
    """All sampled rows in one learner batch: shuffled, random left padding, garbage pads."""
    rows = [(inp, i) for inp in samples for i in range(len(inp["length"]))]
    order = rng.permutation(len(rows))
    n_layers_k = samples[0]["routes"].shape[2:] if samples[0]["routes"] is not None else None
    tok = rng.integers(0, 64, (len(rows), L)).astype(np.int32)
    pos = np.full((len(rows), L), L, np.int32)
    routes = None if n_layers_k is None else rng.integers(0, 4, (len(rows), L, *n_layers_k))
    mu, mask = np.zeros((len(rows), L), np.float32), np.zeros((len(rows), L), bool)
    for r, k in enumerate(order):
        inp, i = rows[k]
        n = int(inp["length"][i])
        o = int(rng.integers(0, L - n + 1))
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


@pytest.mark.parametrize("make", [tiny_dense, tiny_moe, _unrolled_dense],
                         ids=["dense", "moe", "dense_unrolled"])
def test_exact_mode_is_bitwise(make):
    cfg = make(exact_tile=4)
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg, transform=T)
    rng = np.random.default_rng(1)
    samples = []
    for b in (1, 3, 8):  # sampler batch sizes
        for seed in range(2):  # different prompts, lengths and right paddings
            lens = rng.integers(1, 13, b)
            prompts = rng.integers(0, 64, (b, 12))
            st = sampler.extend(params, sampler.init(b), prompts, lens, version=0)
            st, _ = sampler.generate(params, st, jax.random.key(10 * b + seed),
                                     max_new_tokens=MAX_NEW, version=0)
            samples.append(learner_inputs(st))
    n_tokens = sum(int(s["mask"].sum()) for s in samples)
    assert n_tokens >= 100
    replays = (True, False) if cfg.is_moe else (True,)
    for composition in range(2):  # other batch-mates, order and (left) padding
        batch = _learner_batch(samples, np.random.default_rng(composition))
        for replay in replays:
            lp, _ = rescore(params, batch, config=cfg, transform=T, replay=replay)
            m = batch["mask"]
            assert m.sum() == n_tokens
            np.testing.assert_array_equal(lp[m], batch["logp"][m])
            np.testing.assert_array_equal(np.exp(lp[m] - batch["logp"][m]), 1.0)  # ratios


def test_sampled_tokens_do_not_depend_on_batch_mates():
    cfg = tiny_dense(exact_tile=4)
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg, transform=T)
    rng = np.random.default_rng(2)
    prompts, lens = rng.integers(0, 64, (8, 12)), rng.integers(1, 13, 8)
    keys = jax.random.split(jax.random.key(5), 8)
    run = lambda idx: sampler.generate(
        params, sampler.extend(params, sampler.init(len(idx)), prompts[idx], lens[idx], version=0),
        keys[np.asarray(idx)], max_new_tokens=MAX_NEW, version=0)[0]
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
    fast = measure(Mode("fast f32", {"exact_tile": 0}, {"exact_tile": 0}), cfg, params, prompts,
                   lens, jax.random.key(0), max_new_tokens=MAX_NEW)
    bf16 = measure(Mode("bf16", {"compute_dtype": "bfloat16"}, {}), cfg, params, prompts, lens,
                   jax.random.key(0), max_new_tokens=MAX_NEW)
    assert fast["logp"]["all"]["n"] == 3 * MAX_NEW
    assert fast["logp"]["all"]["max"] < 1e-4
    assert bf16["logp"]["all"]["mean"] > fast["logp"]["all"]["mean"]
    assert bf16["logp"]["all"]["frac_zero"] < 0.5
    table = format_table([fast, bf16])
    assert table.count("\n") == 3 and "| bf16 |" in table
