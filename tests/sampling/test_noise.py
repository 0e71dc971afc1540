"""The sampler's categorical draw: the unrolled Threefry equals JAX's, and draws follow softmax."""

import jax
import jax.extend.random
import jax.numpy as jnp
import numpy as np

from agentjax.sampling.noise import categorical, gumbel, threefry2x32


def test_threefry_is_jax_threefry_bitwise():
    rng = np.random.default_rng(0)
    for _ in range(3):
        key = rng.integers(0, 2**32, 2, dtype=np.uint32)
        ctr = rng.integers(0, 2**32, 16, dtype=np.uint32)
        want = jax.extend.random.threefry_2x32(jnp.asarray(key), jnp.asarray(ctr))
        y0, y1 = threefry2x32(key[0], key[1], ctr[:8], ctr[8:])
        np.testing.assert_array_equal(np.concatenate([y0, y1]), want)


def test_draws_follow_the_distribution_and_respect_exclusions():
    p = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0])
    n = 100_000
    logits = jnp.broadcast_to(jnp.log(jnp.asarray(p, jnp.float32)), (n, 6))
    y = np.asarray(categorical(jax.random.split(jax.random.key(3), n), logits))
    freq = np.bincount(y, minlength=6) / n
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(0.25 / n))  # 4 sigma
    assert freq[5] == 0  # -inf logits are never drawn


def test_rows_are_independent_streams_and_deterministic():
    keys = jax.random.split(jax.random.key(0), 4)
    g = np.asarray(gumbel(keys, 7))
    assert g.shape == (4, 7) and np.isfinite(g).all()
    assert len({tuple(r) for r in g.round(6)}) == 4  # no two rows share noise
    np.testing.assert_array_equal(g[2:3], gumbel(keys[2:3], 7))  # a row's noise ignores batch-mates
    np.testing.assert_array_equal(g, gumbel(keys, 7))
    # Gumbel(0, 1): mean = Euler's gamma, variance = pi^2 / 6
    big = np.asarray(gumbel(jax.random.split(jax.random.key(1), 2000), 64)).ravel()
    assert abs(big.mean() - 0.5772) < 0.02 and abs(big.var() - np.pi**2 / 6) < 0.06
