"""IcePop and KPop filters, binary KL."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import objectives
from agentjax.objectives import icepop_mask, kpop_mask, masked_fractions

binary_kl = jax.jit(objectives.binary_kl)  # one compile instead of op-by-op dispatch


def _bkl(p, q):  # float64 reference, written out from the formula
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def test_icepop_keeps_exactly_the_tokens_inside_its_band():
    infer = np.zeros((2, 3), np.float32)
    train = np.log(np.array([[0.4, 0.51, 1.0], [1.9, 2.1, 10.0]])).astype(np.float32)
    keep = icepop_mask(train, infer, low=0.5, high=2.0)
    np.testing.assert_array_equal(keep, [[0, 1, 1], [1, 0, 0]])
    assert keep.dtype == jnp.float32
    # Bounds are inclusive: a ratio of exactly 1 passes low = high = 1.
    np.testing.assert_array_equal(icepop_mask(train, train, low=1.0, high=1.0), np.ones((2, 3)))
    # The band is on the ratio, whatever the probability: 0.001 vs 0.002 is rejected too.
    keep = icepop_mask(np.log([[0.002, 0.8]]), np.log([[0.001, 0.4]]), low=0.5, high=1.5)
    np.testing.assert_array_equal(keep, [[0, 0]])
    with pytest.raises(ValueError, match="low <= high"):
        icepop_mask(train, infer, low=2.0, high=0.5)
    with pytest.raises(ValueError, match="infer_logp must have the shape of train_logp"):
        icepop_mask(train, infer[:1], low=0.5, high=2.0)


def test_binary_kl_values_and_edges():
    np.testing.assert_allclose(binary_kl(0.5, 0.25), _bkl(0.5, 0.25), rtol=1e-6)
    np.testing.assert_allclose(binary_kl(0.5, 0.25), 0.143841, rtol=1e-5)
    np.testing.assert_allclose(binary_kl(0.4, 0.8), 0.381908, rtol=1e-5)
    edges = objectives.binary_kl(
        jnp.array([0.0, 1.0, 0.0, 1.0, 0.5, 0.5]), jnp.array([0.0, 1.0, 0.5, 0.5, 0.0, 1.0])
    )
    np.testing.assert_allclose(edges[:4], [0.0, 0.0, np.log(2), np.log(2)], rtol=1e-6)
    assert np.all(np.isinf(edges[4:])) and not np.any(np.isnan(edges))
    np.testing.assert_allclose(binary_kl(0.3, 0.3), 0.0, atol=1e-7)


def test_kpop_probability_dependent_region_and_both_directions():
    p = np.array([[0.001, 0.4, 0.9, 0.5]])
    q = np.array([[0.002, 0.8, 0.905, 0.5]])
    train, infer = np.log(p).astype(np.float32), np.log(q).astype(np.float32)
    # Ratio 2 at p = 0.001 is harmless (KL ~ 3e-4), at p = 0.4 it is not (KL ~ 0.38).
    np.testing.assert_array_equal(kpop_mask(train, infer, threshold=0.01), [[1, 0, 1, 1]])
    fwd, bwd = _bkl(0.001, 0.002), _bkl(0.002, 0.001)
    assert fwd < bwd  # 3.07e-4 < 3.87e-4
    thr = (fwd + bwd) / 2  # forward passes, backward fails: rejected
    np.testing.assert_array_equal(kpop_mask(train, infer, threshold=thr)[0, 0], 0.0)
    np.testing.assert_array_equal(kpop_mask(infer, train, threshold=thr)[0, 0], 0.0)
    np.testing.assert_array_equal(kpop_mask(train, infer, threshold=bwd * 1.01)[0, 0], 1.0)
    with pytest.raises(ValueError, match="threshold"):
        kpop_mask(train, infer, threshold=-1.0)


def test_kpop_is_precise_for_confident_tokens():
    """1 - p is computed as -expm1(logp): p = 1 - 1e-6 vs 1 - 2e-6 is not rounded to p = q = 1."""
    train = np.array([np.log1p(-1e-6), 0.0], np.float32)
    infer = np.array([np.log1p(-2e-6), np.log1p(-0.5)], np.float32)
    kl = _bkl(1 - 1e-6, 1 - 2e-6)  # ~3.1e-7, both directions of the same order
    keep = kpop_mask(train, infer, threshold=kl * 3)
    np.testing.assert_array_equal(keep, [1.0, 0.0])  # p = 1 vs q = 0.5: infinite KL, rejected
    np.testing.assert_array_equal(kpop_mask(train, infer, threshold=kl / 3)[0], 0.0)


def test_filters_report_and_jit_agree():
    train = np.log(np.array([[0.3, 0.5, 0.9], [0.01, 0.6, 0.2]])).astype(np.float32)
    infer = np.log(np.array([[0.3, 0.2, 0.91], [0.03, 0.6, 0.9]])).astype(np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
    f = jax.jit(lambda t, i: (icepop_mask(t, i, low=0.5, high=2.0), kpop_mask(t, i, threshold=0.05)))
    eager = (icepop_mask(train, infer, low=0.5, high=2.0), kpop_mask(train, infer, threshold=0.05))
    chex.assert_trees_all_equal(eager, f(train, infer))
    ice, kp = eager
    np.testing.assert_array_equal(ice, [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(kp, [[1, 0, 1], [1, 1, 0]])  # 0.01 vs 0.03: KL ~ 0.01
    report = masked_fractions(mask, icepop=ice, kpop=kp)
    np.testing.assert_allclose(report["masked/icepop"], 2 / 5)
    np.testing.assert_allclose(report["masked/kpop"], 1 / 5)
    np.testing.assert_allclose(report["masked/any"], 2 / 5)
