"""Group/RLOO advantages, P_same, GAE and discounts_from."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import objectives
from agentjax.objectives import discounts_from, needs_bootstrap, prob_same_group
from agentjax.trajectory import StopReason

# Module-level jitted versions: one compile per function instead of op-by-op eager dispatch
# (slow on a loaded CPU); the eager path is compared against them in the *_under_jit tests.
group_advantages = jax.jit(objectives.group_advantages, static_argnames=("scale", "eps"))
rloo_advantages = jax.jit(objectives.rloo_advantages)
gae = jax.jit(objectives.gae)

REWARDS = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], np.float32)


def test_group_advantages_std_and_none():
    a = group_advantages(REWARDS)
    np.testing.assert_allclose(a[0], np.array([1, -1, -1, 1]) * 0.5 / (0.5 + 1e-6), rtol=1e-6)
    np.testing.assert_array_equal(a[1], 0.0)  # an all-equal group carries no signal
    # ... exactly, even where float rounding makes the mean differ from the values.
    np.testing.assert_array_equal(group_advantages(np.full((1, 3), 0.1, np.float32)), 0.0)
    np.testing.assert_array_equal(rloo_advantages(np.full((1, 3), 0.1, np.float32)), 0.0)
    np.testing.assert_allclose(group_advantages(REWARDS, scale="none")[0], [0.5, -0.5, -0.5, 0.5])
    # Population std (ddof=0): rewards [0, 3] have std 1.5, not 2.12.
    np.testing.assert_allclose(group_advantages([[0.0, 3.0]], eps=0.0), [[-1.0, 1.0]])


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="std.*none"):
        group_advantages(REWARDS, scale="max")
    with pytest.raises(ValueError, match=r"rewards must have shape \[P, G\]"):
        group_advantages(REWARDS[0])


def test_rloo_advantage_is_reward_minus_the_others_mean():
    a = rloo_advantages(REWARDS)
    np.testing.assert_allclose(a[0], [2 / 3, -2 / 3, -2 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(a[1], 0.0)
    np.testing.assert_allclose(rloo_advantages([[2.0, 4.0, 9.0]]), [[-4.5, -1.5, 6.0]])
    with pytest.raises(ValueError, match="G >= 2"):
        rloo_advantages([[1.0], [2.0]])


def test_p_same_identity_and_monte_carlo():
    """P_same = p^G + (1 - p)^G; G = 8: 0.78% at p = 0.5, 92.3% at p = 0.01 (seed, s5)."""
    np.testing.assert_allclose(prob_same_group(0.5, 8), 0.0078125, rtol=1e-6)
    np.testing.assert_allclose(prob_same_group(0.01, 8), 0.99**8 + 0.01**8, rtol=1e-6)
    np.testing.assert_allclose(prob_same_group(0.01, 8), 0.923, atol=5e-4)
    rng = np.random.default_rng(0)
    n = 20000
    for p, tol in ((0.5, 0.003), (0.01, 0.008), (0.2, 0.005)):
        rewards = (rng.random((n, 8)) < p).astype(np.float32)
        no_signal = np.all(np.asarray(group_advantages(rewards)) == 0.0, axis=1).mean()
        assert abs(no_signal - float(prob_same_group(p, 8))) < tol, (p, no_signal)


R = np.array([0.0, 0.0, 1.0], np.float32)
V = np.array([0.5, 0.6, 0.7, 1.0], np.float32)  # V[3] = bootstrap value V(c_T)


def test_gae_terminal_by_hand():
    d = discounts_from(["finished"], 0.9, lengths=[3])[0]
    np.testing.assert_allclose(d, [0.9, 0.9, 0.0])
    adv, ret = gae(R, d, V, 0.5)
    # delta = [0.04, 0.03, 0.3]; A2 = 0.3, A1 = 0.03 + 0.45 * 0.3, A0 = 0.04 + 0.45 * A1.
    np.testing.assert_allclose(adv, [0.11425, 0.165, 0.3], rtol=1e-5)
    np.testing.assert_allclose(ret, [0.61425, 0.765, 1.0], rtol=1e-5)
    # Terminal: the bootstrap entry is ignored.
    adv2, _ = gae(R, d, V.copy() * np.array([1, 1, 1, 50.0], np.float32), 0.5)
    np.testing.assert_allclose(adv2, adv)


def test_gae_truncated_bootstraps_by_hand():
    reasons = [StopReason.ROUND_BUDGET_PAUSED]
    d = discounts_from(reasons, 0.9, lengths=[3])[0]
    np.testing.assert_allclose(d, [0.9, 0.9, 0.9])
    assert needs_bootstrap(reasons).tolist() == [True]
    adv, _ = gae(R, d, V, 0.5)
    # delta2 = 1 + 0.9 * 1.0 - 0.7 = 1.2; A1 = 0.03 + 0.45 * 1.2; A0 = 0.04 + 0.45 * A1.
    np.testing.assert_allclose(adv, [0.2965, 0.57, 1.2], rtol=1e-5)


def test_gae_lambda_one_gamma_one_is_monte_carlo():
    adv, ret = gae(R, np.array([1.0, 1.0, 0.0]), V, 1.0)
    np.testing.assert_allclose(ret, [1.0, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(adv, 1.0 - V[:3], rtol=1e-6)


def test_gae_batched_padding_with_mask():
    """vmap over padded trajectories gives each trajectory's unpadded result."""
    d = discounts_from(["round_budget_paused", "finished"], 0.9, lengths=[3, 2])
    np.testing.assert_allclose(d, [[0.9, 0.9, 0.9], [0.9, 0.0, 0.0]])
    d = np.pad(d, ((0, 0), (0, 1)))  # pad to T = 4
    rewards = np.array([[0.0, 0.0, 1.0, 7.0], [0.5, 2.0, 7.0, 7.0]], np.float32)
    values = np.array([[0.5, 0.6, 0.7, 1.0, 5.0], [0.1, 0.2, 3.0, 5.0, 5.0]], np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    adv, ret = jax.vmap(lambda r, d, v, m: gae(r, d, v, 0.5, mask=m))(rewards, d, values, mask)
    want0, _ = gae(R, [0.9, 0.9, 0.9], V, 0.5)
    want1, wret1 = gae(rewards[1, :2], [0.9, 0.0], values[1, :3], 0.5)
    np.testing.assert_allclose(adv[0, :3], want0, rtol=1e-6)
    np.testing.assert_allclose(adv[1, :2], want1, rtol=1e-6)
    np.testing.assert_allclose(ret[1, :2], wret1, rtol=1e-6)
    np.testing.assert_allclose(adv[mask == 0], 0.0)
    # Without the mask the padded step would leak -V(c_T) into the truncated trajectory.
    leaky, _ = gae(rewards[0], d[0], values[0], 0.5)
    assert not np.allclose(leaky[:3], want0)


def test_jit_agrees_and_gae_errors():
    d = np.array([0.9, 0.9, 0.0], np.float32)
    for a, b in zip(gae(R, d, V, 0.5), objectives.gae(R, d, V, 0.5), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    for f in ("group_advantages", "rloo_advantages"):
        eager = getattr(objectives, f)(REWARDS)
        np.testing.assert_allclose(globals()[f](REWARDS), eager, rtol=1e-6)
    with pytest.raises(ValueError, match=r"values must have shape \[T \+ 1\] = \(4,\)"):
        gae(R, d, V[:3], 0.5)
    with pytest.raises(ValueError, match=r"discounts must have shape \[T\]"):
        gae(R, d[:2], V, 0.5)
    with pytest.raises(ValueError, match=r"rewards must have shape \[T\]"):
        gae(R[None], d, V, 0.5)


def test_discounts_from_reasons():
    reasons = ["finished", "task_cap", "agent_error", "reward_hack", "round_budget_paused"]
    np.testing.assert_allclose(discounts_from(reasons, 0.99), [0, 0, 0, 0, 0.99])
    assert discounts_from(reasons, 0.99).dtype == np.float32
    assert needs_bootstrap(reasons).tolist() == [False, False, False, False, True]
    assert discounts_from([StopReason.FINISHED], 0.5).tolist() == [0.0]
    # A truncated trajectory never gets a zero, even with lengths.
    d = discounts_from(["round_budget_paused", "finished"], 0.95, lengths=[1, 3])
    np.testing.assert_allclose(d, [[0.95, 0.0, 0.0], [0.95, 0.95, 0.0]])


def test_discounts_from_errors():
    with pytest.raises(ValueError, match="unknown stop reason 'timeout'.*round_budget_paused"):
        discounts_from(["finished", "timeout"], 0.9)
    for reason in ("infra_fault", "cancelled", "rejected_stale"):
        with pytest.raises(ValueError, match="masked out"):
            discounts_from([reason], 0.9)
    with pytest.raises(ValueError, match="gamma"):
        discounts_from(["finished"], 1.5)
    with pytest.raises(ValueError, match="lengths"):
        discounts_from(["finished"], 0.9, lengths=[2, 3])
    with pytest.raises(ValueError, match="lengths"):
        discounts_from(["finished"], 0.9, lengths=[0])
    with pytest.raises(ValueError, match="sequence"):
        discounts_from("finished", 0.9)


def test_float16_rewards_are_upcast():
    out = group_advantages(jnp.asarray(REWARDS, jnp.bfloat16))
    assert out.dtype == jnp.float32


def test_a_full_context_is_a_truncation_not_a_terminal_cap():
    """``context_full`` is the system's limit (model.max_seq_len): bootstrapped like a round
    budget, where ``task_cap`` (the agent's failure) is terminal."""
    np.testing.assert_allclose(discounts_from(["context_full", "task_cap"], 0.9), [0.9, 0.0])
    assert needs_bootstrap(["context_full", "task_cap"]).tolist() == [True, False]
