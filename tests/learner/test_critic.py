"""Token-level GAE with truncation bootstrap, the batch fields it reads, and the critic / reference-KL
train step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agentjax import objectives as obj
from agentjax.learner import critic
from agentjax.learner.batching import make_batch
from agentjax.learner.objective import LossConfig
from agentjax.learner.step import init_train_state, make_train_step
from agentjax.policy import init_params
from agentjax.testing.models import tiny_dense
from agentjax.trajectory import StopReason, Trajectory, Turn

GAMMA, LAM = 0.9, 0.8


def _reference_gae(values, mask, reward_at_end, bootstrap, length):
    """objectives.gae on the action tokens only, with V(c_t) = values[t - 1]."""
    acts = np.flatnonzero(mask[:length])
    v = [values[t - 1] for t in acts] + [values[length - 1] if bootstrap else 0.0]
    r = np.zeros(len(acts))
    r[-1] = reward_at_end
    disc = np.full(len(acts), GAMMA)
    adv, ret = obj.gae(jnp.asarray(r), jnp.asarray(disc), jnp.asarray(v), LAM)
    return acts, np.asarray(adv), np.asarray(ret)


@pytest.mark.parametrize("bootstrap", [0.0, 1.0])
def test_token_gae_equals_gae_over_the_action_tokens(bootstrap):
    rng = np.random.default_rng(0)
    T, n = 12, 10  # two padding positions
    mask = np.zeros((1, T), np.float32)
    mask[0, [2, 3, 6, 7, 8]] = 1.0  # two turns; observation tokens 4-5 in between
    values = rng.normal(size=(1, T)).astype(np.float32)
    reward = np.zeros((1, T), np.float32)
    reward[0, 8] = 0.0 if bootstrap else 1.0  # a cut row carries no reward
    adv, ret = critic.token_gae(
        jnp.asarray(values),
        jnp.asarray(mask),
        jnp.asarray(reward),
        jnp.array([bootstrap]),
        jnp.array([n]),
        gamma=GAMMA,
        lam=LAM,
    )
    acts, want_adv, want_ret = _reference_gae(values[0], mask[0], reward[0, 8], bootstrap, n)
    np.testing.assert_allclose(np.asarray(adv)[0, acts], want_adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ret)[0, acts], want_ret, rtol=1e-5, atol=1e-6)
    off = np.ones(T, bool)
    off[acts] = False
    assert np.all(np.asarray(adv)[0, off] == 0) and np.all(np.asarray(ret)[0, off] == 0)


def test_bootstrap_reads_the_critic_not_a_zero():
    values = jnp.array([[0.0, 0.0, 5.0]])
    mask = jnp.array([[0.0, 1.0, 0.0]])  # the action at t=1; V(c_1) = values[0] = 0
    zero = jnp.zeros((1, 3))
    adv_cut, _ = critic.token_gae(values, mask, zero, jnp.ones(1), jnp.array([3]), gamma=1.0, lam=1.0)
    adv_end, _ = critic.token_gae(values, mask, zero, jnp.zeros(1), jnp.array([3]), gamma=1.0, lam=1.0)
    assert float(adv_cut[0, 1]) == pytest.approx(5.0)
    assert float(adv_end[0, 1]) == 0.0


def _turn(ctx, act, obs, version=0):
    a = np.asarray(act, np.int32)
    return Turn(
        context=np.asarray(ctx, np.int32),
        action=a,
        logp=np.full(a.size, -0.5, np.float32),
        logp_raw=np.full(a.size, -0.5, np.float32),
        version=np.full(a.size, version, np.int32),
        observation=np.asarray(obs, np.int32),
    )


def _traj(task, reward, stop):
    t1 = _turn([1, 5], [7, 8], [9])
    t2 = _turn([1, 5, 7, 8, 9], [10, 2], [11])
    return Trajectory(task_id=task, task_class="c", turns=[t1, t2], stop_reason=stop, final_reward=reward)


def test_make_batch_places_rewards_and_bootstrap_flags():
    trajs = [
        _traj("a", 1.0, StopReason.FINISHED),
        _traj("a", 0.0, StopReason.ROUND_BUDGET_PAUSED),
        _traj("b", 1.0, StopReason.FINISHED),
    ]
    batch, _ = make_batch(trajs, [1.0, 1.0, 1.0], rows=4, length=8)
    np.testing.assert_array_equal(batch["lengths"], [7, 7, 7, 0])
    assert batch["step_reward"][0, 6] == 1.0 and batch["step_reward"][0].sum() == 1.0
    np.testing.assert_array_equal(batch["bootstrap"], [0.0, 1.0, 0.0, 0.0])  # paused: bootstrap
    short, m = make_batch(trajs[:1], [1.0], rows=1, length=6)  # cut by the learner's length
    assert m["batch/truncated_tokens"] == 1.0
    assert short["bootstrap"][0] == 1.0 and short["step_reward"].sum() == 0.0


CFG = tiny_dense(value_head="separate")
B, T = 4, 12


def _batch(params):
    from agentjax.policy.scoring import token_logprobs

    tokens = jax.random.randint(jax.random.key(3), (B, T), 0, CFG.vocab_size)
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    mask = np.zeros((B, T), np.float32)
    mask[:, 6:] = 1.0
    reward = np.zeros((B, T), np.float32)
    reward[:, T - 1] = [1.0, 0.0, 1.0, 0.0]
    behav = token_logprobs(params, tokens, pos, config=CFG)[0]
    return {
        "tokens": tokens,
        "positions": pos,
        "loss_mask": jnp.asarray(mask),
        "behav_logp": behav,
        "advantages": jnp.zeros(B),
        "weight": jnp.ones(B),
        "step_reward": jnp.asarray(reward),
        "bootstrap": jnp.zeros(B),
        "lengths": jnp.full(B, T, jnp.int32),
    }


@pytest.fixture(scope="module")
def gae_run():
    params = init_params(CFG, jax.random.key(0))
    tx = optax.adam(1e-2)
    step = make_train_step(CFG, LossConfig(name="ppo", advantage="gae", value_coef=1.0, filter="none"), tx)
    batch = _batch(params)
    state = init_train_state(params, tx, 0)
    first = None
    for _ in range(20):
        state, m = step(state, batch)
        first = first or float(m["loss/value"])
    return params, state, first, float(m["loss/value"])


def test_gae_step_trains_the_critic_and_the_policy(gae_run):
    params, state, first, last = gae_run
    assert last < 0.5 * first  # the critic fits the returns of a fixed batch
    moved = lambda k: max(
        float(jnp.abs(a - b).max())
        for a, b in zip(jax.tree.leaves(params[k]), jax.tree.leaves(state.params[k]), strict=True)
    )
    assert moved("critic") > 0 and moved("embed") > 0


def test_gae_without_a_critic_is_a_clear_error():
    with pytest.raises(ValueError, match="value_head"):
        params = init_params(tiny_dense(), jax.random.key(0))
        step = make_train_step(tiny_dense(), LossConfig(advantage="gae", value_coef=1.0), optax.sgd(0.1))
        step(init_train_state(params, optax.sgd(0.1), 0), _batch(params))
    with pytest.raises(ValueError, match="value_coef"):
        LossConfig(advantage="gae", value_coef=0.0)


def test_reference_kl_is_zero_at_the_reference_and_pulls_back_towards_it():
    cfg = tiny_dense()
    params = init_params(cfg, jax.random.key(0))
    batch = {k: v for k, v in _batch(params).items()}
    batch.pop("step_reward")
    tx = optax.sgd(0.05)
    step = make_train_step(cfg, LossConfig(name="grpo", kl_coef=1.0, filter="none"), tx)
    moved = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(1), x.shape), params)
    _, m0 = step(init_train_state(params, tx, 0), batch, params)
    assert abs(float(m0["loss/kl"])) < 1e-7  # the reference itself (up to fast-mode rounding)
    s1, m1 = step(init_train_state(moved, tx, 0), batch, params)
    assert float(m1["loss/kl"]) > 0
    _, m2 = step(s1, batch, params)  # zero advantages: the only gradient is the KL's
    assert float(m2["loss/kl"]) < float(m1["loss/kl"])


def test_run_config_with_gae_and_no_critic_fails_naming_the_field():
    from agentjax.policy.config import ConfigError
    from agentjax.run import config as runconfig
    from configs import default

    cfg = default.get_config()
    cfg.loss.update(advantage="gae", value_coef=0.5)
    with pytest.raises(ConfigError, match=r"model.value_head.*\['shared', 'separate'\]"):
        runconfig.parse(cfg)
    cfg.model.value_head = "separate"
    assert runconfig.parse(cfg).loss.advantage == "gae"
    cfg.loss.advantage = "group_std"  # a value loss without GAE returns would fail at the first step
    with pytest.raises(ConfigError, match=r"loss.value_coef=0.5 needs returns from a critic"):
        runconfig.parse(cfg)
    cfg.loss.advantage = "td"
    allowed = r"loss.advantage='td' is invalid; allowed values: \['group_std', 'dr_grpo', 'rloo', 'gae'\]"
    with pytest.raises(ConfigError, match=allowed):
        runconfig.parse(cfg)
