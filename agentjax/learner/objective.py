"""The learner's objective, chosen by config from ``agentjax.objectives``.

``policy_objective(cfg, batch, logp, ...)`` applies the configured consistency filter (IcePop or
KPop between the learner's and the sampler's log-probs), a staleness down-weight per sequence,
then the configured policy loss, plus optional reference KL and value loss.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agentjax import objectives as obj

LOSSES = ("ppo", "grpo", "gspo", "cispo", "mis_po", "hispo")
FILTERS = ("none", "icepop", "kpop")
ADVANTAGES = ("group", "gae")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    name: str = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: str = "seq_mean_token_mean"
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    filter: str = "icepop"
    icepop_low: float = 0.5
    icepop_high: float = 2.0
    kpop_threshold: float = 0.05
    mis_token_bounds: tuple[float, float] = (0.5, 2.0)
    mis_seq_bounds: tuple[float, float] = (0.8, 1.25)
    hispo_mismatch_bounds: tuple[float, float] = (0.5, 2.0)
    hispo_staleness_bounds: tuple[float, float] = (0.2, 5.0)
    value_coef: float = 0.0
    advantage: str = "group"  # "group": GRPO-family group advantages; "gae": critic + GAE
    gamma: float = 1.0  # GAE: discount per action token
    gae_lambda: float = 0.95
    whiten: bool = True  # GAE: normalise advantages over the batch's action tokens
    negative_scale: float = 1.0  # multiplies negative advantages (0: learn only from better-than-average)

    def __post_init__(self):
        if self.name not in LOSSES:
            raise ValueError(f"loss.name={self.name!r} is invalid; allowed values: {list(LOSSES)}")
        if self.filter not in FILTERS:
            raise ValueError(f"loss.filter={self.filter!r} is invalid; allowed values: {list(FILTERS)}")
        if self.aggregation not in obj.AGGREGATION_MODES:
            raise ValueError(
                f"loss.aggregation={self.aggregation!r} is invalid; "
                f"allowed values: {list(obj.AGGREGATION_MODES)}"
            )
        if self.advantage not in ADVANTAGES:
            raise ValueError(
                f"loss.advantage={self.advantage!r} is invalid; allowed values: {list(ADVANTAGES)}")
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.gae_lambda <= 1.0):
            raise ValueError(
                f"loss.gamma={self.gamma}, loss.gae_lambda={self.gae_lambda}: each must be in [0, 1]")
        if self.advantage == "gae" and self.value_coef <= 0:
            raise ValueError(f"loss.value_coef={self.value_coef} is invalid with loss.advantage='gae'; "
                             "must be > 0 (the critic has to learn)")
        if not 0.0 <= self.negative_scale <= 1.0:
            raise ValueError(f"loss.negative_scale={self.negative_scale} is invalid; must be in [0, 1]")
        if self.kl_kind not in ("k1", "k2", "k3"):
            raise ValueError(f"loss.kl_kind={self.kl_kind!r} is invalid; allowed: ['k1', 'k2', 'k3']")
        obj.check_clip(self.clip_low, self.clip_high, prefix="loss.")
        if not 0 <= self.icepop_low <= self.icepop_high:
            raise ValueError(f"loss.icepop_low={self.icepop_low}, loss.icepop_high={self.icepop_high} "
                             "are invalid; must satisfy 0 <= icepop_low <= icepop_high")
        for f in ("kpop_threshold", "kl_coef", "value_coef"):
            if not getattr(self, f) >= 0:
                raise ValueError(f"loss.{f}={getattr(self, f)} is invalid; must be >= 0")
        for f in ("mis_token_bounds", "mis_seq_bounds", "hispo_mismatch_bounds",
                  "hispo_staleness_bounds"):
            lo, hi = getattr(self, f)
            if not 0 <= lo <= hi:
                raise ValueError(f"loss.{f}={getattr(self, f)} is invalid; must be a (low, high) "
                                 "pair with 0 <= low <= high")


def _filter(cfg: LossConfig, train_logp, infer_logp, mask):
    if cfg.filter == "icepop":
        return obj.icepop_mask(train_logp, infer_logp, low=cfg.icepop_low, high=cfg.icepop_high)
    if cfg.filter == "kpop":
        return obj.kpop_mask(train_logp, infer_logp, threshold=cfg.kpop_threshold)
    return jnp.ones_like(mask)


def policy_objective(cfg: LossConfig, batch: dict, logp, values=None, ref_logp=None):
    """Loss (to minimise) and metrics for one batch.

    ``batch`` holds ``loss_mask``, ``behav_logp``, ``advantages`` ([B] or [B, T]), ``weight`` [B]
    (staleness down-weight, 1 = full), and optionally ``train_at_behavior_logp`` (the learner's
    recompute at the behaviour version, for HisPO and the filters) and ``returns`` (for a critic).
    ``values`` are the critic's state values aligned with the tokens, ``V(c_t)`` for the token at
    ``t`` (:func:`agentjax.learner.critic.state_values`); ``ref_logp`` the frozen reference
    policy's log-probs of the same tokens.
    """
    # The down-weight w scales each sequence's advantages (every loss here is linear in A for
    # w >= 0); w = 0 drops the row. Folded into the mask it would cancel in a per-sequence mean,
    # sum_t w m x / sum_t w m, and a down-weight would do nothing under seq_mean_* aggregation.
    w = batch["weight"]
    mask = batch["loss_mask"] * (w[:, None] > 0)
    behav = batch["behav_logp"]
    train_v = batch.get("train_at_behavior_logp")
    ref = jax.lax.stop_gradient(logp) if train_v is None else train_v
    keep = _filter(cfg, ref, behav, batch["loss_mask"])
    metrics = {"masked/filter_" + cfg.filter: obj.masked_mean(1.0 - keep, batch["loss_mask"])}
    m = mask * keep
    adv = batch["advantages"]
    if cfg.negative_scale != 1.0:
        adv = jnp.where(adv < 0, cfg.negative_scale * adv, adv)
    adv = adv * (w if adv.ndim == 1 else w[:, None])
    common = dict(aggregation=cfg.aggregation, max_len=logp.shape[1])  # Dr.GRPO constant: padded length
    if cfg.name == "ppo":
        loss, lm = obj.ppo_loss(logp, behav, adv, m, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                **common)
    elif cfg.name == "grpo":
        loss, lm = obj.grpo_loss(logp, behav, adv, m, clip_low=cfg.clip_low,
                                 clip_high=cfg.clip_high, ref_logp=ref_logp, kl_coef=cfg.kl_coef,
                                 kl_kind=cfg.kl_kind, **common)
    elif cfg.name == "gspo":
        adv = adv if adv.ndim == 1 else obj.masked_mean(adv, m, axis=1)
        loss, lm = obj.gspo_loss(logp, behav, adv, m, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
    elif cfg.name == "cispo":
        loss, lm = obj.cispo_loss(logp, behav, adv, m, clip_high=cfg.clip_high, **common)
    elif cfg.name == "mis_po":
        loss, lm = obj.mis_po_loss(logp, behav, adv, m, token_bounds=cfg.mis_token_bounds,
                                   seq_bounds=cfg.mis_seq_bounds, **common)
    else:
        loss, lm = obj.hispo_loss(
            logp, ref, behav, adv, m,
            mismatch_token_bounds=cfg.hispo_mismatch_bounds, mismatch_seq_bounds=None,
            staleness_token_bounds=cfg.hispo_staleness_bounds, staleness_seq_bounds=None,
            clip_low=cfg.clip_low, clip_high=cfg.clip_high, **common,
        )
    metrics.update({f"loss/{k}": v for k, v in lm.items()})
    if cfg.kl_coef and cfg.name != "grpo" and ref_logp is not None:
        kl = obj.aggregate(obj.kl_penalty(logp, ref_logp, cfg.kl_kind), m, cfg.aggregation,
                           max_len=logp.shape[1])
        loss = loss + cfg.kl_coef * kl
        metrics["loss/kl"] = kl
    if cfg.value_coef and values is not None:
        vmask = batch["loss_mask"]
        vloss = 0.5 * obj.masked_mean((values - jax.lax.stop_gradient(batch["returns"])) ** 2, vmask)
        loss = loss + cfg.value_coef * vloss
        metrics["loss/value"] = vloss
    w = obj.importance_weights(ref, behav, batch["loss_mask"], level="token")
    metrics["ess/token_frac"] = obj.ess(w, batch["loss_mask"]) / jnp.maximum(
        jnp.sum(batch["loss_mask"]), 1.0
    )
    metrics["loss/total"] = loss
    return loss, metrics
