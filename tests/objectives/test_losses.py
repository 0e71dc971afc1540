"""PPO, GRPO, GSPO, CISPO: hand-computed values on 2x3 inputs, gradients, padding, jit, errors."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import objectives

# Tests call jitted versions (one compile each) instead of op-by-op eager dispatch, which is slow
# on a loaded CPU; the *_under_jit tests check the eager path against them.
_STATIC = ("aggregation", "max_len")
ppo_loss = jax.jit(objectives.ppo_loss, static_argnames=_STATIC)
grpo_loss = jax.jit(objectives.grpo_loss, static_argnames=(*_STATIC, "kl_kind"))
gspo_loss = jax.jit(objectives.gspo_loss)
cispo_loss = jax.jit(objectives.cispo_loss, static_argnames=_STATIC)

# Ratios r = exp(logp - old_logp); token (1, 2) is padding.
RATIOS = np.array([[1.5, 0.9, 1.1], [0.7, 1.3, 1.0]])
OLD = np.log(np.array([[0.2, 0.5, 0.4], [0.5, 0.3, 0.1]])).astype(np.float32)
LOGP = (OLD + np.log(RATIOS)).astype(np.float32)
MASK = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], np.float32)
ADV = np.array([1.0, -2.0], np.float32)


def grad_logp(loss_fn, logp=LOGP, *args, **kwargs):
    grad = jax.jit(jax.grad(lambda lp: loss_fn(lp, *args, **kwargs)[0]))
    return np.asarray(grad(jnp.asarray(logp)))


# ----------------------------------------------------------------------------- PPO


@pytest.mark.parametrize(
    "aggregation, max_len, expected",
    [
        # objective per token: [1.2 (clipped), 0.9, 1.1], [-1.6 (clipped), -2.6]
        ("token_mean", None, -(3.2 - 4.2) / 5),
        ("seq_mean_token_mean", None, -(3.2 / 3 - 4.2 / 2) / 2),
        ("seq_mean_token_sum", None, -(3.2 - 4.2) / 2),
        ("seq_mean_token_sum_norm", 4, -(3.2 / 4 - 4.2 / 4) / 2),
    ],
)
def test_ppo_loss_and_clip_fractions_match_hand_computed_values(aggregation, max_len, expected):
    loss, m = ppo_loss(
        LOGP, OLD, ADV, MASK, aggregation=aggregation, max_len=max_len, clip_low=0.2, clip_high=0.2
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(m["clip_fraction"], 2 / 5, rtol=1e-6)
    np.testing.assert_allclose(m["clip_fraction/high"], 1 / 5, rtol=1e-6)
    np.testing.assert_allclose(m["clip_fraction/low"], 1 / 5, rtol=1e-6)
    np.testing.assert_allclose(m["ratio/mean"], (1.5 + 0.9 + 1.1 + 0.7 + 1.3) / 5, rtol=1e-5)
    np.testing.assert_allclose(m["ratio/max"], 1.5, rtol=1e-5)
    kl = np.mean([r - 1 - np.log(r) for r in (1.5, 0.9, 1.1, 0.7, 1.3)])
    np.testing.assert_allclose(m["approx_kl"], kl, rtol=1e-4)
    assert all(v.shape == () for v in m.values())


def test_ppo_gradient_clipped_branches():
    """A > 0, r > 1 + eps: zero gradient. A < 0, r > 1 + eps: non-zero (the min picks r A)."""
    g = grad_logp(ppo_loss, LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2)
    # d(-obj/5)/d logp = -A r / 5 on the unclipped branch.
    want = np.array([[0.0, -0.9 / 5, -1.1 / 5], [0.0, 2.0 * 1.3 / 5, 0.0]])
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)
    assert g[0, 0] == 0.0  # A > 0 and r = 1.5 > 1.2: clipped, no gradient
    assert g[1, 0] == 0.0  # A < 0 and r = 0.7 < 0.8: clipped, no gradient
    assert g[1, 1] != 0.0  # A < 0 and r = 1.3 > 1.2: gradient flows
    g_old = jax.jit(
        jax.grad(
            lambda o: ppo_loss(LOGP, o, ADV, MASK, clip_low=0.2, clip_high=0.2, aggregation="token_mean")[0]
        )
    )(jnp.asarray(OLD))
    np.testing.assert_allclose(g_old, 0.0)  # sg(old_logp)


def test_ppo_asymmetric_clip_and_token_advantages():
    adv_bt = np.broadcast_to(ADV[:, None], (2, 3))
    a = ppo_loss(LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28, aggregation="token_mean")
    b = ppo_loss(LOGP, OLD, adv_bt, MASK, clip_low=0.2, clip_high=0.28, aggregation="token_mean")
    np.testing.assert_allclose(a[0], b[0])
    # clip-higher: 1.5 is now clipped at 1.28
    np.testing.assert_allclose(a[0], -(1.28 + 0.9 + 1.1 - 1.6 - 2.6) / 5, rtol=1e-5)


# ----------------------------------------------------------------------------- GRPO


def test_grpo_is_ppo_without_reference_and_adds_kl():
    loss, m = grpo_loss(LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2, aggregation="seq_mean_token_mean")
    np.testing.assert_allclose(loss, -(3.2 / 3 - 4.2 / 2) / 2, rtol=1e-5)  # seq_mean_token_mean
    np.testing.assert_allclose(m["pg_loss"], loss)
    ln2 = np.log(2.0)
    ref = LOGP - np.array([[ln2, 0, 0], [-ln2, 0, 0]], np.float32)
    loss, m = grpo_loss(
        LOGP,
        OLD,
        ADV,
        MASK,
        ref_logp=ref,
        kl_coef=0.1,
        clip_low=0.2,
        clip_high=0.2,
        aggregation="seq_mean_token_mean",
    )
    k3_pos, k3_neg = 0.5 - 1 + ln2, 2 - 1 - ln2  # exp(-lr) - 1 + lr at lr = +-ln 2
    kl = (k3_pos / 3 + k3_neg / 2) / 2
    np.testing.assert_allclose(m["kl"], kl, rtol=1e-5)
    np.testing.assert_allclose(loss, -(3.2 / 3 - 4.2 / 2) / 2 + 0.1 * kl, rtol=1e-5)
    g_ref = jax.jit(
        jax.grad(
            lambda r: grpo_loss(
                LOGP,
                OLD,
                ADV,
                MASK,
                ref_logp=r,
                kl_coef=0.1,
                clip_low=0.2,
                clip_high=0.2,
                aggregation="seq_mean_token_mean",
            )[0]
        )
    )(ref)
    np.testing.assert_allclose(g_ref, 0.0)  # sg(ref_logp)
    with pytest.raises(ValueError, match="ref_logp"):
        objectives.grpo_loss(
            LOGP, OLD, ADV, MASK, kl_coef=0.1, clip_low=0.2, clip_high=0.2, aggregation="seq_mean_token_mean"
        )


# ----------------------------------------------------------------------------- GSPO


def test_gspo_values_and_clip():
    s0, s1 = (1.5 * 0.9 * 1.1) ** (1 / 3), (0.7 * 1.3) ** 0.5  # 1.1408, 0.9539
    loss, m = gspo_loss(LOGP, OLD, ADV, MASK, clip_low=0.1, clip_high=0.1)
    np.testing.assert_allclose(loss, -(1.1 * 1.0 + s1 * -2.0) / 2, rtol=1e-5)  # s0 clipped at 1.1
    np.testing.assert_allclose(m["clip_fraction"], 0.5)
    np.testing.assert_allclose(m["seq_ratio/mean"], (s0 + s1) / 2, rtol=1e-5)
    loss, m = gspo_loss(LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2)
    np.testing.assert_allclose(loss, -(s0 - 2.0 * s1) / 2, rtol=1e-5)
    np.testing.assert_allclose(m["clip_fraction"], 0.0)


def test_gspo_gradient_flows_through_all_tokens_of_a_sequence():
    g = grad_logp(gspo_loss, LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2)
    s0, s1 = (1.5 * 0.9 * 1.1) ** (1 / 3), (0.7 * 1.3) ** 0.5
    # d s_i / d logp_it = s_i / L_i for every masked token, even the one with r = 1.5.
    want = np.array([[-s0 / 3 / 2] * 3, [2.0 * s1 / 2 / 2] * 2 + [0.0]])
    np.testing.assert_allclose(g, want, rtol=1e-5)
    # A clipped sequence (A > 0, s > 1 + eps) gets no gradient at all.
    g = grad_logp(gspo_loss, LOGP, OLD, ADV, MASK, clip_low=0.1, clip_high=0.1)
    np.testing.assert_allclose(g[0], 0.0)
    assert np.all(g[1, :2] != 0.0)


def test_gspo_needs_sequence_advantages():
    with pytest.raises(ValueError, match=r"advantages must have shape \[B\] = \(2,\)"):
        gspo_loss(LOGP, OLD, np.ones((2, 3), np.float32), MASK, clip_low=0.1, clip_high=0.1)


# ----------------------------------------------------------------------------- CISPO


def test_cispo_values_and_gradient_on_clipped_tokens():
    loss, m = cispo_loss(LOGP, OLD, ADV, MASK, clip_high=0.2, clip_low=None, aggregation="token_mean")
    w = np.array([[1.2, 0.9, 1.1], [0.7, 1.2, 0.0]])  # no lower bound: 0.7 stays 0.7
    a = np.broadcast_to(ADV[:, None], (2, 3))
    np.testing.assert_allclose(loss, -np.sum(w * a * LOGP * MASK) / 5, rtol=1e-5)
    np.testing.assert_allclose(m["clip_fraction"], 2 / 5)  # 1.5 and 1.3 are clipped
    np.testing.assert_allclose(m["weight/mean"], (1.2 + 0.9 + 1.1 + 0.7 + 1.2) / 5, rtol=1e-5)
    g = grad_logp(cispo_loss, LOGP, OLD, ADV, MASK, clip_low=None, clip_high=0.2)
    np.testing.assert_allclose(g, -w * a * MASK / 5, rtol=1e-5, atol=1e-7)
    assert g[0, 0] != 0.0 and g[1, 1] != 0.0  # clipped tokens keep their gradient
    g = grad_logp(cispo_loss, LOGP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2)
    np.testing.assert_allclose(g[1, 0], -0.8 * -2.0 / 5, rtol=1e-5)  # 0.7 clipped up to 0.8
    loss_sum, _ = cispo_loss(
        LOGP, OLD, ADV, MASK, clip_high=0.2, aggregation="seq_mean_token_sum", clip_low=None
    )
    np.testing.assert_allclose(loss_sum, -np.sum(w * a * LOGP * MASK) / 2, rtol=1e-5)


# ----------------------------------------------------------------------------- shared properties

LOSSES = {
    "ppo": functools.partial(objectives.ppo_loss, clip_low=0.2, clip_high=0.2),
    "ppo_seq_norm": functools.partial(
        objectives.ppo_loss, clip_low=0.2, clip_high=0.2, aggregation="seq_mean_token_sum_norm", max_len=8
    ),
    "grpo": functools.partial(objectives.grpo_loss, clip_low=0.2, clip_high=0.2, kl_coef=0.05),
    "gspo": functools.partial(objectives.gspo_loss, clip_low=0.2, clip_high=0.2),
    "cispo": functools.partial(objectives.cispo_loss, clip_low=None, clip_high=0.2),
}


def _call(name, logp, old, adv, mask, ref):
    if name == "grpo":
        return LOSSES[name](logp, old, adv, mask, ref_logp=ref)
    return LOSSES[name](logp, old, adv, mask)


REF = (LOGP - 0.3).astype(np.float32)


def _pad(x, fill, cols=2, rows=1):
    out = np.full((x.shape[0] + rows, x.shape[1] + cols), fill, np.float32)
    out[: x.shape[0], : x.shape[1]] = x
    return out


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_padding_never_changes_loss_or_gradient(name):
    """Extra padded tokens and a padded row (mask 0, -inf/garbage log-probs) change nothing."""
    vg = jax.jit(jax.value_and_grad(functools.partial(_call, name), has_aux=True))
    (base, base_m), g = vg(LOGP, OLD, ADV, MASK, REF)
    logp_p, old_p, ref_p = _pad(LOGP, -np.inf), _pad(OLD, -np.inf), _pad(REF, 7.0)
    logp_p[1, 2] = 5.0  # garbage in the masked-out token of a real row
    mask_p, adv_p = _pad(MASK, 0.0), np.concatenate([ADV, [np.nan]]).astype(np.float32)
    (loss, m), gp = vg(logp_p, old_p, adv_p, mask_p, ref_p)
    np.testing.assert_allclose(loss, base, rtol=1e-6)
    for k in base_m:
        np.testing.assert_allclose(m[k], base_m[k], rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(gp[:2, :3], np.where(MASK > 0, g, 0.0), rtol=1e-6)
    assert np.all(gp[2:] == 0.0) and np.all(gp[:, 3:] == 0.0) and gp[1, 2] == 0.0


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_gives_the_same_values_under_jit(name):
    eager = _call(name, LOGP, OLD, ADV, MASK, REF)
    jitted = jax.jit(functools.partial(_call, name))(LOGP, OLD, ADV, MASK, REF)
    chex.assert_trees_all_close(eager, jitted, rtol=1e-6)


def test_bf16_inputs_are_computed_in_float32():
    loss, _ = objectives.ppo_loss(
        jnp.asarray(LOGP, jnp.bfloat16),
        OLD,
        ADV,
        MASK.astype(bool),
        clip_low=0.2,
        clip_high=0.2,
        aggregation="token_mean",
    )
    assert loss.dtype == jnp.float32


def test_shape_and_dtype_errors():
    ppo_loss, cispo_loss = objectives.ppo_loss, objectives.cispo_loss
    with pytest.raises(ValueError, match=r"logp must have shape \[B, T\]"):
        ppo_loss(LOGP[0], OLD[0], ADV, MASK[0], clip_low=0.2, clip_high=0.2, aggregation="token_mean")
    with pytest.raises(ValueError, match=r"old_logp must have shape \[B, T\] = \(2, 3\)"):
        ppo_loss(LOGP, OLD[:, :2], ADV, MASK, clip_low=0.2, clip_high=0.2, aggregation="token_mean")
    with pytest.raises(ValueError, match=r"advantages must have shape \[B\] = \(2,\) or"):
        ppo_loss(
            LOGP, OLD, np.ones(3, np.float32), MASK, clip_low=0.2, clip_high=0.2, aggregation="token_mean"
        )
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 3\)"):
        cispo_loss(LOGP, OLD, ADV, MASK[:1], clip_high=0.2, clip_low=None, aggregation="token_mean")
    with pytest.raises(ValueError, match="logp must have a floating dtype"):
        ppo_loss(
            np.zeros((2, 3), np.int32), OLD, ADV, MASK, clip_low=0.2, clip_high=0.2, aggregation="token_mean"
        )
    with pytest.raises(ValueError, match="valid modes"):
        ppo_loss(LOGP, OLD, ADV, MASK, aggregation="mean", clip_low=0.2, clip_high=0.2)
