"""The jitted train step: score, objective, gradient accumulation, clipping, NaN/Inf guard.

(One module, over 300 lines: the train step, its accumulation and the optimizer state form one
jitted program and are read together.)

    state, metrics = train_step(state, batch)              # GRPO-family group advantages
    state, metrics = train_step(state, batch, ref_params)  # + KL to a frozen reference policy
    state, metrics = train_step(state, batch, None, None, demo)  # + demo_coef x demonstrations' NLL

Advantages come from the batch (``loss.advantage="group"``) or from the critic
(``loss.advantage="gae"``: token-level GAE with truncation bootstrap over the batch's
``step_reward`` / ``bootstrap`` / ``lengths``, see :mod:`agentjax.learner.critic`, plus the value
loss). With ``loss.kl_coef > 0`` and ``ref_params``, the reference log-probs of the batch's tokens
are computed once per step (no gradient) and the objective adds the KL penalty.

``TrainState`` is a pytree (step, params, optimizer state, rng), so it can be checkpointed and
sharded. A step whose loss or gradients are not finite leaves params and optimizer state
unchanged and reports ``skipped_nonfinite = 1``; so does one whose gradient is exactly zero
(``skipped_empty = 1``, unless ``optim.empty_batches="update"``): Adam would otherwise keep moving
every weight along its first moment with no signal in the batch.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from agentjax.learner import critic
from agentjax.learner.objective import LossConfig, policy_objective
from agentjax.learner.sft import demo_nll
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import critic_values
from agentjax.policy.scoring import token_logprobs, token_logprobs_and_routes


@flax.struct.dataclass
class TrainState:
    """The learner's whole state, a pytree (``flax.struct``: immutable, ``.replace``)."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array  # raw uint32 key data, so the state checkpoints as plain arrays


EMPTY_BATCHES = ("skip", "update")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    learning_rate: float = 1e-3
    warmup_steps: int = 0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.99
    grad_clip: float = 1.0
    grad_accum: int = 1
    minibatches: int = 1  # optimiser updates per learner batch (PPO/AReaL minibatches)
    # A batch whose gradient is exactly zero (every group uniform, no KL or value term) is not an
    # optimiser step: params, Adam's moments and the step count stay as they are. With "update",
    # Adam keeps moving every weight along its first moment through such steps (about 4-5 lr-sized
    # moves per informative step), which is what erased the code agent's copying (docs/codefix.md).
    empty_batches: str = "skip"

    def __post_init__(self):
        if not 0 < self.learning_rate < float("inf"):  # NaN fails too
            raise ValueError(
                f"optim.learning_rate={self.learning_rate} is invalid; must be a finite number > 0"
            )
        if self.grad_accum < 1:
            raise ValueError(f"optim.grad_accum={self.grad_accum} is invalid; must be >= 1")
        if self.minibatches < 1:
            raise ValueError(f"optim.minibatches={self.minibatches} is invalid; must be >= 1")
        if self.empty_batches not in EMPTY_BATCHES:
            raise ValueError(
                f"optim.empty_batches={self.empty_batches!r} is invalid; must be one of {EMPTY_BATCHES}"
            )


class Optimizer(optax.GradientTransformationExtraArgs):
    """An optax transformation that also says its learning rate: ``learning_rate(count)`` is the
    rate of the update that follows ``count`` applied updates (:func:`make_optimizer` sets it;
    the train step reports it as ``optim/learning_rate``)."""

    learning_rate: Any


def make_optimizer(cfg: OptimConfig) -> Optimizer:
    lr = cfg.learning_rate
    if cfg.warmup_steps:
        lr = optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps)
    chain = [optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay)]
    if cfg.grad_clip > 0:
        chain.insert(0, optax.clip_by_global_norm(cfg.grad_clip))
    tx = Optimizer(*optax.chain(*chain))
    tx.learning_rate = lr if callable(lr) else (lambda count: jnp.asarray(lr, jnp.float32))  # noqa: ARG005
    return tx


def init_train_state(params, tx: optax.GradientTransformation, seed: int) -> TrainState:
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )


def _loss_fn(params, batch, model_config: ModelConfig, loss_config: LossConfig, transform, mesh):
    (logp, _), used = token_logprobs_and_routes(
        params,
        batch["tokens"],
        batch["positions"],
        config=model_config,
        transform=transform,
        routes=batch.get("routes"),
        mesh=mesh,
    )
    values = None
    if loss_config.value_coef and model_config.value_head != "none":
        raw = critic_values(params, batch["tokens"], batch["positions"], config=model_config, mesh=mesh)
        values = critic.state_values(raw)
        if loss_config.advantage == "gae":
            adv, ret = critic.token_gae(
                raw,
                batch["loss_mask"],
                batch["step_reward"],
                batch["bootstrap"],
                batch["lengths"],
                gamma=loss_config.gamma,
                lam=loss_config.gae_lambda,
            )
            if loss_config.whiten:
                adv = critic.whiten(adv, batch["loss_mask"])
            batch = {**batch, "advantages": adv, "returns": ret}
    elif loss_config.advantage == "gae":
        raise ValueError(
            "loss.advantage='gae' needs a critic: set model.value_head to 'shared' or 'separate'"
        )
    loss, metrics = policy_objective(loss_config, batch, logp, values=values, ref_logp=batch.get("ref_logp"))
    recorded = batch.get("routes", batch.get("sampler_routes"))
    if used is not None and recorded is not None:
        metrics = {**metrics, "routing/mismatch": routing_mismatch(used, recorded, batch["positions"])}
    return loss, metrics


def _all_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def behaviour_logprobs(behaviour, batch, *, model_config, transform, mesh=None):
    """The learner's log-probs of every token under the parameters of the version that sampled it.

    ``behaviour = (params_tuple, versions)``: K kept parameter versions and their numbers ``[K]``
    (unused slots: version -1). Each slot is scored only when some token of the batch carries its
    version (``batch["behaviour_version"]`` ``[B, T]``). Returns ``(logp [B, T], covered)``, the
    share of loss tokens whose version was kept (the caller makes sure it is 1).
    """
    kept, versions = behaviour
    ver = batch["behaviour_version"]
    out = jnp.zeros(ver.shape, jnp.float32)
    found = jnp.zeros(ver.shape, bool)
    for k, p in enumerate(kept):
        hit = ver == versions[k]

        def score(p=p):
            return token_logprobs(
                p,
                batch["tokens"],
                batch["positions"],
                config=model_config,
                transform=transform,
                routes=batch.get("routes"),
                mesh=mesh,
            )[0].astype(jnp.float32)

        lp = jax.lax.cond(jnp.any(hit), score, lambda: jnp.zeros(ver.shape, jnp.float32))
        out, found = jnp.where(hit, lp, out), found | hit
    mask = batch["loss_mask"]
    covered = jnp.sum(found * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return jax.lax.stop_gradient(out), covered


def routing_mismatch(used, recorded, positions):
    """Share of (real position, layer) whose experts the loss's forward used (``used``, from the
    very forward the gradient flows through) differ from the ones the sampler recorded: 0 with
    routing replay (``batch["routes"]``), > 0 without it (``batch["sampler_routes"]`` only) as soon
    as the two engines' router logits differ."""
    differ = jnp.any(jnp.sort(used, axis=-1) != jnp.sort(recorded, axis=-1), axis=-1)  # [B, T, layers]
    real = (positions < positions.shape[1])[..., None]
    return jnp.sum(differ * real) / jnp.maximum(jnp.sum(real) * differ.shape[-1], 1)


def _grads(params, batch, args, grad_accum):
    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
    if grad_accum == 1:
        (loss, metrics), grads = grad_fn(params, batch, *args)
        return loss, metrics, grads
    b = batch["tokens"].shape[0]
    if b % grad_accum:
        raise ValueError(f"batch size {b} is not divisible by optim.grad_accum={grad_accum}")
    micro = jax.tree.map(lambda x: x.reshape((grad_accum, b // grad_accum) + x.shape[1:]), batch)

    def body(acc, mb):
        (l, m), g = grad_fn(params, mb, *args)
        return jax.tree.map(jnp.add, acc, (l, m, g)), None

    zeros = jax.tree.map(
        jnp.zeros_like,
        jax.eval_shape(lambda: grad_fn(params, jax.tree.map(lambda x: x[0], micro), *args)),
    )
    zeros = (zeros[0][0], zeros[0][1], zeros[1])
    (loss, metrics, grads), _ = jax.lax.scan(body, zeros, micro)
    return jax.tree.map(lambda x: x / grad_accum, (loss, metrics, grads))


def _update(params, opt_state, batch, *, args, tx, grad_accum, skip_empty, demo=None):
    loss, metrics, grads = _grads(params, batch, args, grad_accum)
    metrics = dict(metrics)
    if demo is not None:  # loss.demo_coef x the demonstrations' NLL (InstructGPT's PPO-ptx term)
        model_config, loss_config, transform, mesh = args
        nll = functools.partial(demo_nll, config=model_config, transform=transform, mesh=mesh)
        d_loss, d_grads = jax.value_and_grad(nll)(params, demo)
        coef = loss_config.demo_coef
        grads = jax.tree.map(lambda g, d: g + coef * d.astype(g.dtype), grads, d_grads)
        loss = loss + coef * d_loss
        metrics["loss/demo_nll"] = d_loss
    finite = jnp.isfinite(loss) & _all_finite(grads)
    norm = optax.tree.norm(grads)
    empty = (norm == 0) if skip_empty else jnp.zeros((), bool)
    apply = finite & ~empty
    updates, new_opt = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    pick = lambda new, old: jax.tree.map(lambda n, o: jnp.where(apply, n, o), new, old)
    metrics["grad_norm"] = norm
    metrics["skipped_nonfinite"] = 1.0 - finite.astype(jnp.float32)
    metrics["skipped_empty"] = (finite & empty).astype(jnp.float32)
    return pick(new_params, params), pick(new_opt, opt_state), apply, metrics


def _train_step(
    state: TrainState,
    batch,
    ref_params=None,
    behaviour=None,
    demo=None,
    *,
    model_config,
    loss_config,
    tx,
    transform,
    grad_accum,
    minibatches=1,
    skip_empty=True,
    mesh=None,
):
    if ref_params is not None and loss_config.kl_coef:
        ref_logp, _ = token_logprobs(
            ref_params,
            batch["tokens"],
            batch["positions"],
            config=model_config,
            transform=transform,
            routes=batch.get("routes"),
            mesh=mesh,
        )
        batch = {**batch, "ref_logp": jax.lax.stop_gradient(ref_logp)}
    extra = {}
    if "train_v" in loss_config.needs:
        if behaviour is None:
            raise ValueError(
                f"loss {loss_config.name!r} with filter={loss_config.filter!r}, "
                f"filter_ratio={loss_config.filter_ratio!r}, tis_cap={loss_config.tis_cap} "
                "needs the behaviour versions' parameters: call train_step(state, batch, "
                "ref_params, behaviour=(params_tuple, versions))"
            )
        train_v, covered = behaviour_logprobs(
            behaviour, batch, model_config=model_config, transform=transform, mesh=mesh
        )
        batch = {**batch, "train_at_behavior_logp": train_v}
        extra["behaviour/covered"] = covered
    if minibatches > 1:  # the proximal policy: the parameters when this step starts
        prox, _ = token_logprobs(
            state.params,
            batch["tokens"],
            batch["positions"],
            config=model_config,
            transform=transform,
            routes=batch.get("routes"),
            mesh=mesh,
        )
        batch = {**batch, "prox_logp": jax.lax.stop_gradient(prox.astype(jnp.float32))}
    upd = functools.partial(
        _update,
        args=(model_config, loss_config, transform, mesh),
        tx=tx,
        grad_accum=grad_accum,
        skip_empty=skip_empty,
        demo=demo if loss_config.demo_coef else None,
    )
    if minibatches == 1:
        params, opt_state, finite, metrics = upd(state.params, state.opt_state, batch)
        steps = finite.astype(jnp.int32)
    else:
        b = batch["tokens"].shape[0]
        if b % minibatches:
            raise ValueError(f"batch size {b} is not divisible by optim.minibatches={minibatches}")
        mbs = jax.tree.map(lambda x: x.reshape((minibatches, b // minibatches) + x.shape[1:]), batch)

        def body(carry, mb):
            p, o = carry
            p, o, fin, m = upd(p, o, mb)
            return (p, o), (fin, m)

        (params, opt_state), (fins, ms) = jax.lax.scan(body, (state.params, state.opt_state), mbs)
        metrics = jax.tree.map(lambda x: jnp.mean(x, axis=0), ms)
        steps = jnp.sum(fins.astype(jnp.int32))
    metrics = {**metrics, **extra}
    if getattr(tx, "learning_rate", None) is not None:  # an Optimizer: its rate at this step's first update
        metrics["optim/learning_rate"] = jnp.asarray(tx.learning_rate(state.step), jnp.float32)
    new_state = TrainState(step=state.step + steps, params=params, opt_state=opt_state, rng=state.rng)
    return new_state, metrics


def make_train_step(
    model_config: ModelConfig,
    loss_config: LossConfig,
    tx: optax.GradientTransformation,
    *,
    transform=None,
    grad_accum: int = 1,
    minibatches: int = 1,
    empty_batches: str = "skip",
    donate: bool = False,
    mesh=None,
):
    """A jitted ``(state, batch, ref_params=None, behaviour=None, demo=None) -> (state, metrics)``.

    ``demo``: demonstration rows (``tokens``, ``positions``, ``loss_mask``); with
    ``loss_config.demo_coef`` > 0 every update adds ``demo_coef`` x their mean NLL to the loss
    (reported as ``loss/demo_nll``); with ``minibatches > 1`` each minibatch update adds it, on
    the same rows.

    ``behaviour = (params_tuple, versions)``: the kept parameters of the behaviour versions, for
    objectives that need the learner's log-probs at the version that sampled each token
    (``loss_config.needs``). ``minibatches > 1`` splits the batch into that many sequential
    optimiser updates (the proximal policy of decoupled PPO is the parameters at the start).
    ``empty_batches="skip"`` (:class:`OptimConfig`): an update whose gradient is exactly zero
    leaves params, optimizer state and step as they are and reports ``skipped_empty = 1``.
    ``mesh``: the mesh the step runs on, needed when ``model_config.activation_rows`` is set
    (every forward splits its hidden rows over those axes; see ``policy.model.forward``).
    ``donate=True`` donates the old state's buffers. Leave it off when anything else holds the
    old parameters: colocated sampling shares the very same arrays, and asynchronous rollouts of
    an older version may still run after the step.
    """
    fn = functools.partial(
        _train_step,
        model_config=model_config,
        loss_config=loss_config,
        tx=tx,
        transform=transform,
        grad_accum=grad_accum,
        minibatches=minibatches,
        skip_empty=empty_batches == "skip",
        mesh=mesh,
    )
    return jax.jit(fn, donate_argnums=0 if donate else ())
