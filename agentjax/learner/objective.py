"""The learner's objective, chosen by config from the loss registry (``agentjax.objectives.registry``).

``LossConfig`` is the run config's ``loss`` section: ``name`` picks the loss, a built-in's short
name or any ``package.module:function`` with the objectives' signature (its keyword arguments in
``loss.kwargs``: ``--config.loss.kwargs.beta=0.1``; :mod:`agentjax.objectives.registry`); its own fields
(``clip_low``, ``clip_high``, ``aggregation``, bounds, ...) sit in the sub-section named after it
(``loss.grpo.clip_high=0.28``) and default to its paper's values; a field the chosen loss does
not have is an error naming it. Other losses' sub-sections are ignored, so switching
``loss.name`` on the command line gives the new loss its own defaults, never the old one's clip.
The rest is shared by every loss: the consistency filter (IcePop / KPop), truncated IS
(``tis_cap``), the advantage estimator, reference KL, value loss, negative-advantage scale.

``policy_objective(cfg, batch, logp, ...)`` applies the filter, the staleness down-weight per
sequence, TIS, then the loss. The filters and TIS compare the learner's engine with the
sampler's at the *same* parameters (``filter_ratio="mismatch"``: ``batch["train_at_behavior_logp"]``,
the learner's recompute with the behaviour version's kept parameters) or the current policy with
the sampler (``"total"``: mismatch and staleness together, a hard trust region).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agentjax import importpath
from agentjax import objectives as obj
from agentjax.choice import Choice
from agentjax.objectives import registry


class Filter(Choice):
    NONE = "none"
    ICEPOP = "icepop"  # mask tokens whose ratio leaves [icepop_low, icepop_high]
    KPOP = "kpop"  # mask tokens whose binary KL exceeds kpop_threshold


class FilterRatio(Choice):
    MISMATCH = "mismatch"  # learner vs sampler at the behaviour version's parameters
    TOTAL = "total"  # current policy vs sampler (mismatch and staleness together)


class Advantage(Choice):
    GROUP_STD = "group_std"  # GRPO
    DR_GRPO = "dr_grpo"
    RLOO = "rloo"
    GAE = "gae"  # a critic (model.value_head "shared" or "separate")


class KLKind(Choice):
    K1 = "k1"
    K2 = "k2"
    K3 = "k3"


LOSSES = tuple(registry.LOSSES)  # an open registry: loss.name stays a checked string
FILTERS = tuple(Filter.values())
_TIS_LOSSES = ("ppo", "grpo", "cispo")  # losses linear in a per-token advantage weight


@dataclasses.dataclass(frozen=True)
class _SharedLossFields:
    """The fields every loss shares; :class:`LossConfig` adds one section per registered loss."""

    name: str = "grpo"  # a built-in (LOSSES) or an import path 'package.module:function'
    kwargs: dict = dataclasses.field(default_factory=dict)  # over the loss's own fields / its kwargs
    # consistency filter (IcePop: Ling team 2025, band [0.5, 2]; KPop: binary-KL threshold 0.05)
    filter: Filter = Filter.NONE
    filter_ratio: FilterRatio = FilterRatio.MISMATCH
    icepop_low: float = 0.5
    icepop_high: float = 2.0
    kpop_threshold: float = 0.05
    tis_cap: float = 0.0  # > 0: truncated IS on the mismatch ratio (Yao et al. 2025 use 2)
    kl_coef: float = 0.0
    kl_kind: KLKind = KLKind.K3
    value_coef: float = 0.0
    advantage: Advantage = Advantage.GROUP_STD
    gamma: float = 1.0  # GAE: discount per action token
    gae_lambda: float = 0.95
    whiten: bool = True  # GAE: normalise advantages over the batch's action tokens
    negative_scale: float = 1.0  # multiplies negative advantages (0: learn only from better-than-average)
    # > 0: every RL update adds demo_coef x the mean NLL of demo_rows warm-start demonstration rows
    # (InstructGPT's PPO-ptx): keeps what the policy shares across tasks while RL moves the rest
    demo_coef: float = 0.0
    demo_rows: int = 8

    def __post_init__(self):
        if not importpath.is_path(self.name) and self.name not in LOSSES:
            raise ValueError(
                f"loss.name={self.name!r} is invalid; allowed values: {list(LOSSES)} "
                "or an import path 'package.module:function'"
            )
        for name in (*LOSSES, "kwargs"):  # hashable, read-only sections (each loss reads only its own)
            object.__setattr__(self, name, _frozen(dict(getattr(self, name))))
        for field, cls in (
            ("filter", Filter),
            ("filter_ratio", FilterRatio),
            ("advantage", Advantage),
            ("kl_kind", KLKind),
        ):
            object.__setattr__(self, field, cls.parse(f"loss.{field}", getattr(self, field)))
        self.objective  # noqa: B018 - builds the loss's own config: a foreign field is an error
        for name in LOSSES:  # the chosen loss's section and every written one: complete and checked
            if name == self.name or getattr(self, name):
                own = dataclasses.asdict(self._section_config(name))  # the given values over the paper's
                object.__setattr__(self, name, _frozen(own))
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.gae_lambda <= 1.0):
            raise ValueError(
                f"loss.gamma={self.gamma}, loss.gae_lambda={self.gae_lambda}: each must be in [0, 1]"
            )
        if self.advantage == "gae" and self.value_coef <= 0:
            raise ValueError(
                f"loss.value_coef={self.value_coef} is invalid with loss.advantage='gae'; "
                "must be > 0 (the critic has to learn)"
            )
        if not 0.0 <= self.negative_scale <= 1.0:
            raise ValueError(f"loss.negative_scale={self.negative_scale} is invalid; must be in [0, 1]")
        if self.tis_cap < 0 or (self.tis_cap and self.name not in _TIS_LOSSES):
            raise ValueError(
                f"loss.tis_cap={self.tis_cap} is invalid with loss.name={self.name!r}; "
                f"0 (off) or a positive cap, only with {list(_TIS_LOSSES)} (the others "
                "mask or reweight the mismatch themselves)"
            )
        if self.demo_rows < 1:
            raise ValueError(f"loss.demo_rows={self.demo_rows} is invalid; must be >= 1")
        for f in ("kpop_threshold", "kl_coef", "value_coef", "demo_coef"):
            if not getattr(self, f) >= 0:
                raise ValueError(f"loss.{f}={getattr(self, f)} is invalid; must be >= 0")
        if not 0 <= self.icepop_low <= self.icepop_high:
            raise ValueError(
                f"loss.icepop_low={self.icepop_low}, loss.icepop_high={self.icepop_high} "
                "are invalid; must satisfy 0 <= icepop_low <= icepop_high"
            )

    def check(self) -> None:
        """What a training run requires of its ``loss`` section (``agentjax.run.config`` calls it)."""
        if self.value_coef and self.advantage != Advantage.GAE:
            raise ValueError(
                f"loss.value_coef={self.value_coef} needs returns from a critic: set "
                "loss.advantage to 'gae' or value_coef to 0"
            )

    @property
    def objective(self):
        """The chosen loss's own config (``agentjax.objectives.registry``)."""
        if importpath.is_path(self.name):  # a user's loss: its fields are loss.kwargs
            return registry.make(self.name, **dict(self.kwargs))
        own = {f.name for f in dataclasses.fields(registry.LOSSES[self.name])}
        bad = sorted(set(dict(self.kwargs)) - own)
        if bad:
            raise ValueError(
                f"{', '.join('loss.kwargs.' + b for b in bad)} is not a field of loss {self.name!r}; "
                f"its fields: {sorted(own)}"
            )
        return self._section_config(self.name, dict(self.kwargs))

    def _section_config(self, name: str, over: dict | None = None):
        """Loss ``name``'s own config from its section (``loss.<name>``), ``over`` laid on top."""
        try:
            return registry.make(name, **{**dict(getattr(self, name)), **(over or {})})
        except ValueError as e:
            raise ValueError(str(e).replace("loss.", f"loss.{name}.")) from None

    @property
    def needs(self) -> frozenset:
        """Extra log-probs the objective needs: ``"train_v"`` (the learner at the behaviour
        version) and/or ``"prox"`` (the learner at the start of the step)."""
        need = set(self.objective.needs)
        if (self.filter != "none" and self.filter_ratio == "mismatch") or self.tis_cap:
            need.add("train_v")
        return frozenset(need)


def _frozen(section: dict) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in section.items()))


# One section per registered loss (loss.<name>.<field>): a new loss is its file and its registry
# line, no field here. Absent fields take the loss's paper values, held once in the registry.
LossConfig = dataclasses.make_dataclass(
    "LossConfig",
    [(name, dict, dataclasses.field(default_factory=dict)) for name in registry.LOSSES],
    bases=(_SharedLossFields,),
    frozen=True,
)
LossConfig.__module__ = __name__
LossConfig.__doc__ = """The run config's ``loss`` section: the shared fields and, per registered
loss, its own section ``loss.<name>`` (a written or chosen one holds the loss's complete fields,
the given values over its paper's)."""


def _filter(cfg: LossConfig, train_logp, infer_logp, mask):
    if cfg.filter == "icepop":
        return obj.icepop_mask(train_logp, infer_logp, low=cfg.icepop_low, high=cfg.icepop_high)
    if cfg.filter == "kpop":
        return obj.kpop_mask(train_logp, infer_logp, threshold=cfg.kpop_threshold)
    return jnp.ones_like(mask)


def ratio_metrics(logp, behav, train_v, prox, mask) -> dict:
    """The three factors of ``pi / mu`` (update x staleness x mismatch) as masked means."""
    up, st, mm, tot = obj.decompose_three(logp, prox, train_v, behav)
    return {
        "ratio/update": obj.masked_mean(up, mask),
        "ratio/staleness": obj.masked_mean(st, mask),
        "ratio/mismatch": obj.masked_mean(mm, mask),
        "ratio/total": obj.masked_mean(tot, mask),
        "mismatch/max_abs_delta": jnp.max(jnp.where(mask > 0, jnp.abs(train_v - behav), 0.0)),
    }


def policy_objective(cfg: LossConfig, batch: dict, logp, values=None, ref_logp=None):
    """Loss (to minimise) and metrics for one batch.

    ``batch`` holds ``loss_mask``, ``behav_logp``, ``advantages`` ([B] or [B, T]), ``weight`` [B]
    (staleness down-weight, 1 = full), and, where ``cfg.needs`` says so,
    ``train_at_behavior_logp`` (the learner's recompute at the behaviour version) and
    ``prox_logp`` (the learner at the start of the step); ``returns`` for a critic.
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
    # prox: the parameters at the step's start; with one update per step that is logp itself
    missing = ["train_v"] if "train_v" in cfg.needs and "train_at_behavior_logp" not in batch else []
    if missing:
        raise ValueError(
            f"loss {cfg.name!r} (filter={cfg.filter!r}, filter_ratio={cfg.filter_ratio!r}, "
            f"tis_cap={cfg.tis_cap}) needs the log-probs {missing}: pass behaviour "
            "parameters to the train step (agentjax.learner.step)"
        )
    train_v = batch.get("train_at_behavior_logp")
    prox = batch.get("prox_logp", jax.lax.stop_gradient(logp))
    ref = train_v if cfg.filter_ratio == "mismatch" and train_v is not None else jax.lax.stop_gradient(logp)
    keep = _filter(cfg, ref, behav, batch["loss_mask"])
    metrics = {"masked/filter_" + cfg.filter: obj.masked_mean(1.0 - keep, batch["loss_mask"])}
    m = mask * keep
    adv = batch["advantages"]
    if cfg.negative_scale != 1.0:
        adv = jnp.where(adv < 0, cfg.negative_scale * adv, adv)
    adv = adv * (w if adv.ndim == 1 else w[:, None])
    if cfg.tis_cap:  # truncated IS on the mismatch ratio pi_v / mu, no gradient
        tis = jnp.minimum(jnp.exp(jnp.where(m > 0, train_v - behav, 0.0)), cfg.tis_cap)
        metrics["tis/weight_mean"] = obj.masked_mean(tis, m)
        metrics["tis/truncated"] = obj.masked_mean((tis >= cfg.tis_cap).astype(jnp.float32), m)
        adv = (adv[:, None] if adv.ndim == 1 else adv) * jax.lax.stop_gradient(tis)
    logps = registry.Logps(logp, behav, train_v, prox)
    loss, lm = cfg.objective.apply(
        logps, adv, m, max_len=logp.shape[1], ref_logp=ref_logp, kl_coef=cfg.kl_coef, kl_kind=cfg.kl_kind
    )
    metrics.update({f"loss/{k}": v for k, v in lm.items()})
    if cfg.kl_coef and cfg.name != "grpo" and ref_logp is not None:
        kl = obj.aggregate(
            obj.kl_penalty(logp, ref_logp, cfg.kl_kind),
            m,
            getattr(cfg.objective, "aggregation", "token_mean"),
            max_len=logp.shape[1],
        )
        loss = loss + cfg.kl_coef * kl
        metrics["loss/kl"] = kl
    if cfg.value_coef and values is not None:
        vmask = batch["loss_mask"]
        vloss = 0.5 * obj.masked_mean((values - jax.lax.stop_gradient(batch["returns"])) ** 2, vmask)
        loss = loss + cfg.value_coef * vloss
        metrics["loss/value"] = vloss
    if train_v is not None:
        metrics.update(ratio_metrics(jax.lax.stop_gradient(logp), behav, train_v, prox, batch["loss_mask"]))
    w = obj.importance_weights(ref, behav, batch["loss_mask"], level="token")
    metrics["ess/token_frac"] = obj.ess(w, batch["loss_mask"]) / jnp.maximum(jnp.sum(batch["loss_mask"]), 1.0)
    metrics["loss/total"] = loss
    return loss, metrics
