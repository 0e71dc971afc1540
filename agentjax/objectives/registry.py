"""Every policy loss by name, each with its own config carrying its paper's defaults.

    cfg = LOSSES["gspo"]()                       # GSPO with the paper's clip range
    cfg = make("cispo", clip_high=0.28)          # a field CISPO does not have is an error
    loss, metrics = cfg.apply(Logps(logp, behav, train_v, prox), advantages, mask, max_len=T)

:class:`Logps` holds the log-probs of the sampled tokens under the policies a loss may use:
``current`` (differentiated), ``behavior`` (the sampler's record, ``mu``), ``train_v`` (the
learner's recompute at the behaviour version, ``pi_v``; HisPO's mismatch/update split) and
``prox`` (the parameters at the start of the training step; decoupled PPO). A loss states which
it needs (``needs``), so the training loop computes only those.

One door for every loss: ``loss.name`` is a short name of :data:`BUILTIN` (each an import path of
a class below) or any ``package.module:attribute``. A class with ``apply`` (like those below) is
built with the loss's fields; a function with the objectives' signature,
``fn(logp, behav_logp, advantages, mask, **kwargs) -> (loss, metrics)`` (``ppo_loss``, or a user's
own composed from :mod:`agentjax.objectives`), is wrapped in :class:`FunctionLoss` with its
``kwargs`` (``loss.kwargs.x=...``); it gets ``max_len`` too when it takes that argument.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, NamedTuple

from agentjax import importpath
from agentjax.objectives.core import AGGREGATION_MODES, check_clip, masked_mean
from agentjax.objectives.decoupled import decoupled_ppo_loss
from agentjax.objectives.losses import cispo_loss, grpo_loss, gspo_loss, ppo_loss
from agentjax.objectives.offpolicy import hispo_loss, mis_po_loss


class Logps(NamedTuple):
    current: Any
    behavior: Any
    train_v: Any = None
    prox: Any = None


_INF = float("inf")


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and -_INF < v < _INF  # NaN fails


def _check_types(cfg) -> None:
    """Each field against the type of its paper default (a string where a number belongs, NaN, a
    bound that is not a pair), before any comparison could raise a TypeError naming nothing."""
    for f in dataclasses.fields(cfg):
        v, d = getattr(cfg, f.name), f.default
        if f.name.endswith("_bounds"):
            ok = v is None or (isinstance(v, tuple) and len(v) == 2 and all(_number(x) for x in v))
            want = "None or a pair (low, high) of finite numbers"
        elif isinstance(d, bool):
            ok, want = isinstance(v, bool), "True or False"
        elif isinstance(d, int | float):
            ok, want = _number(v), "a finite number"
        elif isinstance(d, str):
            ok, want = isinstance(v, str), "a string"
        else:
            ok, want = True, ""
        if not ok:
            raise ValueError(f"loss.{f.name}={v!r} is invalid; must be {want}")


def _check(name: str, cfg) -> None:
    _check_types(cfg)
    check_clip(getattr(cfg, "clip_low", 0.0), getattr(cfg, "clip_high", 0.0), prefix="loss.")
    agg = getattr(cfg, "aggregation", "token_mean")
    if agg not in AGGREGATION_MODES:
        raise ValueError(f"loss.aggregation={agg!r} is invalid; allowed values: {list(AGGREGATION_MODES)}")
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name.endswith("_bounds") and v is not None and not (len(v) == 2 and 0 <= v[0] <= v[1]):
            raise ValueError(f"loss.{f.name}={v} is invalid; need (low, high) with 0 <= low <= high")


@dataclasses.dataclass(frozen=True)
class PPO:
    """PPO-clip (Schulman et al. 2017, arXiv:1707.06347): epsilon 0.2 on both sides, token mean."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: str = "token_mean"
    needs = ()

    def apply(self, lp: Logps, adv, mask, *, max_len, **_):
        return ppo_loss(
            lp.current,
            lp.behavior,
            adv,
            mask,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            aggregation=self.aggregation,
            max_len=max_len,
        )


@dataclasses.dataclass(frozen=True)
class GRPO:
    """GRPO (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300): epsilon 0.2, token mean within a
    sequence then mean over sequences. (The paper's KL beta 0.04 is ``loss.kl_coef``, off by
    default here; DAPO's clip-higher is ``clip_high=0.28``.)"""

    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: str = "seq_mean_token_mean"
    needs = ()

    def apply(self, lp: Logps, adv, mask, *, max_len, ref_logp=None, kl_coef=0.0, kl_kind="k3"):
        return grpo_loss(
            lp.current,
            lp.behavior,
            adv,
            mask,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            ref_logp=ref_logp,
            kl_coef=kl_coef,
            kl_kind=kl_kind,
            aggregation=self.aggregation,
            max_len=max_len,
        )


@dataclasses.dataclass(frozen=True)
class GSPO:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): clip range 3e-4 / 4e-4 on the length-normalised
    sequence ratio; one advantage per sequence (token advantages are averaged)."""

    clip_low: float = 3e-4
    clip_high: float = 4e-4
    needs = ()

    def apply(self, lp: Logps, adv, mask, **_):
        adv = adv if adv.ndim == 1 else masked_mean(adv, mask, axis=1)
        return gspo_loss(lp.current, lp.behavior, adv, mask, clip_low=self.clip_low, clip_high=self.clip_high)


@dataclasses.dataclass(frozen=True)
class CISPO:
    """CISPO (MiniMax-M1, arXiv:2506.13585): no lower bound on the IS weight (``clip_low=None``,
    the paper's setting); the upper epsilon is tuned in the paper, 0.28 here (DAPO's value)."""

    clip_low: float | None = None
    clip_high: float = 0.28
    aggregation: str = "token_mean"
    needs = ()

    def apply(self, lp: Logps, adv, mask, *, max_len, **_):
        return cispo_loss(
            lp.current,
            lp.behavior,
            adv,
            mask,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            aggregation=self.aggregation,
            max_len=max_len,
        )


@dataclasses.dataclass(frozen=True)
class MISPO:
    """MIS-PO (Step 3.5 Flash, s5.2.1): binary accept/reject on the train/behaviour ratio.
    Bounds: token ``[0.5, 2]`` (IcePop's band), trajectory geometric mean ``[0.8, 1.25]``; the
    report does not publish its values, these are ours."""

    token_bounds: tuple[float, float] | None = (0.5, 2.0)
    seq_bounds: tuple[float, float] | None = (0.8, 1.25)
    aggregation: str = "token_mean"
    needs = ()

    def apply(self, lp: Logps, adv, mask, *, max_len, **_):
        return mis_po_loss(
            lp.current,
            lp.behavior,
            adv,
            mask,
            token_bounds=self.token_bounds,
            seq_bounds=self.seq_bounds,
            aggregation=self.aggregation,
            max_len=max_len,
        )


@dataclasses.dataclass(frozen=True)
class HisPO:
    """HisPO (LongCat-Flash-Prover, s3.3): separate token masks on the mismatch ratio
    ``pi_v / mu`` and the update ratio ``pi / pi_v``, PPO clip on the update ratio. Bounds: mismatch
    ``[0.5, 2]``, staleness ``[0.2, 5]``, clip 0.2 / 0.28 (the paper fixes the structure, not
    these values). Needs the learner's recompute at the behaviour version."""

    mismatch_bounds: tuple[float, float] | None = (0.5, 2.0)
    staleness_bounds: tuple[float, float] | None = (0.2, 5.0)
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: str = "token_mean"
    needs = ("train_v",)

    def apply(self, lp: Logps, adv, mask, *, max_len, **_):
        return hispo_loss(
            lp.current,
            lp.train_v,
            lp.behavior,
            adv,
            mask,
            mismatch_token_bounds=self.mismatch_bounds,
            mismatch_seq_bounds=None,
            staleness_token_bounds=self.staleness_bounds,
            staleness_seq_bounds=None,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            aggregation=self.aggregation,
            max_len=max_len,
        )


@dataclasses.dataclass(frozen=True)
class DecoupledPPO:
    """Decoupled PPO (Fu et al. 2025, AReaL, arXiv:2505.24298): clip 0.2 around the proximal
    policy, behaviour weight ``pi_prox / mu`` uncapped (AReaL's cap is optional). Needs the
    proximal log-probs (the parameters at the start of the step)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    behavior_cap: float | None = None
    aggregation: str = "token_mean"
    needs = ("prox",)

    def apply(self, lp: Logps, adv, mask, *, max_len, **_):
        return decoupled_ppo_loss(
            lp.current,
            lp.prox,
            lp.behavior,
            adv,
            mask,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            behavior_cap=self.behavior_cap,
            aggregation=self.aggregation,
            max_len=max_len,
        )


LOSSES = {
    "ppo": PPO,
    "grpo": GRPO,
    "gspo": GSPO,
    "cispo": CISPO,
    "mis_po": MISPO,
    "hispo": HisPO,
    "decoupled_ppo": DecoupledPPO,
}
LOSS_FIELDS = sorted({f.name for cls in LOSSES.values() for f in dataclasses.fields(cls)})
# the built-ins' short names, each the import path of its class: the same door as a user's loss
BUILTIN = {name: f"{__name__}:{cls.__name__}" for name, cls in LOSSES.items()}


@dataclasses.dataclass(frozen=True)
class FunctionLoss:
    """A loss function with the objectives' signature and its own keyword arguments."""

    fn: Any
    kwargs: tuple = ()  # sorted (name, value) pairs: hashable (the config is a jit static)
    path: str = ""
    needs = ()

    def apply(self, lp: Logps, adv, mask, *, max_len, **_):
        kw = dict(self.kwargs)
        if _takes(self.fn, "max_len"):
            kw["max_len"] = max_len
        out = self.fn(lp.current, lp.behavior, adv, mask, **kw)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
            raise ValueError(f"loss.name={self.path!r} must return (loss, metrics dict); got {type(out)}")
        return out


def _takes(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _function(path: str, fn, fields: dict) -> FunctionLoss:
    """``fn`` checked against the objectives' signature with ``fields`` as its keywords."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ValueError(f"loss.name={path!r} is not a function with a signature") from None
    try:
        sig.bind(0, 0, 0, 0, **fields)  # (logp, behav_logp, advantages, mask, **kwargs)
    except TypeError as e:
        raise ValueError(
            f"loss.name={path!r} does not take (logp, behav_logp, advantages, mask, **loss.kwargs) "
            f"with loss.kwargs={sorted(fields)}: {e}"
        ) from None
    kw = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in fields.items()))
    return FunctionLoss(fn, kw, path)


def resolve(name: str):
    """What ``loss.name`` names: a built-in's class, or the object at an import path."""
    if not importpath.is_path(name) and name not in BUILTIN:
        raise ValueError(
            f"loss.name={name!r} is invalid; allowed values: {list(LOSSES)} "
            "or an import path 'package.module:function'"
        )
    return importpath.load(BUILTIN.get(name, name), "loss.name")


def make(name: str, **fields):
    """The config of loss ``name`` with ``fields`` over its paper defaults; a field the loss does
    not have is an error naming it and the loss's own fields."""
    cls = resolve(name)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and hasattr(cls, "apply")):
        if isinstance(cls, type) or not callable(cls):
            raise ValueError(
                f"loss.name={name!r} is a {type(cls).__name__}; name a loss function "
                "fn(logp, behav_logp, advantages, mask, **kwargs) or a loss dataclass with apply()"
            )
        return _function(name, cls, fields)
    own = {f.name for f in dataclasses.fields(cls)}
    bad = sorted(set(fields) - own)
    if bad:
        raise ValueError(
            f"{', '.join('loss.' + b for b in bad)} is not a field of loss {name!r}; "
            f"its fields: {sorted(own)}"
        )
    cfg = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
    _check(name, cfg)
    return cfg
