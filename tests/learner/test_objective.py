"""The learner's objective: config validation, IcePop/KPop filter metrics and gradients, the
staleness down-weight, reference KL and value loss, all against hand-computed values (no model)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.learner.objective import FILTERS, LOSSES, LossConfig, policy_objective

LN2 = math.log(2.0)


@pytest.mark.parametrize(
    "kw,field,value,allowed",
    [
        ({"name": "reinforce"}, "name", "reinforce", "'hispo', 'decoupled_ppo']"),
        ({"filter": "median"}, "filter", "median", "['none', 'icepop', 'kpop']"),
        (
            {"grpo": {"aggregation": "seq_sum"}},
            "grpo.aggregation",
            "seq_sum",
            "'token_mean', 'seq_mean_token_mean'",
        ),
        ({"kl_kind": "k4"}, "kl_kind", "k4", "['k1', 'k2', 'k3']"),
        ({"advantage": "group"}, "advantage", "group", "['group_std', 'dr_grpo', 'rloo', 'gae']"),
    ],
)
def test_invalid_config_names_field_and_allowed_values(kw, field, value, allowed):
    with pytest.raises(ValueError) as e:
        LossConfig(**kw)
    msg = str(e.value)
    assert f"loss.{field}='{value}' is invalid" in msg and allowed in msg, msg


def test_invalid_clip_range():
    with pytest.raises(ValueError, match=r"loss\.grpo\.clip_low=1\.0"):
        LossConfig(grpo={"clip_low": 1.0})
    assert set(FILTERS) == {"none", "icepop", "kpop"} and len(LOSSES) == 7


@pytest.mark.parametrize(
    "name,field",
    [("cispo", "behavior_cap"), ("gspo", "aggregation"), ("mis_po", "clip_low"), ("ppo", "mismatch_bounds")],
)
def test_a_field_the_loss_does_not_have_is_an_error_naming_it(name, field):
    with pytest.raises(ValueError, match=rf"loss\.{name}\.{field} is not a field of loss '{name}'"):
        LossConfig(name=name, **{name: {field: 0.5}})


def test_each_loss_takes_its_papers_defaults_and_only_its_own_section():
    gspo = LossConfig(name="gspo", grpo={"clip_low": 0.2, "clip_high": 0.28}).objective
    assert (gspo.clip_low, gspo.clip_high) == (3e-4, 4e-4)  # never the GRPO section's 0.2 / 0.28
    assert LossConfig(name="cispo").objective.clip_low is None  # CISPO: no lower bound
    assert LossConfig(name="grpo").objective.aggregation == "seq_mean_token_mean"
    assert LossConfig(name="hispo").needs == {"train_v"}
    assert LossConfig(name="decoupled_ppo").needs == {"prox"}
    assert LossConfig(filter="icepop").needs == {"train_v"}
    assert LossConfig(filter="icepop", filter_ratio="total").needs == frozenset()
    with pytest.raises(ValueError, match=r"loss.tis_cap=2.0 is invalid with loss.name='gspo'"):
        LossConfig(name="gspo", tis_cap=2.0)


def test_objective_without_the_behaviour_logprobs_it_needs_is_an_error():
    logp = jnp.log(jnp.array([[0.5, 0.25]]))
    with pytest.raises(ValueError, match=r"needs the log-probs \['train_v'\]"):
        policy_objective(LossConfig(name="hispo"), _batch(logp, logp, [[1, 1]], [1.0]), logp)


def _batch(logp, behav, mask, adv, weight=None):
    b = len(adv)
    return {
        "loss_mask": jnp.asarray(mask, jnp.float32),
        "behav_logp": jnp.asarray(behav, jnp.float32),
        "advantages": jnp.asarray(adv, jnp.float32),
        "weight": jnp.ones(b) if weight is None else jnp.asarray(weight, jnp.float32),
    }


def _grad(cfg, batch, logp, **kw):
    return np.asarray(jax.grad(lambda lp: policy_objective(cfg, batch, lp, **kw)[0])(logp))


def test_icepop_fraction_and_gradient():
    """ratio = exp(train - behav) is kept iff 0.5 <= ratio <= 2, i.e. |train - behav| <= ln 2."""
    logp = jnp.log(jnp.array([[0.5, 0.4, 0.3, 0.2], [0.6, 0.5, 0.4, 0.3]]))
    delta = np.array(
        [
            [0.0, 1.0, -1.0, 0.5],  # behav - train: keep, drop, drop, keep
            [LN2 - 1e-3, -(LN2 + 1e-3), 5.0, 0.0],
        ]
    )  # keep, drop, (masked out), keep
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 1]])
    # positive advantages: PPO's clip (A > 0 and r > 1.28) never zeroes a kept token here
    batch = {**_batch(logp, np.asarray(logp) + delta, mask, [1.0, 0.5]), "train_at_behavior_logp": logp}
    cfg = LossConfig(name="grpo", grpo={"clip_high": 0.28}, filter="icepop")
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
    # filter_ratio="mismatch" compares the behaviour-version recompute, not the current policy:
    # a current policy far from the behaviour one (staleness) masks nothing when pi_v == mu
    stale = jnp.asarray(logp) + 1.0
    same = {**batch, "behav_logp": logp}
    _, m_mis = policy_objective(LossConfig(name="cispo", filter="icepop"), same, stale)
    _, m_tot = policy_objective(LossConfig(name="cispo", filter="icepop", filter_ratio="total"), same, stale)
    assert float(m_mis["masked/filter_icepop"]) == 0.0 and float(m_tot["masked/filter_icepop"]) == 1.0
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
    cfg = LossConfig(
        name="ppo", ppo={"clip_high": 0.28}, filter="kpop", kpop_threshold=0.05, filter_ratio="total"
    )
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
    cfg = LossConfig(name=name, **({} if name == "gspo" else {name: {"aggregation": aggregation}}))
    _b = lambda *a: {**_batch(*a), "train_at_behavior_logp": jnp.asarray(behav) + 0.01}  # noqa: E731
    full = _grad(cfg, _b(logp, behav, mask, [1.0, -0.5, 2.0]), logp)
    half = _grad(cfg, _b(logp, behav, mask, [1.0, -0.5, 2.0], [0.5, 1, 1]), logp)
    if name == "gspo":  # sequence-level: its objective is always a per-sequence mean
        assert np.abs(full[0]).max() > 0
    np.testing.assert_allclose(half[0], 0.5 * full[0], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(half[1:], full[1:], rtol=1e-5, atol=1e-8)
    zero = _grad(cfg, _b(logp, behav, mask, [1.0, -0.5, 2.0], [0.0, 1, 1]), logp)
    drop = _grad(cfg, _b(logp, behav, mask * np.array([[0], [1], [1]]), [1.0, -0.5, 2.0]), logp)
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
    half = _grad(
        LossConfig(name=name, filter="none", negative_scale=0.5), _batch(logp, logp, mask, [1.0, -1.0]), logp
    )
    zero = _grad(
        LossConfig(name=name, filter="none", negative_scale=0.0), _batch(logp, logp, mask, [1.0, -1.0]), logp
    )
    np.testing.assert_array_equal(half[0], full[0])  # the better-than-average row is untouched
    np.testing.assert_allclose(half[1], 0.5 * full[1], rtol=1e-6)
    assert np.all(zero[1] == 0.0) and np.all(full[1] != 0.0)
    with pytest.raises(ValueError, match=r"loss.negative_scale=1.5 is invalid"):
        LossConfig(negative_scale=1.5)


def test_tis_weights_tokens_by_the_truncated_mismatch_ratio():
    """tis_cap: each token's advantage is scaled by min(pi_v / mu, cap), with no gradient."""
    logp = jnp.log(jnp.array([[0.5, 0.4, 0.3]]))
    behav = jnp.log(jnp.array([[0.5, 0.2, 0.1]]))  # mismatch ratios 1, 2, 3 (pi_v = logp here)
    batch = {**_batch(logp, behav, [[1, 1, 1]], [1.0]), "train_at_behavior_logp": logp}
    plain = _grad(LossConfig(name="cispo", cispo={"clip_high": 10.0}), batch, logp)
    tis = _grad(LossConfig(name="cispo", cispo={"clip_high": 10.0}, tis_cap=2.5), batch, logp)
    np.testing.assert_allclose(tis[0], plain[0] * np.array([1.0, 2.0, 2.5]), rtol=1e-5)
    _, m = policy_objective(LossConfig(name="cispo", tis_cap=2.5), batch, logp)
    assert float(m["tis/truncated"]) == pytest.approx(1 / 3)


def test_decoupled_ppo_weights_by_prox_over_behaviour_and_clips_around_prox():
    logp = jnp.log(jnp.array([[0.5, 0.4]]))
    behav = jnp.log(jnp.array([[0.25, 0.4]]))  # behaviour weights pi_prox / mu: 2, 1
    batch = _batch(logp, behav, [[1, 1]], [1.0])
    g = _grad(LossConfig(name="decoupled_ppo"), batch, logp)  # prox = the step-start logp
    g_ppo = _grad(LossConfig(name="ppo", ppo={"clip_high": 10.0}), _batch(logp, logp, [[1, 1]], [1.0]), logp)
    np.testing.assert_allclose(g[0], g_ppo[0] * np.array([2.0, 1.0]), rtol=1e-5)
    moved = {**batch, "prox_logp": logp - 0.5}  # u = e^0.5 > 1.2: clipped, no gradient (A > 0)
    assert np.all(_grad(LossConfig(name="decoupled_ppo"), moved, logp) == 0.0)
    capped = LossConfig(name="decoupled_ppo", decoupled_ppo={"behavior_cap": 1.5})
    _, m = policy_objective(capped, batch, logp)
    assert float(m["loss/masked/behavior_cap"]) == pytest.approx(0.5)
