"""Behaviour-version log-probs: the learner's recompute with kept parameter versions splits the
off-policy ratio pi / mu into update x staleness x mismatch, each 1 exactly where it should be.

A stale batch: rows 0-1 were sampled at version 0 by a bf16 sampler, rows 2-3 at version 1 (the
learner's version when the step starts) by the exact f32 sampler. The learner is exact f32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agentjax import objectives as obj
from agentjax.learner import versions as pv
from agentjax.learner.objective import LossConfig
from agentjax.learner.step import behaviour_logprobs, init_train_state, make_train_step
from agentjax.policy import init_params
from agentjax.policy.scoring import token_logprobs
from agentjax.sampling.precision import SamplerPrecision, sampler_model
from agentjax.testing.models import tiny_dense

B, T = 4, 16
LEARNER = tiny_dense(exact_tile=4)
BF16 = sampler_model(LEARNER, SamplerPrecision(compute_dtype="bfloat16", head_dtype="bfloat16"))
_score = jax.jit(lambda p, t, pos, config: token_logprobs(p, t, pos, config=config)[0], static_argnums=3)


@pytest.fixture(scope="module")
def stale_batch():
    v0 = init_params(LEARNER, jax.random.key(0))
    v1 = jax.tree.map(lambda x: x + 0.02 * jax.random.normal(jax.random.key(1), x.shape), v0)
    tokens = jax.random.randint(jax.random.key(2), (B, T), 0, LEARNER.vocab_size)
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    mask = np.zeros((B, T), np.float32)
    mask[:, 4:] = 1.0
    mu = jnp.concatenate([_score(v0, tokens, pos, BF16)[:2], _score(v1, tokens, pos, LEARNER)[2:]])
    ver = jnp.asarray(np.repeat([[0], [0], [1], [1]], T, axis=1), jnp.int32)
    batch = {
        "tokens": tokens,
        "positions": pos,
        "loss_mask": jnp.asarray(mask),
        "behav_logp": mu,
        "advantages": jnp.array([1.0, -1.0, 0.5, -0.5]),
        "weight": jnp.ones(B),
        "behaviour_version": ver,
    }
    kept = pv.keep(pv.keep({}, 0, v0, oldest=0), 1, v1, oldest=0)
    return v0, v1, batch, kept


def test_three_factors_of_a_stale_bf16_batch_multiply_to_the_total(stale_batch):
    v0, v1, batch, kept = stale_batch
    behaviour = pv.slots(kept, 3, fallback=v1)
    train_v, covered = behaviour_logprobs(behaviour, batch, model_config=LEARNER, transform=None)
    assert float(covered) == 1.0
    prox = _score(v1, batch["tokens"], batch["positions"], LEARNER)  # the step starts at v1
    step = make_train_step(LEARNER, LossConfig(name="hispo"), optax.sgd(0.5))
    new, metrics = step(init_train_state(v1, optax.sgd(0.5), 0), batch, None, behaviour)
    cur = _score(new.params, batch["tokens"], batch["positions"], LEARNER)  # after one update
    update, stale, mismatch, total = (
        np.asarray(x) for x in obj.decompose_three(cur, prox, train_v, batch["behav_logp"])
    )
    m = np.asarray(batch["loss_mask"]) > 0
    old, fresh = m.copy(), m.copy()
    old[2:], fresh[:2] = False, False
    # mismatch: bf16 rows differ from 1, exact-f32 rows are exactly 1 (bitwise equal engines)
    assert np.abs(mismatch[old] - 1).max() > 1e-4 and np.all(mismatch[fresh] == 1.0)
    # staleness: version-0 rows differ, version-1 rows (= the step's start) are exactly 1
    assert np.abs(stale[old] - 1).max() > 1e-4 and np.all(stale[fresh] == 1.0)
    # update: the step moved the policy on every row
    assert np.abs(update[m] - 1).max() > 1e-4 and np.abs(update[fresh] - 1).max() > 1e-4
    np.testing.assert_allclose((update * stale * mismatch)[m], total[m], rtol=2e-5)
    # the loop's metrics are the same factors (at the step's start, update = 1 exactly)
    assert float(metrics["ratio/update"]) == 1.0 and float(metrics["behaviour/covered"]) == 1.0
    np.testing.assert_allclose(float(metrics["ratio/mismatch"]), mismatch[m].mean(), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["ratio/staleness"]), stale[m].mean(), rtol=1e-5)


def test_a_batch_version_that_is_not_kept_is_a_clear_error(stale_batch):
    _, _, batch, kept = stale_batch
    with pytest.raises(RuntimeError, match=r"behaviour versions \[0\] of this batch are not kept"):
        pv.check_covered({1: kept[1]}, np.asarray(batch["behaviour_version"]), np.asarray(batch["loss_mask"]))
    assert pv.slot_count(max_version_gap=2, sync_every=1) == 3
    params, versions = pv.slots(kept, 3, fallback="x")
    assert versions.tolist() == [1, 0, -1] and params[2] == "x"
