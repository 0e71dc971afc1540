"""masked_mean, aggregate and masked_fractions: hand-computed values, padding, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import objectives
from agentjax.objectives import AGGREGATION_MODES, masked_fractions

# Module-level jitted versions: one compile per function instead of op-by-op eager dispatch
# (slow on a loaded CPU); the eager path is compared against them in the *_under_jit tests.
masked_mean = jax.jit(objectives.masked_mean, static_argnames="axis")
aggregate = jax.jit(objectives.aggregate, static_argnames=("mode", "max_len"))

X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
MASK = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], np.float32)


def test_masked_mean_values():
    m = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], np.float32)
    np.testing.assert_allclose(masked_mean(X, m), 2.0)
    np.testing.assert_allclose(masked_mean(X, m, axis=-1), [2.0, 0.0])  # empty row -> 0, not NaN
    np.testing.assert_allclose(masked_mean(X, MASK, axis=0), [2.5, 3.5, 3.0])
    np.testing.assert_allclose(masked_mean(X, np.zeros_like(X)), 0.0)
    # Bool masks are accepted; mask values act as weights.
    np.testing.assert_allclose(masked_mean(X, MASK.astype(bool)), 15.0 / 5.0)
    np.testing.assert_allclose(masked_mean(np.array([1.0, 3.0]), np.array([3.0, 1.0])), 1.5)


def test_masked_mean_ignores_nan_and_inf_in_masked_out_entries():
    x = jnp.array([[1.0, jnp.nan, 3.0], [jnp.inf, -jnp.inf, 6.0]])
    m = jnp.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(masked_mean(x, m), 10.0 / 3.0, rtol=1e-6)
    g = jax.grad(lambda x: masked_mean(x, m))(x)
    np.testing.assert_allclose(g, m / 3.0)


@pytest.mark.parametrize(
    "mode, max_len, expected",
    [
        ("token_mean", None, 15.0 / 5.0),
        ("seq_mean_token_mean", None, (6.0 / 3.0 + 9.0 / 2.0) / 2.0),
        ("seq_mean_token_sum", None, (6.0 + 9.0) / 2.0),
        ("seq_mean_token_sum_norm", 4, (6.0 / 4.0 + 9.0 / 4.0) / 2.0),
    ],
)
def test_aggregate_modes_match_hand_computed_values(mode, max_len, expected):
    np.testing.assert_allclose(aggregate(X, MASK, mode, max_len=max_len), expected, rtol=1e-6)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_aggregate_padding_invariance(mode):
    """Extra padded tokens and whole padded rows (mask 0, garbage values) change nothing."""
    base = aggregate(X, MASK, mode, max_len=7)
    x_pad = np.full((3, 5), 1e6, np.float32)
    x_pad[:2, :3] = X
    m_pad = np.zeros((3, 5), np.float32)
    m_pad[:2, :3] = MASK
    np.testing.assert_allclose(aggregate(x_pad, m_pad, mode, max_len=7), base, rtol=1e-6)
    # Moving row 1's tokens right (left-padding) does not change anything either.
    x_shift = np.array([[1.0, 2.0, 3.0, 9.0], [9.0, 9.0, 4.0, 5.0]], np.float32)
    m_shift = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]], np.float32)
    np.testing.assert_allclose(aggregate(x_shift, m_shift, mode, max_len=7), base, rtol=1e-6)


def test_aggregate_rejects_unknown_modes_and_a_missing_max_len():
    with pytest.raises(ValueError, match="token_mean.*seq_mean_token_sum_norm"):
        aggregate(X, MASK, "sum")
    with pytest.raises(ValueError, match="max_len"):
        aggregate(X, MASK, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match=r"per_token must have shape \[B, T\]"):
        aggregate(X[0], MASK[0], "token_mean")
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 3\)"):
        aggregate(X, MASK[:, :2], "token_mean")
    with pytest.raises(ValueError, match="floating"):
        aggregate(X.astype(np.int32), MASK, "token_mean")


def test_masked_fractions_by_reason():
    icepop = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # (1, 2) is padding: not counted
    kpop = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    out = masked_fractions(MASK, icepop=icepop, kpop=kpop)
    np.testing.assert_allclose(out["masked/icepop"], 2.0 / 5.0)
    np.testing.assert_allclose(out["masked/kpop"], 2.0 / 5.0)
    np.testing.assert_allclose(out["masked/any"], 3.0 / 5.0)
    np.testing.assert_allclose(out["kept_fraction"], 2.0 / 5.0)


def test_core_functions_give_the_same_values_under_jit():
    for mode in AGGREGATION_MODES:
        eager = objectives.aggregate(X, MASK, mode, max_len=4)
        np.testing.assert_allclose(aggregate(X, MASK, mode, max_len=4), eager, rtol=1e-6)
    np.testing.assert_allclose(masked_mean(X, MASK, axis=1), objectives.masked_mean(X, MASK, 1))
