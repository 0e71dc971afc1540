"""Ahead-of-time compilation and memory fit on TPU topologies, from any host (no TPU needed).

With ``libtpu`` installed, :func:`topology_devices` gives the abstract devices of a TPU slice
(``jax.experimental.topologies``); a step jitted with shardings on a mesh of them lowers from
``jax.ShapeDtypeStruct`` inputs and compiles with the real TPU compiler. ``memory_analysis()`` of
the compiled program gives per-chip bytes, ``as_text()`` its collectives and (loop-aware, see
:mod:`agentjax.sharding.roofline`) its FLOPs and HBM bytes. MaxText does the same in
``train_compile.py``. The programs compiled are the real ones (:mod:`agentjax.podcheck.programs`):
``make_train_step`` with :data:`POD_LOSS` and the sampler's prefill (``extend``) and decode
(``generate``). :func:`pod_config` sets up the model as it should run on a pod (per-layer remat,
activation rows split like the batch).

Topologies and meshes live in :mod:`agentjax.sharding.topology`, compiling one step and reading
the compiled program in :mod:`agentjax.sharding.aot_report`; both are re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import optax
from jax.sharding import Mesh

from agentjax.learner.objective import LossConfig
from agentjax.learner.step import OptimConfig, make_optimizer
from agentjax.podcheck import programs
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import abstract_params, logical_axes
from agentjax.sampling.sampler import Span
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
from agentjax.sharding.rules import ShardingRules, param_shardings
from agentjax.sharding.topology import (  # noqa: F401  (re-exported)
    HBM_BYTES,
    LIBTPU_HINT,
    PARTIAL_SLICE_KINDS,
    GiB,
    TopologyUnavailable,
    chip_hbm_bytes,
    disaggregated_devices,
    half_topology,
    offline_compile_setup,
    resolve_mesh_shape,
    split_devices,
    topology_devices,
    topology_mesh,
)

# The learner program compiled for pods: the default objective (GRPO) and consistency filter
# (IcePop) with the KL penalty on, so the reference policy's parameters are resident and scored.
POD_LOSS = LossConfig(kl_coef=1e-3, filter_ratio="total")  # IcePop on the total ratio, as the default run


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


def compile_train(
    config: ModelConfig,
    mesh: Mesh,
    rules: ShardingRules,
    work: Workload,
    *,
    optimizer: optax.GradientTransformation | None = None,
    loss: LossConfig = POD_LOSS,
):
    """Compiles the learner's real step (``make_train_step``; see :mod:`.programs`).

    Returns ``(report, param_shardings, resident_bytes)``: what stays on each chip between
    learner steps besides the parameters (optimizer state, and the reference parameters when
    ``loss.kl_coef > 0``).
    """
    optimizer = optimizer or make_optimizer(OptimConfig())
    config = config.replace(max_seq_len=work.train_seq)
    params = abstract_params(config)
    p_sh = param_shardings(params, mesh, rules, logical_axes(config))
    kl = loss.kl_coef > 0
    args, in_sh, out_sh = programs.train_inputs(
        config, mesh, rules, p_sh, rows=work.train_batch, seq=work.train_seq, optimizer=optimizer, kl=kl
    )
    step = programs.train_program(config, loss, optimizer, work.microbatches, mesh)
    report = compile_step("train", step, args, in_sh, out_sh, donate=(0,))
    return report, p_sh, learner_resident_bytes(params, p_sh, mesh, optimizer, loss)


def learner_resident_bytes(params, param_sh, mesh: Mesh, optimizer=None, loss: LossConfig = POD_LOSS) -> int:
    """Per-chip bytes the learner keeps besides the parameters: the optimizer state, and the
    reference parameters when ``loss.kl_coef > 0`` (no compile needed)."""
    opt = jax.eval_shape((optimizer or make_optimizer(OptimConfig())).init, params)
    resident = shard_bytes(opt, tree_shardings_like(opt, params, param_sh, mesh))
    return resident + (shard_bytes(params, param_sh) if loss.kl_coef > 0 else 0)


def compile_sampler(
    config: ModelConfig,
    mesh: Mesh,
    rules: ShardingRules,
    work: Workload,
    *,
    param_sh=None,
    resident_bytes: int = 0,
) -> tuple[StepReport, StepReport]:
    """Compiles the sampler's real prefill (``prompt_len`` tokens into an empty state) and
    decode (its ``while_loop``) with ``cache_len`` slots per row."""
    config = config.replace(max_seq_len=work.cache_len)
    params = abstract_params(config)
    p_sh = param_sh or param_shardings(params, mesh, rules, logical_axes(config))
    _, prefill, decode = programs.sampler_programs(config, mesh)
    pre, dec, state_sh, row_sh = programs.sampler_inputs(
        config, mesh, rules, batch=work.sample_batch, prompt_len=work.prompt_len
    )
    out = []
    for name, fn, (args, sh), out_sh in (
        ("prefill", prefill, pre, state_sh),
        ("decode", decode, dec, (state_sh, Span(row_sh, row_sh))),
    ):
        out.append(
            compile_step(
                name, fn, (params, *args), (p_sh, *sh), out_sh, donate=(1,), resident_bytes=resident_bytes
            )
        )
    return out[0], out[1]


def check_placement(
    config: ModelConfig,
    devices: Sequence,
    placement: str,
    work: Workload,
    *,
    learner_mesh: Mapping[str, int],
    sampler_mesh: Mapping[str, int] | None = None,
    rules: ShardingRules | None = None,
    sampler_rules: ShardingRules | None = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: LossConfig = POD_LOSS,
    sampler_devices: Sequence | None = None,
) -> PlacementReport:
    """Compiles the learner and sampler steps for ``placement``; one mesh axis may be ``-1``.

    ``colocated``: both on all ``devices`` with the learner's mesh and the very same parameter
    shardings; while sampling, the optimizer state (and a KL reference) stays resident.
    ``disaggregated``: learner on ``devices`` and sampler on ``sampler_devices`` (default: the
    two halves of ``devices``; see :func:`disaggregated_devices`), with ``sampler_mesh`` and
    ``sampler_rules``; the weight sync is a reshard between the two.
    """
    rules = rules or ShardingRules()
    if placement == "colocated":
        mesh = topology_mesh(devices, learner_mesh)
        train, p_sh, resident = compile_train(config, mesh, rules, work, optimizer=optimizer, loss=loss)
        pre, dec = compile_sampler(config, mesh, rules, work, param_sh=p_sh, resident_bytes=resident)
        shapes = {"learner": dict(mesh.shape), "sampler": dict(mesh.shape)}
        return PlacementReport(placement, shapes, (train, pre, dec))
    if placement != "disaggregated":
        raise ValueError(f"placement={placement!r}; allowed: 'colocated', 'disaggregated'")
    l_dev, s_dev = (devices, sampler_devices) if sampler_devices else split_devices(devices)
    l_mesh = topology_mesh(l_dev, learner_mesh)
    s_mesh = topology_mesh(s_dev, sampler_mesh or learner_mesh)
    s_rules = sampler_rules or rules
    train, l_sh, _ = compile_train(config, l_mesh, rules, work, optimizer=optimizer, loss=loss)
    params = abstract_params(config)
    s_sh = param_shardings(params, s_mesh, s_rules, logical_axes(config))
    pre, dec = compile_sampler(config, s_mesh, s_rules, work, param_sh=s_sh)
    shapes = {"learner": dict(l_mesh.shape), "sampler": dict(s_mesh.shape)}
    return PlacementReport(placement, shapes, (train, pre, dec), weight_sync_bytes(params, l_sh, s_sh))


def batch_axes(rules: ShardingRules) -> tuple[str, ...]:
    """The mesh axes of the ``batch`` activation rule (``("data", "fsdp")`` by default)."""
    axes = rules.mapping.get("batch")
    return (axes,) if isinstance(axes, str) else tuple(axes or ())


# Tokens per row the learner's scorer projects onto the vocabulary at once on a pod
# (ModelConfig.score_chunk): Qwen3's float32 logits of one 32k sequence are 18.5 GiB, and the
# gradient holds them and their cotangent; a 2048-token chunk holds 1.2 GiB. Rows of at most
# 2048 + 1 tokens are scored whole (the default compile_check's shapes are unchanged).
POD_SCORE_CHUNK = 2048


def pod_config(
    config: ModelConfig,
    rules: ShardingRules | None = None,
    *,
    remat: str = "layer",
    score_chunk: int = POD_SCORE_CHUNK,
) -> ModelConfig:
    """``config`` as it should run on a pod: per-layer remat, the hidden rows ``[N, D]`` of
    every layer constrained to the ``batch`` rule of ``rules`` (``ModelConfig.activation_rows``)
    and the learner's log-probs taken ``score_chunk`` tokens at a time (fast and exact alike).

    Without the row constraint FSDP training replicates the activations on every chip; without
    remat the backward pass keeps every layer's intermediates (docs/pod_readiness.md); without
    the chunks a long sequence's logits do (docs/pod_fit.md, Qwen3-8B at 32k tokens).
    """
    rows = batch_axes(rules or ShardingRules())
    return with_remat(config, remat).replace(activation_rows=rows, score_chunk=score_chunk)


def with_remat(config: ModelConfig, remat: str) -> ModelConfig:
    """``config`` with its ``remat`` field set (``""`` leaves it); an error if the model has none."""
    if not remat:
        return config
    if "remat" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(
            f"remat={remat!r} asked for, but ModelConfig has no 'remat' field: "
            "per-layer rematerialisation is not available in this model"
        )
    return config.replace(remat=remat)
