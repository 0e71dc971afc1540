"""The real learner and sampler programs as ahead-of-time compile targets, with their inputs.

* ``train``: :func:`agentjax.learner.step.make_train_step` (score, the configured objective and
  consistency filter, the KL penalty to a resident reference policy when ``kl_coef > 0``,
  gradient accumulation over ``microbatches``, global-norm clipping, AdamW, the NaN/Inf guard)
  on a batch laid out as :func:`agentjax.learner.batching.make_batch` makes it.
* ``prefill``: the sampler's ``extend`` (a ``prompt_len`` prompt appended to an empty state;
  it projects nothing onto the vocabulary, see ``forward(logits_at=...)``).
* ``decode``: the sampler's ``generate`` (its ``while_loop`` of one-token decode steps with
  sampling and the per-token records), with a ``cache_len`` buffer.

:data:`MODES` are the kernel choices a row of the fit table compiles: ``fast`` (the preset:
bf16 body, float32 head), ``exact_bf16`` and ``exact_f32`` (batch-invariant kernels,
``exact_tile=8``; docs/consistency.md), ``exact_pallas_bf16`` and ``exact_pallas_f32`` (the
same with ``exact_kernels="pallas"``, the kernels Mosaic compiles for TPU). In exact mode the
model attends over exactly ``max_seq_len`` slots, so ``max_seq_len`` is set to the train
sequence (learner) or the cache length (sampler).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding

from agentjax.learner.objective import LossConfig
from agentjax.learner.step import TrainState, make_train_step
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import abstract_params
from agentjax.sampling.sampler import Sampler, SamplerState, _extend, _generate
from agentjax.sharding.aot_report import replicated, tree_shardings_like
from agentjax.sharding.rules import ShardingRules, activation_sharding

EXACT_TILE = 8  # the default run's tile (configs/default.py)
MODES: dict[str, dict] = {
    "fast": {},
    "exact_bf16": {"exact_tile": EXACT_TILE},
    "exact_f32": {
        "exact_tile": EXACT_TILE,
        "param_dtype": "float32",
        "compute_dtype": "float32",
        "head_dtype": "float32",
    },
    # the Pallas kernels (Mosaic; compile_check traces them with interpret=False)
    "exact_pallas_bf16": {"exact_tile": EXACT_TILE, "exact_kernels": "pallas"},
    "exact_pallas_f32": {
        "exact_tile": EXACT_TILE,
        "exact_kernels": "pallas",
        "param_dtype": "float32",
        "compute_dtype": "float32",
        "head_dtype": "float32",
    },
}


def mode_config(config: ModelConfig, mode: str) -> ModelConfig:
    """``config`` with the kernels and dtypes of ``mode`` (see :data:`MODES`)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is invalid; allowed values: {list(MODES)}")
    return config.replace(**MODES[mode])


def _rows(mesh: Mesh, rules: ShardingRules, shape) -> NamedSharding:
    """Split along the batch rule on the first axis, whole on the others."""
    names = ("batch",) + (None,) * (len(shape) - 1)
    return NamedSharding(mesh, rules.spec(names, mesh=mesh, shape=shape, what="rows"))


def train_inputs(
    config: ModelConfig,
    mesh: Mesh,
    rules: ShardingRules,
    param_sh,
    *,
    rows: int,
    seq: int,
    optimizer: optax.GradientTransformation,
    kl: bool,
):
    """Abstract ``(state, batch[, ref_params])`` of the train step and their shardings."""
    params = abstract_params(config)
    opt = jax.eval_shape(optimizer.init, params)
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    state = TrainState(scalar, params, opt, jax.ShapeDtypeStruct((2,), jnp.uint32))
    rep = replicated(mesh)
    state_sh = TrainState(rep, param_sh, tree_shardings_like(opt, params, param_sh, mesh), rep)
    i, f = jnp.int32, jnp.float32
    kinds = {
        "tokens": (i, 2),
        "positions": (i, 2),
        "loss_mask": (f, 2),
        "behav_logp": (f, 2),
        "step_reward": (f, 2),
        "advantages": (f, 1),
        "weight": (f, 1),
        "bootstrap": (f, 1),
        "lengths": (i, 1),
    }
    batch = {k: jax.ShapeDtypeStruct((rows, seq)[:nd], dt) for k, (dt, nd) in kinds.items()}
    if config.is_moe:  # the sampler's routes are replayed (Rollout Routing Replay)
        batch["routes"] = jax.ShapeDtypeStruct((rows, seq, config.n_layers, config.n_experts_per_token), i)
    batch_sh = {
        k: activation_sharding("tokens", mesh, rules, v.shape) if v.ndim == 2 else _rows(mesh, rules, v.shape)
        for k, v in batch.items()
    }
    args, shardings = [state, batch], [state_sh, batch_sh]
    if kl:
        args.append(params)
        shardings.append(param_sh)
    return tuple(args), tuple(shardings), (state_sh, None)


def train_program(config: ModelConfig, loss: LossConfig, optimizer, microbatches: int, mesh: Mesh):
    """The learner's real step on ``mesh``: ``(state, batch[, ref_params]) -> (state, metrics)``."""
    return make_train_step(config, loss, optimizer, grad_accum=microbatches, mesh=mesh)


def sampler_programs(config: ModelConfig, mesh: Mesh | None = None):
    """The sampler's real ``prefill(params, state, tokens, lengths, version) -> state`` and
    ``decode(params, state, keys [B, 2] uint32, budget [B], version) -> (state, span)`` on
    ``mesh`` (the activation-row constraint's mesh)."""
    s = Sampler(config, stop_tokens=(0,), mesh=mesh)

    # The Pallas kernels partition on the sampler's mesh (exact_kernels="pallas"): the sampler
    # enters it (its log-prob kernels run outside forward), so these are its own calls.
    def prefill(params, state, tokens, lengths, version):
        return _extend(s, params, state, tokens, lengths, version)

    def decode(params, state, keys, budget, version):
        return _generate(s, params, state, jax.random.wrap_key_data(keys), budget, version)

    return s, prefill, decode


def sampler_inputs(config: ModelConfig, mesh: Mesh, rules: ShardingRules, *, batch: int, prompt_len: int):
    """Abstract inputs and shardings of prefill and decode (``config.max_seq_len`` slots)."""
    s = Sampler(config)
    state = jax.eval_shape(lambda: s.init(batch))
    cache_sh = {k: activation_sharding("cache", mesh, rules, v.shape) for k, v in state.cache.items()}
    row = lambda x: None if x is None else _rows(mesh, rules, x.shape)
    state_sh = SamplerState(cache_sh, *(row(x) for x in state[1:]))
    i = jnp.int32
    one = _rows(mesh, rules, (batch,))
    tokens = jax.ShapeDtypeStruct((batch, prompt_len), i)
    vec = jax.ShapeDtypeStruct((batch,), i)
    version = jax.ShapeDtypeStruct((), i)
    keys = jax.ShapeDtypeStruct((batch, 2), jnp.uint32)
    rep = replicated(mesh)
    pre = ((state, tokens, vec, version), (state_sh, _rows(mesh, rules, tokens.shape), one, rep))
    dec = ((state, keys, vec, version), (state_sh, _rows(mesh, rules, keys.shape), one, rep))
    return pre, dec, state_sh, one
