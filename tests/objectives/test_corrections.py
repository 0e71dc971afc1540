"""Importance weights, truncation, the HisPO decomposition, ESS, KL estimators, label noise."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import objectives
from agentjax.objectives import decompose_ratio, label_noise_success, truncate

# Module-level jitted versions: one compile per function instead of op-by-op eager dispatch
# (slow on a loaded CPU); the eager path is compared against them in test_jit_agrees.
importance_weights = jax.jit(objectives.importance_weights, static_argnames="level")
ess = jax.jit(objectives.ess)
kl_penalty = jax.jit(objectives.kl_penalty, static_argnames="kind")

LN = np.log
# logp_target - logp_behavior; token (1, 2) is padding holding garbage.
BEHAVIOR = LN(np.array([[0.2, 0.5, 0.1], [0.25, 0.4, 0.3]])).astype(np.float32)
TARGET = (BEHAVIOR + LN(np.array([[2.0, 0.5, 3.0], [2.0, 2.0, 99.0]]))).astype(np.float32)
MASK = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], np.float32)


def test_importance_weights_levels_by_hand():
    np.testing.assert_allclose(
        importance_weights(TARGET, BEHAVIOR, MASK, level="token"),
        [[2.0, 0.5, 3.0], [2.0, 2.0, 1.0]],
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        importance_weights(TARGET, BEHAVIOR, MASK, level="sequence"), [3.0, 4.0], rtol=1e-5
    )
    np.testing.assert_allclose(
        importance_weights(TARGET, BEHAVIOR, MASK, level="geometric"),
        [3.0 ** (1 / 3), 2.0],
        rtol=1e-5,
    )
    with pytest.raises(ValueError, match="token.*sequence.*geometric"):
        importance_weights(TARGET, BEHAVIOR, MASK, level="prefix")
    with pytest.raises(ValueError, match=r"logp_behavior must have shape \[B, T\] = \(2, 3\)"):
        importance_weights(TARGET, BEHAVIOR[:, :2], MASK, level="token")


def test_products_explode_1_02_to_the_100_and_500():
    """Seed s3: 1.02^100 ~ 7.24 and 1.02^500 ~ 19956, summed in log space without overflow."""
    behavior = jnp.full((2, 500), -2.0)
    target = behavior + jnp.log(1.02)
    mask = jnp.stack([jnp.arange(500) < 100, jnp.ones(500, bool)]).astype(jnp.float32)
    f = jax.jit(lambda t, b, m: importance_weights(t, b, m, level="sequence"))
    w = f(target, behavior, mask)
    np.testing.assert_allclose(w, [1.02**100, 1.02**500], rtol=2e-4)
    np.testing.assert_allclose(w, [7.24, 19956.0], rtol=1e-3)
    geo = importance_weights(target, behavior, mask, level="geometric")
    np.testing.assert_allclose(geo, [1.02, 1.02], rtol=1e-5)  # length-invariant
    np.testing.assert_allclose(truncate(w, 10.0), [1.02**100, 10.0], rtol=2e-4)


def test_truncate_caps_weights_and_rejects_a_non_positive_cap():
    np.testing.assert_allclose(truncate(np.array([0.5, 2.0, 7.0]), 2.0), [0.5, 2.0, 2.0])
    with pytest.raises(ValueError, match="cap"):
        truncate(np.array([1.0]), 0.0)


def test_total_ratio_is_update_times_mismatch():
    infer = LN(np.array([[0.5, 0.2]])).astype(np.float32)
    train_v = infer + LN(np.array([[0.8, 1.25]])).astype(np.float32)
    cur = train_v + LN(np.array([[1.5, 0.6]])).astype(np.float32)
    update, mismatch, total = decompose_ratio(cur, train_v, infer)
    np.testing.assert_allclose(update, [[1.5, 0.6]], rtol=1e-5)
    np.testing.assert_allclose(mismatch, [[0.8, 1.25]], rtol=1e-5)
    np.testing.assert_allclose(total, [[1.2, 0.75]], rtol=1e-5)
    np.testing.assert_allclose(total, np.exp(cur - infer), rtol=1e-5)
    with pytest.raises(ValueError, match="logp_infer must have the shape of logp_current"):
        decompose_ratio(cur, train_v, infer[:, :1])


def test_ess_matches_its_closed_form_with_and_without_a_mask():
    np.testing.assert_allclose(ess(np.ones(8)), 8.0)  # equal weights: ESS = N
    np.testing.assert_allclose(ess(np.full((2, 3), 0.3)), 6.0, rtol=1e-6)
    np.testing.assert_allclose(ess(np.array([1.0, 2.0, 3.0])), 36.0 / 14.0, rtol=1e-6)
    np.testing.assert_allclose(ess(np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0])), 9.0 / 5.0)
    dominated = [float(ess(np.array([w, 1.0, 1.0, 1.0]))) for w in (10.0, 1e3, 1e6)]
    assert dominated[0] > dominated[1] > dominated[2] > 1.0  # approaches 1 as one dominates
    np.testing.assert_allclose(dominated[2], 1.0, atol=1e-5)
    np.testing.assert_allclose(ess(np.ones(3), np.zeros(3)), 0.0)  # empty mask: 0, not NaN
    w = importance_weights(TARGET, BEHAVIOR, MASK, level="token")
    np.testing.assert_allclose(ess(w, MASK), 9.5**2 / (4 + 0.25 + 9 + 4 + 4), rtol=1e-5)


def test_kl_penalty_estimators_by_hand():
    lr = np.array([LN(2.0), -LN(2.0), 0.0], np.float32)
    ref = np.array([-1.0, -2.0, -0.5], np.float32)
    logp = ref + lr
    np.testing.assert_allclose(kl_penalty(logp, ref, "k1"), lr, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(kl_penalty(logp, ref, "k2"), [LN(2) ** 2 / 2, LN(2) ** 2 / 2, 0], rtol=1e-5)
    np.testing.assert_allclose(
        kl_penalty(logp, ref, "k3"), [0.5 - 1 + LN(2), 2 - 1 - LN(2), 0], rtol=1e-5, atol=1e-7
    )
    with pytest.raises(ValueError, match="k1.*k2.*k3"):
        kl_penalty(logp, ref, "k4")
    with pytest.raises(ValueError, match="ref_logp must have the shape of logp"):
        kl_penalty(logp, ref[:2], "k1")


def test_kl_estimators_are_unbiased_for_k1_k3_by_monte_carlo():
    pi, ref = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    exact = float(np.sum(pi * np.log(pi / ref)))  # 0.2749
    a = np.random.default_rng(1).choice(3, size=200_000, p=pi)
    logp, ref_logp = np.log(pi)[a].astype(np.float32), np.log(ref)[a].astype(np.float32)
    for kind in ("k1", "k3"):
        est = float(jnp.mean(kl_penalty(logp, ref_logp, kind)))
        assert abs(est - exact) < 0.01, (kind, est, exact)
    assert float(jnp.min(kl_penalty(logp, ref_logp, "k3"))) >= 0.0


def test_label_noise_identity_and_monte_carlo():
    """Seed s8: p_obs = eta + (1 - 2 eta) p; at eta = 0.2 a 0.2 gap shrinks to 60% (0.12)."""
    np.testing.assert_allclose(label_noise_success(0.7, 0.2), 0.62, rtol=1e-6)
    np.testing.assert_allclose(label_noise_success(0.5, 0.2), 0.5, rtol=1e-6)
    np.testing.assert_allclose(label_noise_success(0.3, 0.0), 0.3, rtol=1e-6)
    np.testing.assert_allclose(label_noise_success(0.3, 0.5), 0.5, rtol=1e-6)
    gap = label_noise_success(0.7, 0.2) - label_noise_success(0.5, 0.2)
    np.testing.assert_allclose(gap / 0.2, 0.6, rtol=1e-5)
    rng = np.random.default_rng(0)
    n, eta = 200_000, 0.2
    observed = []
    for p in (0.7, 0.5):
        success = rng.random(n) < p
        flipped = rng.random(n) < eta
        observed.append(np.mean(success ^ flipped))
        assert abs(observed[-1] - float(label_noise_success(p, eta))) < 0.005
    assert abs((observed[0] - observed[1]) - 0.12) < 0.007


def test_corrections_give_the_same_values_under_jit():
    def all_of_them(t, b, m, o=objectives):
        w = o.importance_weights(t, b, m, level="token")
        return (
            w,
            o.importance_weights(t, b, m, level="sequence"),
            o.importance_weights(t, b, m, level="geometric"),
            o.ess(w, m),
            o.truncate(w, 2.5),
            o.kl_penalty(t, b, "k3"),
            o.decompose_ratio(t, b, b),
            o.label_noise_success(0.7, 0.2),
        )

    f = jax.jit(all_of_them)
    eager = all_of_them(TARGET, BEHAVIOR, MASK)
    chex.assert_trees_all_close(eager, f(TARGET, BEHAVIOR, MASK), rtol=1e-6)


def test_weights_differentiate_through_target_only_when_asked():
    g = jax.jit(jax.grad(lambda t: jnp.sum(importance_weights(t, BEHAVIOR, MASK, level="sequence"))))(
        jnp.asarray(TARGET)
    )
    np.testing.assert_allclose(g, [[3.0, 3.0, 3.0], [4.0, 4.0, 0.0]], rtol=1e-5)
