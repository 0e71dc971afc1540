"""The learner's objective: config validation, IcePop/KPop filter metrics and gradients, the
staleness down-weight, reference KL and value loss, all against hand-computed values (no model)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.learner.objective import FILTERS, LOSSES, LossConfig, policy_objective

LN2 = math.log(2.0)


@pytest.mark.parametrize("field,value,allowed", [
    ("name", "reinforce", "['ppo', 'grpo', 'gspo', 'cispo', 'mis_po', 'hispo']"),
    ("filter", "median", "['none', 'icepop', 'kpop']"),
    ("aggregation", "seq_sum", "'token_mean', 'seq_mean_token_mean'"),
    ("kl_kind", "k4", "['k1', 'k2', 'k3']"),
])
def test_invalid_config_names_field_and_allowed_values(field, value, allowed):
    with pytest.raises(ValueError) as e:
        LossConfig(**{field: value})
    msg = str(e.value)
    assert f"loss.{field}='{value}' is invalid" in msg and allowed in msg, msg


def test_invalid_clip_range():
    with pytest.raises(ValueError, match=r"loss\.clip_low=1\.0"):
        LossConfig(clip_low=1.0)
    assert set(FILTERS) == {"none", "icepop", "kpop"} and len(LOSSES) == 6


def _batch(logp, behav, mask, adv, weight=None):
    b = len(adv)
    return {"loss_mask": jnp.asarray(mask, jnp.float32), "behav_logp": jnp.asarray(behav, jnp.float32),
            "advantages": jnp.asarray(adv, jnp.float32),
            "weight": jnp.ones(b) if weight is None else jnp.asarray(weight, jnp.float32)}


def _grad(cfg, batch, logp, **kw):
    return np.asarray(jax.grad(lambda lp: policy_objective(cfg, batch, lp, **kw)[0])(logp))


def test_icepop_fraction_and_gradient():
    """ratio = exp(train - behav) is kept iff 0.5 <= ratio <= 2, i.e. |train - behav| <= ln 2."""
    logp = jnp.log(jnp.array([[0.5, 0.4, 0.3, 0.2], [0.6, 0.5, 0.4, 0.3]]))
    delta = np.array([[0.0, 1.0, -1.0, 0.5],  # behav - train: keep, drop, drop, keep
                      [LN2 - 1e-3, -(LN2 + 1e-3), 5.0, 0.0]])  # keep, drop, (masked out), keep
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 1]])
    # positive advantages: PPO's clip (A > 0 and r > 1.28) never zeroes a kept token here
    batch = _batch(logp, np.asarray(logp) + delta, mask, [1.0, 0.5])
    cfg = LossConfig(name="grpo", filter="icepop")
    _, m = policy_objective(cfg, batch, logp)
    assert float(m["masked/filter_icepop"]) == pytest.approx(3 / 7)  # 3 dropped of 7 trained
    g = _grad(cfg, batch, logp)
    dropped = np.array([[0, 1, 1, 0], [0, 1, 0, 0]], bool)
    assert np.all(g[dropped] == 0.0) and np.all(g[mask.astype(bool) & ~dropped] != 0.0)
    # CISPO (no clipped branch: the clip only bounds the stopped weight) trains every masked-in
    # token without a filter, and exactly the kept ones with IcePop
    g_none = _grad(LossConfig(name="cispo", filter="none"), batch, logp)
    np.testing.assert_array_equal(g_none != 0.0, mask.astype(bool))
    g_ice = _grad(LossConfig(name="cispo", filter="icepop"), batch, logp)
    np.testing.assert_array_equal(g_ice != 0.0, mask.astype(bool) & ~dropped)


def _binary_kl(p, q):
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def test_kpop_fraction_hand_computed():
    """KPop keeps a token iff both binary KLs of (p, q) are <= 0.05 nats."""
    p = np.array([[0.5, 0.001, 0.8, 0.3, 0.9, 0.95]])  # learner
    q = np.array([[0.4, 0.002, 0.4, 0.25, 0.8, 0.8]])  # sampler
    # D(p||q), D(q||p): 0.0204/0.0201 keep; 3.1e-4/4.1e-4 keep; 0.335/0.277 drop;
    # 0.0064/0.0062 keep; 0.0367/0.0444 keep; 0.0940/0.1353 drop
    want_keep = np.array([[1, 1, 0, 1, 1, 0]], np.float32)
    ref = ((_binary_kl(p, q) <= 0.05) & (_binary_kl(q, p) <= 0.05)).astype(np.float32)
    np.testing.assert_array_equal(ref, want_keep)
    logp = jnp.log(jnp.asarray(p, jnp.float32))
    batch = _batch(logp, np.log(q), np.ones_like(p), [1.0])
    cfg = LossConfig(name="ppo", filter="kpop", kpop_threshold=0.05)
    _, m = policy_objective(cfg, batch, logp)
    assert float(m["masked/filter_kpop"]) == pytest.approx(2 / 6)
    g = _grad(cfg, batch, logp)
    np.testing.assert_array_equal(g != 0.0, want_keep.astype(bool))


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"])
def test_weight_scales_a_sequence(name, aggregation):
    """A staleness down-weight w scales that sequence's gradient by w (also under per-sequence
    means, where a weight folded into the mask would cancel); w = 0 removes the row entirely."""
    logp = jnp.log(jnp.array([[0.5, 0.4, 0.3], [0.6, 0.5, 0.4], [0.2, 0.3, 0.7]]))
    behav = np.asarray(logp) + np.array([[0.1, -0.1, 0.05], [0.0, 0.1, -0.05], [0.02, 0.0, 0.0]])
    mask = np.array([[1, 1, 1], [1, 1, 0], [0, 1, 1]])
    cfg = LossConfig(name=name, aggregation=aggregation, filter="none")
    full = _grad(cfg, _batch(logp, behav, mask, [1.0, -0.5, 2.0]), logp)
    half = _grad(cfg, _batch(logp, behav, mask, [1.0, -0.5, 2.0], [0.5, 1, 1]), logp)
    if name == "gspo":  # sequence-level: its objective is always a per-sequence mean
        assert np.abs(full[0]).max() > 0
    np.testing.assert_allclose(half[0], 0.5 * full[0], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(half[1:], full[1:], rtol=1e-5, atol=1e-8)
    zero = _grad(cfg, _batch(logp, behav, mask, [1.0, -0.5, 2.0], [0.0, 1, 1]), logp)
    drop = _grad(cfg, _batch(logp, behav, mask * np.array([[0], [1], [1]]), [1.0, -0.5, 2.0]), logp)
    np.testing.assert_array_equal(zero[0], 0.0)
    np.testing.assert_allclose(zero, drop, rtol=1e-6, atol=1e-9)


def test_reference_kl_and_value_loss_hand_computed():
    logp = jnp.log(jnp.array([[0.5, 0.25]]))
    ref = jnp.log(jnp.array([[0.25, 0.5]]))
    batch = {**_batch(logp, logp, [[1, 1]], [0.0]), "returns": jnp.array([[1.0, 0.0]])}
    # k3(logp, ref) = exp(ref - logp) - (ref - logp) - 1 per token: log r = -ln2 then +ln2
    k3 = np.mean([0.5 + LN2 - 1, 2.0 - LN2 - 1])
    for name in ("grpo", "ppo"):
        cfg = LossConfig(name=name, kl_coef=0.1, kl_kind="k3", value_coef=0.5)
        loss, m = policy_objective(cfg, batch, logp, values=jnp.array([[0.0, 2.0]]), ref_logp=ref)
        # advantage 0, ratio 1: the surrogate is 0; value loss 0.5 * mean((0-1)^2, (2-0)^2) = 1.25
        assert float(loss) == pytest.approx(0.1 * k3 + 0.5 * 1.25, rel=1e-5)
        assert float(m["loss/value"]) == pytest.approx(1.25)
        assert float(m["ess/token_frac"]) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["grpo", "cispo"])
def test_negative_scale_shrinks_only_the_negative_advantages(name):
    logp = jnp.log(jnp.array([[0.5, 0.25], [0.4, 0.2]]))
    mask = [[1, 1], [1, 1]]
    full = _grad(LossConfig(name=name, filter="none"), _batch(logp, logp, mask, [1.0, -1.0]), logp)
    half = _grad(LossConfig(name=name, filter="none", negative_scale=0.5),
                 _batch(logp, logp, mask, [1.0, -1.0]), logp)
    zero = _grad(LossConfig(name=name, filter="none", negative_scale=0.0),
                 _batch(logp, logp, mask, [1.0, -1.0]), logp)
    np.testing.assert_array_equal(half[0], full[0])  # the better-than-average row is untouched
    np.testing.assert_allclose(half[1], 0.5 * full[1], rtol=1e-6)
    assert np.all(zero[1] == 0.0) and np.all(full[1] != 0.0)
    with pytest.raises(ValueError, match=r"loss.negative_scale=1.5 is invalid"):
        LossConfig(negative_scale=1.5)
