"""Partial rollout: pause at a budget, resume with recompute / keep, per-token versions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.diagnostics.consistency import learner_inputs, rescore
from agentjax.policy.logprobs import token_logprobs_from_logits
from agentjax.policy.model import forward, init_cache, init_params
from agentjax.sampling.partial import mixed_version, resume, version_segments
from agentjax.sampling.sampler import Sampler, Status
from agentjax.sampling.transforms import (
    Temperature,
    TopK,
    TopP,
    compose,
)
from agentjax.testing.models import tiny_dense

CFG = tiny_dense(exact_tile=4)  # exact kernels: every comparison below is bitwise
B, W = 3, 12
LENS = np.array([8, 3, 5])
T = compose(Temperature(0.9), TopK(40), TopP(0.95))
FIRST, SECOND = 4, 6


@pytest.fixture(scope="module")
def setup():
    params0 = init_params(CFG, jax.random.key(0))
    params1 = jax.tree.map(lambda x: x * 1.05, params0)
    prompts = np.random.default_rng(0).integers(4, 64, (B, W))
    sampler = Sampler(CFG, transform=T)
    state = sampler.extend(params0, sampler.init(B), prompts, LENS, version=0)
    paused, _ = sampler.generate(params0, state, jax.random.key(1), max_new_tokens=FIRST, version=0)
    return params0, params1, sampler, state, paused


def _gen(sampler, params, state, n, version):
    return sampler.generate(params, state, jax.random.key(1), max_new_tokens=n, version=version)


def test_pause_then_resume_same_params_is_seamless(setup):
    params0, _, sampler, state, paused = setup
    np.testing.assert_array_equal(paused.status, Status.BUDGET)
    full, _ = _gen(sampler, params0, state, FIRST + SECOND, 0)
    for mode in ("keep", "recompute"):
        resumed = resume(sampler, params0, paused, version=0, mode=mode)
        out, span = _gen(sampler, params0, resumed, SECOND, 0)
        np.testing.assert_array_equal(span.start, LENS + FIRST)
        for field in ("tokens", "logp", "logp_raw", "version", "kv_version", "length"):
            np.testing.assert_array_equal(getattr(out, field), getattr(full, field), err_msg=mode)


def _versions(state, i):
    n = int(state.length[i])
    return np.asarray(state.version)[i, :n], np.asarray(state.kv_version)[i, :n]


def test_recompute_gives_new_policy_tokens(setup):
    params0, params1, sampler, _, paused = setup
    resumed = resume(sampler, params1, paused, version=1, mode="recompute")
    np.testing.assert_array_equal(resumed.cache_version, 1)
    out, _ = _gen(sampler, params1, resumed, SECOND, 1)
    for i in range(B):
        ver, kv = _versions(out, i)
        np.testing.assert_array_equal(ver, [-1] * LENS[i] + [0] * FIRST + [1] * SECOND)
        np.testing.assert_array_equal(kv, ver)
        gen = ver[LENS[i] :]
        assert version_segments(gen) == [(0, FIRST, 0), (FIRST, FIRST + SECOND, 1)]
    assert not mixed_version(out).any()
    inputs = learner_inputs(out)
    lp0, _ = rescore(params0, inputs, config=CFG, transform=T)
    lp1, _ = rescore(params1, inputs, config=CFG, transform=T)
    ver = np.asarray(out.version)
    np.testing.assert_array_equal(lp0[ver == 0], np.asarray(out.logp)[ver == 0])
    np.testing.assert_array_equal(lp1[ver == 1], np.asarray(out.logp)[ver == 1])


def test_keep_gives_mixed_version_tokens(setup):
    params0, params1, sampler, _, paused = setup
    resumed = resume(sampler, params1, paused, version=1, mode="keep")
    out, _ = _gen(sampler, params1, resumed, SECOND, 1)
    for i in range(B):
        ver, kv = _versions(out, i)
        np.testing.assert_array_equal(ver, [-1] * LENS[i] + [0] * FIRST + [1] * SECOND)
        np.testing.assert_array_equal(kv, [-1] * LENS[i] + [0] * (FIRST + SECOND))
    mixed = mixed_version(out)
    np.testing.assert_array_equal(mixed, np.asarray(out.version) == 1)
    # By hand: the cache of the first L + FIRST - 1 tokens from params0, the rest from params1.
    tokens = jnp.asarray(out.tokens)
    pause = LENS + FIRST
    l = CFG.max_seq_len
    j = np.arange(W + FIRST)[None, :]
    cache = init_cache(CFG, B)
    pos0 = np.where(j < pause[:, None] - 1, j, l)
    _, cache, _ = forward(params0, tokens[:, : W + FIRST], jnp.asarray(pos0), config=CFG, cache=cache)
    pos1 = pause[:, None] - 1 + np.arange(SECOND)[None, :]
    toks1 = jnp.take_along_axis(tokens, jnp.asarray(pos1), axis=1)
    logits, _, _ = forward(params1, toks1, jnp.asarray(pos1), config=CFG, cache=cache)
    targets = jnp.take_along_axis(tokens, jnp.asarray(pos1 + 1), axis=1)
    want, _ = token_logprobs_from_logits(logits, targets, T, tile=CFG.row_tile, exact=CFG.invariant)
    got = np.take_along_axis(np.asarray(out.logp), pos1 + 1, axis=1)
    np.testing.assert_array_equal(got, want)
    # ... which is not policy v1 on the same tokens.
    lp1, _ = rescore(params1, learner_inputs(out), config=CFG, transform=T)
    assert not np.array_equal(np.take_along_axis(lp1, pos1 + 1, axis=1), got)


def test_version_segments_split_where_the_version_changes():
    assert version_segments(np.array([], np.int32)) == []
    assert version_segments(np.array([3, 3, 4, 4, 4, 6])) == [(0, 2, 3), (2, 5, 4), (5, 6, 6)]
