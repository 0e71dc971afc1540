"""Ahead-of-time compilation and memory fit on TPU topologies, from any host (no TPU needed).

With ``libtpu`` installed, :func:`topology_devices` gives the abstract devices of a TPU slice
(``jax.experimental.topologies``); a step jitted with shardings on a mesh of them lowers from
``jax.ShapeDtypeStruct`` inputs and compiles with the real TPU compiler. ``memory_analysis()`` of
the compiled program gives per-chip bytes, ``as_text()`` its collectives. MaxText does the same in
``train_compile.py``. Step functions are arguments; :func:`standin_train_step` (forward, PPO
loss, backward, AdamW) and :func:`standin_sample_step` (prefill or one decode step with the KV
cache) show the signatures the real learner and sampler steps plug in with. :func:`pod_config`
sets up the model as it should run on a pod (per-layer remat, activation rows split like the
batch).

Topologies and meshes live in :mod:`agentjax.sharding.topology`, compiling one step and reading
the compiled program in :mod:`agentjax.sharding.aot_report`; both are re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding

from agentjax.objectives import ppo_loss
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import abstract_params, forward, logical_axes
from agentjax.sharding.aot_report import (  # noqa: F401  (re-exported)
    COLLECTIVES,
    PlacementReport,
    StepReport,
    compile_step,
    count_collectives,
    format_report,
    largest_hlo_values,
    largest_leaves,
    replicated,
    shard_bytes,
    tree_shardings_like,
    weight_sync_bytes,
)
from agentjax.sharding.rules import ShardingRules, activation_sharding, param_shardings
from agentjax.sharding.topology import (  # noqa: F401  (re-exported)
    HBM_BYTES,
    LIBTPU_HINT,
    PARTIAL_SLICE_KINDS,
    GiB,
    TopologyUnavailable,
    chip_hbm_bytes,
    disaggregated_devices,
    half_topology,
    resolve_mesh_shape,
    split_devices,
    topology_devices,
    topology_mesh,
)

# --- Stand-in steps: the signatures the real learner and sampler steps plug in with. ---


def token_logps(logits, targets):
    """``log_softmax(logits)[targets]`` in float32 without materialising the log-softmax."""
    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def standin_train_step(config: ModelConfig, optimizer: optax.GradientTransformation, *,
                       microbatches: int = 1) -> Callable:
    """``step(params, opt_state, batch) -> (params, opt_state, metrics)``.

    Teacher-forced scoring of ``batch["tokens"]``, the PPO clipped loss (plus the Switch
    load-balancing loss for MoE), gradients accumulated over ``microbatches`` slices of the batch
    (a ``lax.scan``), and one optimizer update. ``batch`` holds ``[B, T]`` arrays ``tokens``,
    ``positions``, ``old_logp``, ``advantages`` and ``mask`` (see :func:`train_batch_spec`).
    """

    def loss_fn(params, mb):
        logits, _, aux = forward(params, mb["tokens"], mb["positions"], config=config)
        logp = token_logps(logits, jnp.roll(mb["tokens"], -1, axis=1))  # next token; mask last
        loss, _ = ppo_loss(logp, mb["old_logp"], mb["advantages"], mb["mask"])
        if config.is_moe:
            loss = loss + 1e-3 * aux["router_lb_loss"]
        return loss

    grad_fn = jax.value_and_grad(loss_fn)

    def step(params, opt_state, batch):
        if microbatches == 1:
            loss, grads = grad_fn(params, batch)
        else:  # row i of microbatch m is row i * microbatches + m: each chip keeps its rows
            mbs = jax.tree.map(
                lambda x: x.reshape(-1, microbatches, *x.shape[1:]).swapaxes(0, 1), batch)

            def accumulate(carry, mb):
                loss, grads = grad_fn(params, mb)
                return jax.tree.map(jnp.add, carry, (loss, grads)), None

            zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
            (loss, grads), _ = jax.lax.scan(accumulate, zero, mbs)
            loss, grads = jax.tree.map(lambda g: g / microbatches, (loss, grads))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, {"loss": loss}

    return step


def standin_sample_step(config: ModelConfig) -> Callable:
    """``step(params, tokens, positions, cache) -> (next_token [B], next_logp [B], cache)``.

    Writes ``tokens`` into the KV cache and picks the greedy next token: with ``[B, prompt]``
    tokens this is prefill, with ``[B, 1]`` one decode step (the same call).
    """

    def step(params, tokens, positions, cache):
        logits, cache, _ = forward(params, tokens, positions, config=config, cache=cache)
        last = logits[:, -1:].astype(jnp.float32)
        nxt = jnp.argmax(last, axis=-1).astype(jnp.int32)
        return nxt[:, 0], token_logps(last, nxt)[:, 0], cache

    return step


def train_batch_spec(batch: int, seq_len: int) -> dict[str, jax.ShapeDtypeStruct]:
    """ShapeDtypeStructs of the stand-in train step's batch."""
    i, f = jnp.int32, jnp.float32
    names = {"tokens": i, "positions": i, "old_logp": f, "advantages": f, "mask": f}
    return {k: jax.ShapeDtypeStruct((batch, seq_len), dt) for k, dt in names.items()}


# --- Placements: colocated (one mesh, shared parameters) and disaggregated (disjoint slices). ---


@dataclasses.dataclass(frozen=True)
class Workload:
    """Shapes to compile for: the learner's batch and the sampler's batch and lengths."""

    train_batch: int = 256
    train_seq: int = 4096
    microbatches: int = 1
    sample_batch: int = 256
    prompt_len: int = 1024
    cache_len: int = 4096


def compile_train(config: ModelConfig, mesh: Mesh, rules: ShardingRules, work: Workload, *,
                  optimizer: optax.GradientTransformation, train_step: Callable | None = None):
    """Compiles the train step; returns ``(report, param_shardings, optimizer_state_bytes)``."""
    step = train_step or standin_train_step(config, optimizer, microbatches=work.microbatches)
    params = abstract_params(config)
    p_sh = param_shardings(params, mesh, rules, logical_axes(config))
    opt = jax.eval_shape(optimizer.init, params)
    o_sh = tree_shardings_like(opt, params, p_sh, mesh)
    batch = train_batch_spec(work.train_batch, work.train_seq)
    b_sh = {k: activation_sharding("tokens", mesh, rules, v.shape) for k, v in batch.items()}
    report = compile_step("train", step, (params, opt, batch), (p_sh, o_sh, b_sh),
                          (p_sh, o_sh, None), donate=(0, 1))
    return report, p_sh, shard_bytes(opt, o_sh)


def compile_sampler(config: ModelConfig, mesh: Mesh, rules: ShardingRules, work: Workload, *,
                    sample_step: Callable | None = None, param_sh=None,
                    resident_bytes: int = 0) -> tuple[StepReport, StepReport]:
    """Compiles prefill (``prompt_len`` tokens) and one decode step with a ``cache_len`` cache."""
    step = sample_step or standin_sample_step(config)
    params = abstract_params(config)
    p_sh = param_sh or param_shardings(params, mesh, rules, logical_axes(config))
    b = work.sample_batch
    shape = (config.n_layers, b, config.n_kv_heads, work.cache_len + 1, config.head_dim)
    cache = {k: jax.ShapeDtypeStruct(shape, config.cdtype) for k in ("k", "v")}
    c_sh = {k: activation_sharding("cache", mesh, rules, shape) for k in cache}
    row_sh = NamedSharding(mesh, rules.spec(("batch",), mesh=mesh, shape=(b,), what="rows"))
    out = []
    for name, t in (("prefill", work.prompt_len), ("decode", 1)):
        tok = jax.ShapeDtypeStruct((b, t), jnp.int32)
        t_sh = activation_sharding("tokens", mesh, rules, tok.shape)
        out.append(compile_step(name, step, (params, tok, tok, cache), (p_sh, t_sh, t_sh, c_sh),
                                (row_sh, row_sh, c_sh), donate=(3,),
                                resident_bytes=resident_bytes))
    return out[0], out[1]


def check_placement(config: ModelConfig, devices: Sequence, placement: str, work: Workload, *,
                    learner_mesh: Mapping[str, int], sampler_mesh: Mapping[str, int] | None = None,
                    rules: ShardingRules | None = None,
                    sampler_rules: ShardingRules | None = None,
                    optimizer: optax.GradientTransformation | None = None,
                    train_step: Callable | None = None,
                    sample_step: Callable | None = None,
                    sampler_devices: Sequence | None = None) -> PlacementReport:
    """Compiles the learner and sampler steps for ``placement``; one mesh axis may be ``-1``.

    ``colocated``: both on all ``devices`` with the learner's mesh and the very same parameter
    shardings; while sampling, the optimizer state stays resident. ``disaggregated``: learner on
    ``devices`` and sampler on ``sampler_devices`` (default: the two halves of ``devices``; see
    :func:`disaggregated_devices`), with ``sampler_mesh`` and ``sampler_rules``; the weight sync
    is a reshard between the two.
    """
    rules = rules or ShardingRules()
    optimizer = optimizer or optax.adamw(1e-6, mu_dtype=jnp.float32)
    if placement == "colocated":
        mesh = topology_mesh(devices, learner_mesh)
        train, p_sh, opt_bytes = compile_train(config, mesh, rules, work, optimizer=optimizer,
                                               train_step=train_step)
        pre, dec = compile_sampler(config, mesh, rules, work, sample_step=sample_step,
                                   param_sh=p_sh, resident_bytes=opt_bytes)
        shapes = {"learner": dict(mesh.shape), "sampler": dict(mesh.shape)}
        return PlacementReport(placement, shapes, (train, pre, dec))
    if placement != "disaggregated":
        raise ValueError(f"placement={placement!r}; allowed: 'colocated', 'disaggregated'")
    l_dev, s_dev = (devices, sampler_devices) if sampler_devices else split_devices(devices)
    l_mesh = topology_mesh(l_dev, learner_mesh)
    s_mesh = topology_mesh(s_dev, sampler_mesh or learner_mesh)
    s_rules = sampler_rules or rules
    train, l_sh, _ = compile_train(config, l_mesh, rules, work, optimizer=optimizer,
                                   train_step=train_step)
    params = abstract_params(config)
    s_sh = param_shardings(params, s_mesh, s_rules, logical_axes(config))
    pre, dec = compile_sampler(config, s_mesh, s_rules, work, sample_step=sample_step,
                               param_sh=s_sh)
    shapes = {"learner": dict(l_mesh.shape), "sampler": dict(s_mesh.shape)}
    return PlacementReport(placement, shapes, (train, pre, dec),
                           weight_sync_bytes(params, l_sh, s_sh))


def batch_axes(rules: ShardingRules) -> tuple[str, ...]:
    """The mesh axes of the ``batch`` activation rule (``("data", "fsdp")`` by default)."""
    axes = rules.mapping.get("batch")
    return (axes,) if isinstance(axes, str) else tuple(axes or ())


def pod_config(config: ModelConfig, rules: ShardingRules | None = None, *,
               remat: str = "layer") -> ModelConfig:
    """``config`` as it should run on a pod: per-layer remat and the hidden rows ``[N, D]`` of
    every layer constrained to the ``batch`` rule of ``rules`` (``ModelConfig.activation_rows``).

    Without the row constraint FSDP training replicates the activations on every chip; without
    remat the backward pass keeps every layer's intermediates (docs/pod_readiness.md).
    """
    return with_remat(config, remat).replace(activation_rows=batch_axes(rules or ShardingRules()))


def with_remat(config: ModelConfig, remat: str) -> ModelConfig:
    """``config`` with its ``remat`` field set (``""`` leaves it); an error if the model has none."""
    if not remat:
        return config
    if "remat" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"remat={remat!r} asked for, but ModelConfig has no 'remat' field: "
                         "per-layer rematerialisation is not available in this model")
    return config.replace(remat=remat)
