"""The jitted train step: every loss, gradient accumulation, the NaN/Inf guard, learning direction,
masked rows, exact mode and a sharded step.

The optimizer is SGD with momentum: its first update is exactly ``-LR * grad`` (the momentum trace
starts at zero), so comparing updated parameters compares gradients, and it has a state (the trace)
for the NaN/Inf guard to protect. Each distinct step is compiled once per module (``_step``).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agentjax.learner.objective import LOSSES, LossConfig
from agentjax.learner.step import OptimConfig, init_train_state, make_optimizer, make_train_step
from agentjax.policy import init_params
from agentjax.policy.scoring import token_logprobs
from agentjax.sharding import ShardingRules, activation_sharding, make_mesh, shard_params
from agentjax.testing.models import tiny_dense

B, T, START = 4, 12, 6  # the loss mask covers tokens START..T-1 of every row (6 per row)
LR = 0.1
CONFIG = tiny_dense()
TX = optax.sgd(LR, momentum=0.9)
ADV = np.array([1.0, -0.5, 0.25, -1.0], np.float32)
_STEPS = {}


def _step(name="grpo", config=CONFIG, grad_accum=1):
    key = (name, config, grad_accum)
    if key not in _STEPS:
        _STEPS[key] = make_train_step(config, LossConfig(name=name), TX, grad_accum=grad_accum)
    return _STEPS[key]


_score = jax.jit(lambda p, t, pos, config: token_logprobs(p, t, pos, config=config)[0], static_argnums=3)


def _state(params_np):
    """A fresh TrainState on new buffers (the step donates its input state)."""
    return init_train_state(jax.tree.map(jnp.asarray, params_np), TX, 0)


def _batch(params_np, config=CONFIG, adv=ADV, seed=1):
    tokens = jax.random.randint(jax.random.key(seed), (B, T), 0, config.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    mask = np.zeros((B, T), np.float32)
    mask[:, START:] = 1.0
    behav = _score(jax.tree.map(jnp.asarray, params_np), tokens, positions, config)
    return {
        "tokens": tokens,
        "positions": positions,
        "loss_mask": jnp.asarray(mask),
        "behav_logp": behav,
        "advantages": jnp.asarray(adv),
        "weight": jnp.ones(B),
        "behaviour_version": jnp.zeros((B, T), jnp.int32),
    }


def _behaviour(name, params_np):
    """(ref_params, behaviour) for a loss that needs the behaviour version's log-probs: version 0."""
    if "train_v" not in LossConfig(name=name).needs:
        return ()
    return (None, ((jax.tree.map(jnp.asarray, params_np),), jnp.array([0], jnp.int32)))


def _np(tree):
    return jax.tree.map(lambda x: np.array(x, copy=True), tree)


def _assert_close(a, b, rtol, atol):
    chex.assert_trees_all_close(a, b, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def params0():
    """Initial parameters as numpy (never donated)."""
    return _np(init_params(CONFIG, jax.random.key(0)))


@pytest.fixture(scope="module")
def batch(params0):
    return _batch(params0)


@pytest.fixture(scope="module")
def grpo_result(params0, batch):
    new, metrics = _step("grpo")(_state(params0), batch)
    return _np(new), {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_trains(name, params0, batch):
    new, metrics = _step(name)(_state(params0), batch, *_behaviour(name, params0))
    for k, v in metrics.items():
        assert np.isfinite(float(v)), k
    assert metrics["skipped_nonfinite"] == 0.0 and int(new.step) == 1
    # On-policy (behav_logp = the model's own scores): every ratio is 1 up to rounding, so the
    # surrogate's value is -mean_i A_i (seq_mean_token_mean); CISPO's is -mean_i A_i mean_t logp.
    m = np.asarray(batch["loss_mask"])
    if name == "cispo":
        behav = np.asarray(batch["behav_logp"])
        want = -np.mean(ADV * (behav * m).sum(1) / m.sum(1))
    else:
        want = -ADV.mean()
    np.testing.assert_allclose(float(metrics["loss/total"]), want, rtol=1e-5, atol=1e-6)
    # every leaf moved
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(params0), jax.tree.leaves(new.params), strict=True
    ):
        assert np.abs(np.asarray(b) - a).max() > 0, jax.tree_util.keystr(path)


def test_invalid_optim_config_and_accum():
    with pytest.raises(ValueError, match=r"optim\.learning_rate=0"):
        OptimConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match=r"optim\.grad_accum=0"):
        OptimConfig(grad_accum=0)
    params = {"w": jnp.ones((2,))}
    batch = {"tokens": jnp.zeros((B, T), jnp.int32)}
    step = make_train_step(CONFIG, LossConfig(), TX, grad_accum=3)
    with pytest.raises(ValueError, match=r"batch size 4 is not divisible by optim\.grad_accum=3"):
        step(init_train_state(params, TX, 0), batch)


def test_make_optimizer_warmup_and_clipping():
    """Warmup starts at learning rate 0; the global norm is clipped before AdamW sees it."""
    params = {"w": jnp.ones((3,))}
    grads = {"w": jnp.array([30.0, 40.0, 0.0])}  # global norm 50
    tx = make_optimizer(OptimConfig(learning_rate=0.5, warmup_steps=4))
    upd, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_array_equal(np.asarray(upd["w"]), 0.0)
    tx = make_optimizer(OptimConfig(grad_clip=1.0, b1=0.9))
    _, state = tx.update(grads, tx.init(params), params)
    mu = state[1][0].mu["w"]  # AdamW's first moment after one step: (1 - b1) * clipped grad
    np.testing.assert_allclose(np.asarray(mu), [0.06, 0.08, 0.0], rtol=1e-6)


def test_the_step_reports_the_learning_rate_of_its_update(params0, batch):
    """``optim/learning_rate``: the optimizer's rate for the step's update (warmup: 0, then up)."""
    tx = make_optimizer(OptimConfig(learning_rate=0.5, warmup_steps=4))
    step = make_train_step(CONFIG, LossConfig(), tx)
    state = init_train_state(jax.tree.map(jnp.asarray, params0), tx, 0)
    rates = []
    for _ in range(3):
        state, m = step(state, batch)
        rates.append(float(m["optim/learning_rate"]))
    np.testing.assert_allclose(rates, [0.0, 0.125, 0.25])
    _, m = make_train_step(CONFIG, LossConfig(), make_optimizer(OptimConfig(learning_rate=0.02)))(
        init_train_state(jax.tree.map(jnp.asarray, params0), make_optimizer(OptimConfig()), 0), batch
    )
    np.testing.assert_allclose(float(m["optim/learning_rate"]), 0.02)
    assert "optim/learning_rate" not in _step("grpo")(_state(params0), batch)[1]  # a bare optax TX


@pytest.mark.slow  # compiles its own step
def test_grad_accum_equals_single_batch(params0, batch, grpo_result):
    """seq_mean_token_mean over two equal halves (6 valid tokens per row): mean of the halves'
    gradients == the full batch's gradient, so the SGD update matches (float32 rounding only)."""
    one, m1 = grpo_result
    two, m2 = _step("grpo", grad_accum=2)(_state(params0), batch)
    _assert_close(two.params, one.params, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(m2["loss/total"]), m1["loss/total"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(m2["grad_norm"]), m1["grad_norm"], rtol=1e-5)
    assert int(two.step) == 1


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_nonfinite_guard_skips_update(bad, params0, batch):
    step = _step("grpo")
    state, _ = step(_state(params0), batch)  # one good step: the momentum trace is non-zero
    before = _np(state)
    adv = np.array(ADV)
    adv[2] = float(bad)
    state, metrics = step(state, {**batch, "advantages": jnp.asarray(adv)})
    assert float(metrics["skipped_nonfinite"]) == 1.0
    chex.assert_trees_all_equal(_np(state), before)  # params, opt_state, step, bitwise
    assert int(state.step) == 1
    state, metrics = step(state, batch)  # a good batch afterwards updates again
    assert float(metrics["skipped_nonfinite"]) == 0.0 and int(state.step) == 2
    assert not np.array_equal(np.asarray(state.params["embed"]), before.params["embed"])


@pytest.mark.parametrize("mode", ["skip", "update"])
def test_a_batch_with_no_signal_is_no_optimiser_step(mode, params0, batch):
    """Every advantage 0 (all groups uniform): the gradient is exactly zero. ``skip`` leaves params,
    momentum and step bitwise as they were; ``update`` lets the momentum trace move the params."""
    step = make_train_step(CONFIG, LossConfig(name="grpo"), TX, empty_batches=mode)
    state, m = step(_state(params0), batch)  # one good step: the momentum trace is non-zero
    assert float(m["skipped_empty"]) == 0.0 and int(state.step) == 1
    before = _np(state)
    state, m = step(state, {**batch, "advantages": jnp.zeros(B)})
    assert float(m["grad_norm"]) == 0.0 and float(m["skipped_nonfinite"]) == 0.0
    if mode == "skip":
        assert float(m["skipped_empty"]) == 1.0
        chex.assert_trees_all_equal(_np(state), before)
    else:
        assert float(m["skipped_empty"]) == 0.0 and int(state.step) == 2
        assert not np.array_equal(np.asarray(state.params["embed"]), before.params["embed"])


def test_exact_kernels_make_the_reference_kl_exactly_zero_at_the_reference(params0, batch):
    """At the reference parameters with every advantage 0, the exact kernels' reference log-probs
    equal the differentiated forward's bitwise: the KL gradient is exactly zero and the step is
    skipped. (The fast kernels round the two programs differently: a ~1e-8 gradient that Adam
    would scale to an lr-sized move of every weight.)"""
    cfg = CONFIG.replace(exact_tile=4)
    step = make_train_step(cfg, LossConfig(name="grpo", kl_coef=1.0), optax.adam(1e-3))
    p = jax.tree.map(jnp.asarray, params0)
    state = init_train_state(p, optax.adam(1e-3), 0)
    _, m = step(state, {**batch, "advantages": jnp.zeros(B)}, p)
    assert float(m["loss/kl"]) == 0.0 and float(m["grad_norm"]) == 0.0
    assert float(m["skipped_empty"]) == 1.0


def test_the_demonstration_term_adds_demo_coef_times_its_gradient(params0, batch):
    """Every advantage 0: the update is the demonstration term's alone, ``-LR x demo_coef x
    grad(NLL)`` (SGD's first step), so halving ``loss.demo_coef`` halves it."""
    demo = {k: batch[k] for k in ("tokens", "positions", "loss_mask")}
    zero = {**batch, "advantages": jnp.zeros(B)}
    moved = {}
    for coef in (1.0, 0.5):
        step = make_train_step(CONFIG, LossConfig(name="grpo", demo_coef=coef), TX)
        new, m = step(_state(params0), zero, None, None, demo)
        assert float(m["loss/demo_nll"]) > 0 and float(m["skipped_empty"]) == 0.0
        moved[coef] = np.asarray(new.params["embed"]) - params0["embed"]
    np.testing.assert_allclose(moved[0.5], 0.5 * moved[1.0], rtol=1e-3, atol=1e-6 * np.abs(moved[1.0]).max())
    assert np.abs(moved[1.0]).max() > 0


def test_empty_batches_names_its_values():
    with pytest.raises(ValueError, match=r"optim.empty_batches='drop'.*\('skip', 'update'\)"):
        OptimConfig(empty_batches="drop")


def _row_logp(params_np, batch, row):
    lp = np.asarray(_score(jax.tree.map(jnp.asarray, params_np), batch["tokens"], batch["positions"], CONFIG))
    return float((lp * np.asarray(batch["loss_mask"]))[row].sum())


@pytest.mark.parametrize("name", ["ppo", "grpo"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_advantage_moves_logprob(name, sign, params0, batch):
    """A positive advantage on row 1 alone raises its log-prob; a negative one lowers it."""
    adv = np.zeros(B, np.float32)
    adv[1] = sign
    b = {**batch, "advantages": jnp.asarray(adv)}
    state = _state(params0)
    for _ in range(3):
        state, metrics = _step(name)(state, b)
    assert float(metrics["skipped_nonfinite"]) == 0.0
    before, after = _row_logp(params0, b, 1), _row_logp(_np(state.params), b, 1)
    assert sign * (after - before) > 0.05, (before, after)


def test_fully_masked_row_does_not_change_update(params0, batch, grpo_result):
    """A row with loss_mask 0 (an infra fault) contributes nothing, whatever its content."""
    mask = np.array(batch["loss_mask"])
    mask[3] = 0.0
    base = {**batch, "loss_mask": jnp.asarray(mask)}
    tokens = np.array(batch["tokens"])
    tokens[3] = (tokens[3] + 17) % CONFIG.vocab_size
    behav = np.array(batch["behav_logp"])
    behav[3] = -30.0
    adv = np.array(ADV)
    adv[3] = np.nan  # e.g. no reward for an infra fault: masked, never zeroed
    junk = {
        **base,
        "tokens": jnp.asarray(tokens),
        "behav_logp": jnp.asarray(behav),
        "advantages": jnp.asarray(adv),
    }
    step = _step("grpo")
    a, ma = step(_state(params0), base)
    b, mb = step(_state(params0), junk)
    _assert_close(b.params, a.params, rtol=1e-6, atol=1e-8)
    assert float(ma["loss/total"]) == pytest.approx(-ADV[:3].mean(), rel=1e-5)
    # control: the same change on a row that is trained does change the update
    full, _ = grpo_result
    c, _ = step(_state(params0), {**junk, "loss_mask": batch["loss_mask"], "advantages": ADV})
    assert np.abs(np.asarray(c.params["embed"]) - full.params["embed"]).max() > 1e-4


@pytest.mark.slow  # compiles its own step
def test_exact_mode_ratio_is_one_and_gradient_matches(params0, batch, grpo_result):
    exact = tiny_dense(exact_tile=4)
    b = _batch(params0, config=exact)
    new, metrics = _step("grpo", config=exact)(_state(params0), b)
    assert float(metrics["loss/ratio/mean"]) == 1.0
    assert float(metrics["loss/ratio/max"]) == 1.0
    assert float(metrics["loss/clip_fraction"]) == 0.0
    assert float(metrics["masked/filter_none"]) == 0.0
    standard, _ = grpo_result
    _assert_close(new.params, standard.params, rtol=1e-4, atol=1e-6)


def test_icepop_in_step_compares_the_behaviour_versions_recompute(params0, batch):
    """behav_logp moved far from the learner's on some tokens: the step reports the fraction,
    comparing the sampler with the learner's recompute at the behaviour version (slot of version
    0), not with the current (moved) parameters."""
    behav = np.array(batch["behav_logp"])
    behav[0, 7] += 1.0  # ratio e^-1 = 0.37 < 0.5: filtered
    behav[1, 11] -= 1.0  # ratio e = 2.72 > 2: filtered
    behav[2, 8] -= 3.0  # filtered
    behav[3, 9] += 0.5  # ratio 0.61: kept
    behav[3, 2] += 5.0  # outside the loss mask: not counted
    step = make_train_step(CONFIG, LossConfig(name="grpo", filter="icepop"), TX)  # mismatch ratio
    p0 = jax.tree.map(jnp.asarray, params0)
    moved = jax.tree.map(lambda x: x + 0.3, p0)  # current params far away: staleness is not mismatch
    _, metrics = step(
        _state(_np(moved)),
        {**batch, "behav_logp": jnp.asarray(behav)},
        None,
        ((moved, p0), jnp.array([5, 0], jnp.int32)),
    )  # version 0 is the second slot
    assert float(metrics["masked/filter_icepop"]) == pytest.approx(3 / 24, abs=1e-7)
    assert float(metrics["behaviour/covered"]) == 1.0
    assert float(metrics["skipped_nonfinite"]) == 0.0


@pytest.mark.slow  # compiles its own step
def test_sharded_step_matches_unsharded(params0, batch, grpo_result):
    mesh = make_mesh({"fsdp": 4, "tensor": 2})
    rules = ShardingRules()
    params = shard_params(jax.tree.map(jnp.asarray, params0), mesh, rules)
    wq_sharding = params["layers"]["wq"].sharding
    assert len(wq_sharding.device_set) == 8 and wq_sharding.spec != jax.sharding.PartitionSpec()
    tok = activation_sharding("tokens", mesh, rules, shape=(B, T))
    sb = {k: jax.device_put(v, tok) if v.ndim == 2 else v for k, v in batch.items()}
    new, metrics = _step("grpo")(init_train_state(params, TX, 0), sb)
    assert len(new.params["layers"]["wq"].sharding.device_set) == 8
    want, m = grpo_result
    _assert_close(_np(new.params), want.params, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(metrics["grad_norm"]), m["grad_norm"], rtol=1e-5)
