"""MIS-PO and HisPO: acceptance by reason, values and gradients by hand, padding, jit."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import objectives

LN = np.log

# ----------------------------------------------------------------------------- MIS-PO
# rho = exp(logp - logp_behavior); token (1, 2) is padding.
RHO = np.array([[1.1, 3.0, 0.95], [0.85, 0.9, 1.0]])
BEHAVIOR = LN(np.array([[0.2, 0.1, 0.5], [0.4, 0.5, 0.3]])).astype(np.float32)
LOGP = (BEHAVIOR + LN(RHO)).astype(np.float32)
MASK = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], np.float32)
ADV = np.array([1.0, 2.0], np.float32)
MIS_KW = dict(token_bounds=(0.8, 1.25), seq_bounds=(0.9, 1.5))
mis_po = jax.jit(objectives.mis_po_loss, static_argnames=("aggregation", "max_len"))


def test_mis_po_by_hand():
    # token test rejects rho = 3.0; geometric means: row 0 = 3.135^(1/3) = 1.463 (kept),
    # row 1 = sqrt(0.765) = 0.875 < 0.9: the whole row is rejected although its tokens pass.
    loss, m = mis_po(LOGP, BEHAVIOR, ADV, MASK, **MIS_KW)
    np.testing.assert_allclose(loss, -(1.0 + 1.0) / 5, rtol=1e-6)  # rejected tokens count as 0
    np.testing.assert_allclose(m["masked/token_ratio"], 1 / 5)
    np.testing.assert_allclose(m["masked/seq_ratio"], 2 / 5)
    np.testing.assert_allclose(m["masked/any"], 3 / 5)
    np.testing.assert_allclose(m["accepted_fraction"], 2 / 5)
    np.testing.assert_allclose(m["rejected_sequences"], 1 / 2)
    np.testing.assert_allclose(m["ratio/mean"], np.sum(RHO * MASK) / 5, rtol=1e-5)


def test_mis_po_gradient_is_on_policy_without_is_weight():
    g = jax.jit(jax.grad(lambda lp: mis_po(lp, BEHAVIOR, ADV, MASK, **MIS_KW)[0]))(LOGP)
    # -A / 5 on accepted tokens, whatever their ratio (1.1 and 0.95): no importance weight.
    np.testing.assert_allclose(g, [[-0.2, 0.0, -0.2], [0.0, 0.0, 0.0]], rtol=1e-6)
    # With the tests disabled it is the plain on-policy policy gradient on every token.
    g = jax.jit(jax.grad(lambda lp: mis_po(lp, BEHAVIOR, ADV, MASK, token_bounds=None, seq_bounds=None)[0]))(
        LOGP
    )
    np.testing.assert_allclose(g, -np.broadcast_to(ADV[:, None], (2, 3)) * MASK / 5, rtol=1e-6)


def test_mis_po_bounds_are_required_and_checked():
    with pytest.raises(TypeError):
        objectives.mis_po_loss(
            LOGP, BEHAVIOR, ADV, MASK, aggregation="token_mean"
        )  # no silent default region
    with pytest.raises(ValueError, match="token_bounds"):
        objectives.mis_po_loss(
            LOGP, BEHAVIOR, ADV, MASK, token_bounds=(2.0, 1.0), seq_bounds=None, aggregation="token_mean"
        )
    with pytest.raises(ValueError, match="seq_bounds must be None or a"):
        objectives.mis_po_loss(
            LOGP, BEHAVIOR, ADV, MASK, token_bounds=None, seq_bounds=1.0, aggregation="token_mean"
        )


# ----------------------------------------------------------------------------- HisPO
# 3 sequences x 3 tokens; token (1, 2) is padding. m = mismatch ratio, u = update ratio.
M = np.array([[1.0, 1.3, 1.0], [1.15, 1.15, 1.0], [1.0, 1.0, 1.0]])
U = np.array([[1.3, 1.0, 1.0], [1.0, 1.0, 1.0], [1.6, 1.0, 1.0]])
INFER = LN(np.array([[0.3, 0.2, 0.5], [0.4, 0.3, 0.2], [0.1, 0.6, 0.5]])).astype(np.float32)
TRAIN_V = (INFER + LN(M)).astype(np.float32)
CUR = (TRAIN_V + LN(U)).astype(np.float32)
H_MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1]], np.float32)
H_ADV = np.array([1.0, -1.0, 2.0], np.float32)
H_KW = dict(
    mismatch_token_bounds=(0.8, 1.25),
    mismatch_seq_bounds=(0.9, 1.12),
    staleness_token_bounds=(0.5, 1.5),
    staleness_seq_bounds=(0.8, 1.15),
)
H_CLIP = dict(clip_low=0.2, clip_high=0.2)
hispo = jax.jit(objectives.hispo_loss, static_argnames=("aggregation", "max_len"))


def test_hispo_by_hand():
    # row 0: token mismatch rejects m = 1.3 (row gm 1.091 passes); u = 1.3 with A > 0 is clipped
    #        to 1.2; row 1: gm mismatch 1.15 > 1.12 rejects the row; row 2: u = 1.6 fails the token
    #        staleness test and gm 1.6^(1/3) = 1.17 > 1.15 fails the sequence one.
    loss, m = hispo(CUR, TRAIN_V, INFER, H_ADV, H_MASK, **H_KW, **H_CLIP)
    np.testing.assert_allclose(loss, -(1.2 + 1.0) / 8, rtol=1e-5)
    np.testing.assert_allclose(m["masked/token_mismatch"], 1 / 8)
    np.testing.assert_allclose(m["masked/seq_mismatch"], 2 / 8)
    np.testing.assert_allclose(m["masked/token_staleness"], 1 / 8)
    np.testing.assert_allclose(m["masked/seq_staleness"], 3 / 8)
    np.testing.assert_allclose(m["masked/any"], 6 / 8)
    np.testing.assert_allclose(m["accepted_fraction"], 2 / 8)
    np.testing.assert_allclose(m["rejected_sequences"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["clip_fraction"], 1 / 2)  # of the accepted tokens
    np.testing.assert_allclose(m["ratio/update_mean"], np.sum(U * H_MASK) / 8, rtol=1e-5)
    np.testing.assert_allclose(m["ratio/mismatch_mean"], np.sum(M * H_MASK) / 8, rtol=1e-5)


def test_hispo_gradient_flows_only_through_accepted_unclipped_tokens():
    grads = jax.jit(jax.grad(lambda c, t, i: hispo(c, t, i, H_ADV, H_MASK, **H_KW, **H_CLIP)[0], (0, 1, 2)))
    g_cur, g_train_v, g_infer = grads(CUR, TRAIN_V, INFER)
    want = np.zeros((3, 3))
    want[0, 2] = -1.0 / 8  # the only accepted, unclipped token: -A u / N
    np.testing.assert_allclose(g_cur, want, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(g_train_v, 0.0)  # sg: only the current policy is trained
    np.testing.assert_allclose(g_infer, 0.0)


def test_hispo_without_masks_is_ppo_on_the_update_ratio():
    off = dict.fromkeys(H_KW)
    loss, m = hispo(CUR, TRAIN_V, INFER, H_ADV, H_MASK, **off, **H_CLIP)
    want, _ = objectives.ppo_loss(
        CUR, TRAIN_V, H_ADV, H_MASK, clip_low=0.2, clip_high=0.2, aggregation="token_mean"
    )
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    np.testing.assert_allclose(m["masked/any"], 0.0)


# ----------------------------------------------------------------------------- shared

CASES = {
    "mis_po": (
        functools.partial(objectives.mis_po_loss, **MIS_KW),
        (LOGP, BEHAVIOR),
        ADV,
        MASK,
    ),
    "hispo": (
        functools.partial(objectives.hispo_loss, aggregation="seq_mean_token_mean", **H_KW, **H_CLIP),
        (CUR, TRAIN_V, INFER),
        H_ADV,
        H_MASK,
    ),
}


def _pad(x, fill):
    out = np.full((x.shape[0] + 1, x.shape[1] + 2), fill, np.float32)
    out[: x.shape[0], : x.shape[1]] = x
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_padding_never_changes_loss_or_gradient(name):
    fn, logps, adv, mask = CASES[name]
    vg = jax.jit(jax.value_and_grad(lambda lp, *rest: fn(lp, *rest), has_aux=True))
    (base, base_m), g = vg(*logps, adv, mask)
    padded = [_pad(x, -np.inf) for x in logps]
    adv_p = np.concatenate([adv, [np.nan]]).astype(np.float32)
    (loss, m), gp = vg(*padded, adv_p, _pad(mask, 0.0))
    np.testing.assert_allclose(loss, base, rtol=1e-6)
    for k in base_m:
        np.testing.assert_allclose(m[k], base_m[k], rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(gp[: g.shape[0], : g.shape[1]], g, rtol=1e-6)
    assert np.all(gp[g.shape[0] :] == 0.0) and np.all(gp[:, g.shape[1] :] == 0.0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_loss_gives_the_same_values_under_jit(name):
    fn, logps, adv, mask = CASES[name]
    eager = fn(*logps, adv, mask)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
        eager,
        jax.jit(fn)(*logps, adv, mask),
    )


def test_hispo_shape_errors_name_the_argument_and_expected_shape():
    with pytest.raises(ValueError, match=r"logp_infer must have shape \[B, T\] = \(3, 3\)"):
        objectives.hispo_loss(CUR, TRAIN_V, INFER[:, :2], H_ADV, H_MASK, **H_KW, **H_CLIP)
    with pytest.raises(ValueError, match=r"advantages must have shape \[B\] = \(3,\)"):
        objectives.hispo_loss(CUR, TRAIN_V, INFER, H_ADV[:2], H_MASK, **H_KW, **H_CLIP)
    with pytest.raises(ValueError, match=r"logp_behavior must have shape"):
        objectives.mis_po_loss(LOGP, BEHAVIOR[None], ADV, MASK, **MIS_KW)
    assert jnp.asarray(mis_po(LOGP, BEHAVIOR, ADV, MASK, **MIS_KW)[0]).dtype == jnp.float32
