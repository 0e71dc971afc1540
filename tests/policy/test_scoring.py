"""Learner-side scoring: alignment, transforms, batch invariance and the exact-mode custom VJP."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from agentjax.policy.model import forward, init_params
from agentjax.policy.scoring import pad_positions, token_logprobs
from agentjax.sampling.transforms import Temperature
from agentjax.testing.models import tiny_dense, tiny_moe

EXACT = tiny_dense(exact_tile=4)
STANDARD = EXACT.replace(exact_tile=0)
B, W = 3, 16
LENS = np.array([16, 9, 12])
score = jax.jit(token_logprobs, static_argnames=("config", "transform"))


@pytest.fixture(scope="module")
def batch():
    params = init_params(EXACT, jax.random.key(0))
    tokens = np.random.default_rng(0).integers(0, 64, (B, W)).astype(np.int32)
    positions = np.asarray(pad_positions(LENS, W, EXACT.max_seq_len))
    return params, tokens, positions


def test_pad_positions_send_padding_past_the_sequence():
    np.testing.assert_array_equal(pad_positions(np.array([2, 0]), 3, 9), [[0, 1, 9], [9, 9, 9]])


def test_alignment_and_temperature_by_hand(batch):
    params, tokens, positions = batch
    lp, raw = score(params, tokens, positions, config=STANDARD, transform=Temperature(0.5))
    for i in range(B):
        n = LENS[i]
        z = np.asarray(
            forward(params, tokens[i : i + 1, :n], np.arange(n)[None], config=STANDARD)[0][0], np.float64
        )
        logsm = lambda a: (
            a - a.max(-1, keepdims=True) - np.log(np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True))
        )
        idx = np.arange(n - 1)
        np.testing.assert_allclose(raw[i, 1:n], logsm(z)[idx, tokens[i, 1:n]], atol=1e-5)
        np.testing.assert_allclose(lp[i, 1:n], logsm(2 * z)[idx, tokens[i, 1:n]], atol=1e-5)
    np.testing.assert_array_equal(lp[:, 0], 0.0)
    with pytest.raises(ValueError, match="must match"):
        token_logprobs(params, tokens, positions[:, :3], config=STANDARD)


def test_exact_scores_do_not_depend_on_batch_or_padding(batch):
    params, tokens, positions = batch
    lp, _ = score(params, tokens, positions, config=EXACT)
    lp_std, _ = score(params, tokens, positions, config=STANDARD)
    real = positions < EXACT.max_seq_len
    np.testing.assert_allclose(lp[real], lp_std[real], atol=1e-5)  # same function, other kernels
    # Row 1 alone, with different batch-mates, and left-padded: bitwise the same.
    n = LENS[1]
    alone, _ = score(params, tokens[1:2], positions[1:2], config=EXACT)
    np.testing.assert_array_equal(alone[0, :n], lp[1, :n])
    left = np.zeros_like(tokens)
    left[:, W - n :] = tokens[1, :n]  # every row: row 1 left-padded
    left_pos = np.full_like(positions, EXACT.max_seq_len)
    left_pos[:, W - n :] = np.arange(n)
    mates = np.stack([tokens[2], left[0], tokens[0]])
    mates_pos = np.stack([positions[2], left_pos[0], positions[0]])
    got, _ = score(params, mates, mates_pos, config=EXACT)
    np.testing.assert_array_equal(got[1, W - n + 1 :], lp[1, 1:n])


def _grads(params, tokens, positions, mask, config, routes=None):
    def loss(p):
        lp, raw = token_logprobs(p, tokens, positions, config=config, routes=routes)
        return jnp.sum(mask * (lp + 0.5 * raw)), lp

    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)


def _rel_err(a, b):
    fa, fb = ravel_pytree(a)[0], ravel_pytree(b)[0]
    return float(jnp.linalg.norm(fa - fb) / jnp.linalg.norm(fb))


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_exact_mode_value_is_exact_and_gradient_is_standard(batch, moe):
    _, tokens, positions = batch
    exact = tiny_moe(exact_tile=4) if moe else EXACT
    params = init_params(exact, jax.random.key(1))
    mask = jnp.asarray(positions < exact.max_seq_len, jnp.float32).at[:, 0].set(0.0)
    routes = None
    if moe:  # replay the exact forward's own routes on both paths
        fwd = jax.jit(forward, static_argnames="config")
        routes = fwd(params, tokens, positions, config=exact)[2]["routes"]
    (_, lp_e), g_e = _grads(params, tokens, positions, mask, exact, routes)
    (_, lp_s), g_s = _grads(params, tokens, positions, mask, exact.replace(exact_tile=0), routes)
    value, _ = score(params, tokens, positions, config=exact, routes=routes)
    np.testing.assert_array_equal(lp_e, value)  # the forward value is the exact path, bitwise
    assert not np.array_equal(lp_e, lp_s)  # ... which the standard path is not
    err = _rel_err(g_e, g_s)
    assert err < 1e-4, err
    # The gradient is that of the exact value: a central difference along a random direction.
    flat, unravel = ravel_pytree(params)
    d = jax.random.normal(jax.random.key(2), flat.shape)
    f = lambda x: float(
        jnp.sum(
            mask
            * sum(
                score(unravel(x), tokens, positions, config=exact, routes=routes)[k] * w
                for k, w in ((0, 1.0), (1, 0.5))
            )
        )
    )
    eps = 1e-3
    fd = (f(flat + eps * d) - f(flat - eps * d)) / (2 * eps)
    np.testing.assert_allclose(fd, float(jnp.dot(ravel_pytree(g_e)[0], d)), rtol=2e-2)
