"""The jitted train step: score, objective, gradient accumulation, clipping, NaN/Inf guard.

    state, metrics = train_step(state, batch)              # GRPO-family group advantages
    state, metrics = train_step(state, batch, ref_params)  # + KL to a frozen reference policy

Advantages come from the batch (``loss.advantage="group"``) or from the critic
(``loss.advantage="gae"``: token-level GAE with truncation bootstrap over the batch's
``step_reward`` / ``bootstrap`` / ``lengths``, see :mod:`agentjax.learner.critic`, plus the value
loss). With ``loss.kl_coef > 0`` and ``ref_params``, the reference log-probs of the batch's tokens
are computed once per step (no gradient) and the objective adds the KL penalty.

``TrainState`` is a pytree (step, params, optimizer state, rng), so it can be checkpointed and
sharded. A step whose loss or gradients are not finite leaves params and optimizer state
unchanged and reports ``skipped_nonfinite = 1``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from agentjax.learner import critic
from agentjax.learner.objective import LossConfig, policy_objective
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import critic_values
from agentjax.policy.scoring import token_logprobs


class TrainState(NamedTuple):
    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array  # raw uint32 key data, so the state checkpoints as plain arrays


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    learning_rate: float = 1e-3
    warmup_steps: int = 0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.99
    grad_clip: float = 1.0
    grad_accum: int = 1

    def __post_init__(self):
        if not 0 < self.learning_rate < float("inf"):  # NaN fails too
            raise ValueError(f"optim.learning_rate={self.learning_rate} is invalid; "
                             "must be a finite number > 0")
        if self.grad_accum < 1:
            raise ValueError(f"optim.grad_accum={self.grad_accum} is invalid; must be >= 1")


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
    lr = cfg.learning_rate
    if cfg.warmup_steps:
        lr = optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps)
    chain = [optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay)]
    if cfg.grad_clip > 0:
        chain.insert(0, optax.clip_by_global_norm(cfg.grad_clip))
    return optax.chain(*chain)


def init_train_state(params, tx: optax.GradientTransformation, seed: int) -> TrainState:
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )


def _loss_fn(params, batch, model_config: ModelConfig, loss_config: LossConfig, transform):
    logp, _ = token_logprobs(
        params, batch["tokens"], batch["positions"], config=model_config,
        transform=transform, routes=batch.get("routes"),
    )
    values = None
    if loss_config.value_coef and model_config.value_head != "none":
        raw = critic_values(params, batch["tokens"], batch["positions"], config=model_config)
        values = critic.state_values(raw)
        if loss_config.advantage == "gae":
            adv, ret = critic.token_gae(raw, batch["loss_mask"], batch["step_reward"], batch["bootstrap"],
                                        batch["lengths"], gamma=loss_config.gamma, lam=loss_config.gae_lambda)
            if loss_config.whiten:
                adv = critic.whiten(adv, batch["loss_mask"])
            batch = {**batch, "advantages": adv, "returns": ret}
    elif loss_config.advantage == "gae":
        raise ValueError("loss.advantage='gae' needs a critic: set model.value_head to "
                         "'shared' or 'separate'")
    return policy_objective(loss_config, batch, logp, values=values, ref_logp=batch.get("ref_logp"))


def _all_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _train_step(state: TrainState, batch, ref_params=None, *, model_config, loss_config, tx, transform,
                grad_accum):
    if ref_params is not None and loss_config.kl_coef:
        ref_logp, _ = token_logprobs(ref_params, batch["tokens"], batch["positions"], config=model_config,
                                     transform=transform, routes=batch.get("routes"))
        batch = {**batch, "ref_logp": jax.lax.stop_gradient(ref_logp)}
    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
    args = (model_config, loss_config, transform)
    if grad_accum == 1:
        (loss, metrics), grads = grad_fn(state.params, batch, *args)
    else:
        b = batch["tokens"].shape[0]
        if b % grad_accum:
            raise ValueError(f"batch size {b} is not divisible by optim.grad_accum={grad_accum}")
        micro = jax.tree.map(lambda x: x.reshape((grad_accum, b // grad_accum) + x.shape[1:]), batch)

        def body(acc, mb):
            (l, m), g = grad_fn(state.params, mb, *args)
            return jax.tree.map(jnp.add, acc, (l, m, g)), None

        zeros = jax.tree.map(
            jnp.zeros_like,
            jax.eval_shape(lambda: grad_fn(state.params, jax.tree.map(lambda x: x[0], micro), *args)),
        )
        zeros = (zeros[0][0], zeros[0][1], zeros[1])
        (loss, metrics, grads), _ = jax.lax.scan(body, zeros, micro)
        loss, metrics, grads = jax.tree.map(lambda x: x / grad_accum, (loss, metrics, grads))
    finite = jnp.isfinite(loss) & _all_finite(grads)
    updates, new_opt = tx.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    pick = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
    metrics = dict(metrics)
    metrics["grad_norm"] = optax.tree.norm(grads)
    metrics["skipped_nonfinite"] = 1.0 - finite.astype(jnp.float32)
    new_state = TrainState(
        step=state.step + finite.astype(jnp.int32),
        params=pick(new_params, state.params),
        opt_state=pick(new_opt, state.opt_state),
        rng=state.rng,
    )
    return new_state, metrics


def make_train_step(model_config: ModelConfig, loss_config: LossConfig,
                    tx: optax.GradientTransformation, *, transform=None, grad_accum: int = 1,
                    donate: bool = False):
    """A jitted ``(state, batch, ref_params=None) -> (state, metrics)``.

    ``donate=True`` donates the old state's buffers. Leave it off when anything else holds the
    old parameters: colocated sampling shares the very same arrays, and asynchronous rollouts of
    an older version may still run after the step.
    """
    fn = functools.partial(_train_step, model_config=model_config, loss_config=loss_config, tx=tx,
                           transform=transform, grad_accum=grad_accum)
    return jax.jit(fn, donate_argnums=0 if donate else ())
