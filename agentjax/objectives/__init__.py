"""Objectives as small pure functions: advantages, policy losses, IS corrections, filters, KL.

Conventions: token arrays are ``[B, T]`` with a float ``mask`` (1 = action token trained on),
sequence arrays are ``[B]``; log-probs (not probabilities) go in; every loss is to be minimised and
returns ``(loss, metrics)``; ``stop_gradient`` is explicit where a formula has ``sg``. This package
imports only jax and numpy (plus :class:`agentjax.trajectory.StopReason`), never ``policy/``.
"""

from agentjax.objectives.advantages import (
    discounts_from,
    gae,
    group_advantages,
    needs_bootstrap,
    prob_same_group,
    rloo_advantages,
)
from agentjax.objectives.core import (
    AGGREGATION_MODES,
    aggregate,
    check_clip,
    masked_fractions,
    masked_mean,
)
from agentjax.objectives.corrections import (
    decompose_ratio,
    ess,
    importance_weights,
    kl_penalty,
    label_noise_success,
    truncate,
)
from agentjax.objectives.decoupled import decompose_three, decoupled_ppo_loss
from agentjax.objectives.filters import binary_kl, icepop_mask, kpop_mask
from agentjax.objectives.losses import cispo_loss, grpo_loss, gspo_loss, ppo_loss
from agentjax.objectives.offpolicy import hispo_loss, mis_po_loss

__all__ = [
    "AGGREGATION_MODES",
    "aggregate",
    "binary_kl",
    "check_clip",
    "cispo_loss",
    "decompose_ratio",
    "decompose_three",
    "decoupled_ppo_loss",
    "discounts_from",
    "ess",
    "gae",
    "group_advantages",
    "grpo_loss",
    "gspo_loss",
    "hispo_loss",
    "icepop_mask",
    "importance_weights",
    "kl_penalty",
    "kpop_mask",
    "label_noise_success",
    "masked_fractions",
    "masked_mean",
    "mis_po_loss",
    "needs_bootstrap",
    "ppo_loss",
    "prob_same_group",
    "rloo_advantages",
    "truncate",
]
