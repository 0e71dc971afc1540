"""Ahead-of-time compilation and memory fit on TPU topologies, from any host (no TPU needed).

With ``libtpu`` installed, :func:`topology_devices` gives the abstract devices of a TPU slice
(``jax.experimental.topologies``); a step jitted with shardings on a mesh of them lowers from
``jax.ShapeDtypeStruct`` inputs and compiles with the real TPU compiler. ``memory_analysis()`` of
the compiled program gives per-chip bytes, ``as_text()`` its collectives. MaxText does the same in
``train_compile.py``. Step functions are arguments; :func:`standin_train_step` (forward, PPO
loss, backward, AdamW) and :func:`standin_sample_step` (prefill or one decode step with the KV
cache) show the signatures the real learner and sampler steps plug in with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentjax.objectives import ppo_loss
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import abstract_params, forward, logical_axes
from agentjax.sharding.mesh import MESH_AXES, make_mesh
from agentjax.sharding.rules import ShardingRules, activation_sharding, param_shardings

GiB = 1 << 30
# HBM per chip, by ``device.device_kind`` (Google Cloud TPU documentation).
HBM_BYTES: dict[str, int] = {
    "TPU v4": 32 * GiB,
    "TPU v5 lite": 16 * GiB,  # v5e
    "TPU v5": 95 * GiB,  # v5p
    "TPU v6 lite": 32 * GiB,  # v6e (Trillium)
}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
LIBTPU_HINT = (
    "AOT compilation for TPU needs libtpu matched to jax: pip install 'agentjax[tpu]' "
    f"(libtpu==0.0.42.* for jax 0.10.2; installed jax is {jax.__version__})"
)


class TopologyUnavailable(RuntimeError):
    """The TPU topology cannot be built here (usually: libtpu is missing or mismatched)."""


def topology_devices(name: str) -> list:
    """The abstract devices (one per chip) of TPU topology ``name``, e.g. ``"v5e:16x16"``."""
    # libtpu takes /tmp/libtpu_lockfile for the process's lifetime; abstract topologies do not
    # need the TPU, so let other processes' libtpu coexist with ours.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        from jax.experimental import topologies

        desc = topologies.get_topology_desc(topology_name=name, platform="tpu")
    except Exception as e:  # libtpu missing, mismatched, or an unknown topology name
        raise TopologyUnavailable(
            f"cannot build TPU topology {name!r}: {type(e).__name__}: {e}\n{LIBTPU_HINT}"
        ) from e
    return list(desc.devices)


def chip_hbm_bytes(device) -> int:
    """HBM bytes of one chip of ``device``'s kind (from :data:`HBM_BYTES`)."""
    kind = device.device_kind
    if kind not in HBM_BYTES:
        raise KeyError(f"no HBM size for device kind {kind!r}; known: {sorted(HBM_BYTES)}")
    return HBM_BYTES[kind]


def resolve_mesh_shape(shape: Mapping[str, int], n_devices: int) -> dict[str, int]:
    """Mesh axis sizes with one ``-1`` entry filled so the product is ``n_devices``."""
    sizes = {a: int(shape.get(a, 1)) for a in MESH_AXES}
    free = [a for a, s in sizes.items() if s == -1]
    if len(free) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got {free}")
    rest = math.prod(s for s in sizes.values() if s != -1)
    if free:
        if n_devices % rest:
            raise ValueError(f"mesh {sizes}: {n_devices} devices are not divisible by {rest}")
        sizes[free[0]] = n_devices // rest
    if math.prod(sizes.values()) != n_devices:
        raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices, "
                         f"have {n_devices}")
    return sizes


def split_devices(devices: Sequence, n_sampler: int | None = None) -> tuple[list, list]:
    """Disjoint ``(learner, sampler)`` slices: the first and last devices (halves by default)."""
    n_sampler = len(devices) // 2 if n_sampler is None else n_sampler
    if not 0 < n_sampler < len(devices):
        raise ValueError(f"n_sampler={n_sampler} must be in 1..{len(devices) - 1}")
    return list(devices[: len(devices) - n_sampler]), list(devices[len(devices) - n_sampler :])


# Kinds whose compiler accepts a program on part of a slice. v5e (and, we assume, v6e) reject it
# ("On platforms with limited ICI routing device assignment should include all slice devices"):
# there, disaggregated learner and sampler are two slices, each compiled as its own topology.
PARTIAL_SLICE_KINDS = ("TPU v4", "TPU v5")


def half_topology(name: str) -> str:
    """The topology with half the chips: the largest dimension halved (v5e:16x16 -> v5e:8x16)."""
    kind, dims = name.split(":")
    d = [int(x) for x in dims.split("x")]
    i = d.index(max(d))
    if d[i] % 2:
        raise ValueError(f"topology {name!r} cannot be halved")
    d[i] //= 2
    return f"{kind}:{'x'.join(map(str, d))}"


def disaggregated_devices(topology: str) -> tuple[list, list, str]:
    """``(learner, sampler, where)`` devices: halves of one slice where the chip kind allows it
    (:data:`PARTIAL_SLICE_KINDS`), else two slices of :func:`half_topology` (over DCN)."""
    devices = topology_devices(topology)
    if devices[0].device_kind not in PARTIAL_SLICE_KINDS:
        try:  # a slice within one host (v5e:2x2) has no half-shaped slice; its halves compile
            half = half_topology(topology)
            halves = topology_devices(half)
            return halves, halves, f"two {half} slices"
        except (ValueError, TopologyUnavailable):
            pass
    learner, sampler = split_devices(devices)
    return learner, sampler, f"halves of one {topology} slice"


def topology_mesh(devices: Sequence, shape: Mapping[str, int]) -> Mesh:
    """A :func:`make_mesh` mesh over ``devices``; one axis may be ``-1`` (the rest)."""
    return make_mesh(resolve_mesh_shape(shape, len(devices)), devices)


def count_collectives(hlo_text: str) -> dict[str, int]:
    """Collective instructions in compiled HLO, by kind (async ``-start`` counts, ``-done`` not).

    Counts are static: a collective inside the scanned layer loop counts once.
    """
    ops = re.findall(r"\b(" + "|".join(COLLECTIVES) + r")(?:-start)?\(", hlo_text)
    found = Counter(ops)
    return {k: found.get(k, 0) for k in COLLECTIVES}


_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
                "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}


def largest_hlo_values(hlo_text: str, n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` largest per-chip values in compiled HLO: ``("name = type[shape] op", bytes)``."""
    out = {}
    pat = r"%?([\w.\-]+) = (\w+)\[([\d,]*)\]\S* ([\w\-]+)\("
    for name, dt, dims, op in re.findall(pat, hlo_text):
        if dt in _DTYPE_BYTES and op not in ("parameter", "bitcast", "get-tuple-element"):
            size = _DTYPE_BYTES[dt] * math.prod(int(d) for d in dims.split(",") if d)
            out[f"{name} = {dt}[{dims}] {op}"] = size
    return sorted(out.items(), key=lambda kv: -kv[1])[:n]


def shard_bytes(tree, shardings) -> int:
    """Per-chip bytes of ``tree`` (ShapeDtypeStructs) under ``shardings`` (uniform shards)."""
    leaves, sh = jax.tree.leaves(tree), jax.tree.leaves(shardings)
    return sum(math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize for x, s in zip(leaves, sh,
                                                                                     strict=True))


def largest_leaves(tree, shardings, n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` largest leaves of ``tree`` by per-chip bytes: ``(path, bytes)``."""
    flat = jax.tree.flatten_with_path(tree)[0]
    sh = jax.tree.leaves(shardings)
    sizes = [(jax.tree_util.keystr(p), math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize)
             for (p, x), s in zip(flat, sh, strict=True)]
    return sorted(sizes, key=lambda kv: -kv[1])[:n]


@dataclasses.dataclass(frozen=True)
class StepReport:
    """Per-chip memory of one compiled step (bytes), its collectives and its fit verdict.

    ``resident_bytes`` is memory held on the chip by something else while this step runs (in
    colocated placement: the optimizer state during sampling). ``error`` is the compiler's message
    when it refused the program (e.g. TPU ``RESOURCE_EXHAUSTED``, which names the largest buffers).
    """

    name: str
    n_chips: int
    hbm_bytes: int
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    code_bytes: int = 0
    resident_bytes: int = 0
    collectives: Mapping[str, int] = dataclasses.field(default_factory=dict)
    largest: tuple[tuple[str, int], ...] = ()
    error: str | None = None
    compile_seconds: float = 0.0

    @property
    def peak_bytes(self) -> int:
        """Arguments + outputs not aliased to donated arguments + temporaries + code + resident."""
        return (self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes
                + self.code_bytes + self.resident_bytes)

    @property
    def headroom_bytes(self) -> int:
        return self.hbm_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        return self.error is None and self.peak_bytes <= self.hbm_bytes

    def verdict(self) -> str:
        """One line: fits with headroom, or why not and the largest buffers."""
        if self.fits:
            return f"{self.name}: fits, headroom {self.headroom_bytes / GiB:.2f} GiB per chip"
        big = "; ".join(f"{k} ({v / GiB:.2f} GiB)" for k, v in self.largest)
        why = self.error or (f"needs {self.peak_bytes / GiB:.2f} GiB per chip of "
                             f"{self.hbm_bytes / GiB:.0f} GiB")
        return f"{self.name}: DOES NOT FIT: {why}\n  largest buffers: {big}"


def compile_step(name: str, fn: Callable, args: Sequence, in_shardings: Sequence, out_shardings,
                 *, donate: Sequence[int] = (), resident_bytes: int = 0) -> StepReport:
    """Lowers ``fn`` on ``args`` (ShapeDtypeStructs) with shardings, compiles, and reports."""
    mesh = jax.tree.leaves(in_shardings)[0].mesh
    devices = list(mesh.devices.flat)
    hbm = chip_hbm_bytes(devices[0])
    largest = tuple(largest_leaves(list(args), list(in_shardings), 3))
    jitted = jax.jit(fn, in_shardings=tuple(in_shardings), out_shardings=out_shardings,
                     donate_argnums=tuple(donate))
    start = time.perf_counter()
    # Executables for abstract devices cannot be loaded back: keep them out of the disk cache.
    cache_was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        with jax.set_mesh(mesh):  # raw PartitionSpec constraints in the step resolve on it
            lowered = jitted.lower(*args)
            compiled = lowered.compile()
    except Exception as e:  # the TPU compiler rejects programs that exceed HBM
        msg = str(e)
        if "RESOURCE_EXHAUSTED" not in msg and "Ran out of memory" not in msg:
            raise
        # Its message names no buffer: add the largest values of the program before partitioning.
        unsplit = largest_hlo_values(lowered.as_text(dialect="hlo"), 3)
        largest += tuple((f"{k} (whole, before partitioning)", v) for k, v in unsplit)
        return StepReport(name, len(devices), hbm, resident_bytes=resident_bytes,
                          largest=largest, error=_oom_summary(msg),
                          compile_seconds=time.perf_counter() - start)
    finally:
        jax.config.update("jax_enable_compilation_cache", cache_was)
    ma = compiled.memory_analysis()
    text = compiled.as_text()
    return StepReport(
        name, len(devices), hbm,
        argument_bytes=ma.argument_size_in_bytes, output_bytes=ma.output_size_in_bytes,
        alias_bytes=ma.alias_size_in_bytes, temp_bytes=ma.temp_size_in_bytes,
        code_bytes=ma.generated_code_size_in_bytes, resident_bytes=resident_bytes,
        collectives=count_collectives(text), largest=largest + tuple(largest_hlo_values(text, 3)),
        compile_seconds=time.perf_counter() - start,
    )


def _oom_summary(msg: str, max_lines: int = 12) -> str:
    """The useful lines of a TPU out-of-memory compile error (usage and largest allocations)."""
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    keep = [ln for ln in lines if re.search(r"memory|Size:|Shape:|Operator|hbm|Allocation", ln)]
    return " | ".join((keep or lines)[:max_lines])[:2000]


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def tree_shardings_like(tree, params, param_sh, mesh: Mesh):
    """Shardings for ``tree`` (e.g. an optimizer state): subtrees shaped like ``params`` get the
    parameter shardings, every other leaf is replicated."""
    ptree = jax.tree.structure(params)
    return jax.tree.map(
        lambda sub: param_sh if jax.tree.structure(sub) == ptree else replicated(mesh),
        tree, is_leaf=lambda sub: jax.tree.structure(sub) == ptree,
    )


def weight_sync_bytes(params, learner_sh, sampler_sh) -> dict[str, int]:
    """Bytes a weight sync moves from the learner slice to a disjoint sampler slice.

    Every byte a sampler chip holds comes over the inter-slice link: ``received_per_chip`` is a
    sampler chip's parameter shard, ``total`` is that times the sampler chips (replicas included),
    ``unique`` the parameter bytes once, ``sent_per_learner_chip`` ``total`` spread evenly.
    """
    n_s = len(jax.tree.leaves(sampler_sh)[0].mesh.devices.flat)
    n_l = len(jax.tree.leaves(learner_sh)[0].mesh.devices.flat)
    per_chip = shard_bytes(params, sampler_sh)
    unique = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(params))
    return {"unique": unique, "received_per_chip": per_chip, "total": per_chip * n_s,
            "sent_per_learner_chip": -(-per_chip * n_s // n_l)}


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


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """Compiled steps of one placement, their meshes, and the weight-sync traffic."""

    placement: str
    meshes: Mapping[str, Mapping[str, int]]
    steps: tuple[StepReport, ...]
    weight_sync: Mapping[str, int] | None = None

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.steps)


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
    shape = (config.n_layers, b, work.cache_len, config.n_kv_heads, config.head_dim)
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


_SHORT = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "all-to-all": "A2A",
          "collective-permute": "CP"}


def format_report(report: PlacementReport) -> str:
    """A per-chip memory table (GiB) of one placement, its verdicts and the weight sync."""
    g = lambda b: f"{b / GiB:8.2f}"
    mesh = lambda m: "x".join(f"{a}{s}" for a, s in m.items() if s > 1) or "1"
    head = (f"{'step':8} {'chips':>5} {'args':>8} {'out':>8} {'alias':>8} {'temp':>8} "
            f"{'code':>8} {'resid':>8} {'peak':>8} {'HBM':>8} {'free':>8}  collectives")
    lines = [f"== {report.placement}: learner mesh {mesh(report.meshes['learner'])}, "
             f"sampler mesh {mesh(report.meshes['sampler'])} (GiB per chip)", head]
    for s in report.steps:
        coll = " ".join(f"{_SHORT[k]}={v}" for k, v in s.collectives.items()) or "-"
        lines.append(f"{s.name:8} {s.n_chips:5d} {g(s.argument_bytes)} {g(s.output_bytes)} "
                     f"{g(s.alias_bytes)} {g(s.temp_bytes)} {g(s.code_bytes)} "
                     f"{g(s.resident_bytes)} {g(s.peak_bytes)} {g(s.hbm_bytes)} "
                     f"{g(s.headroom_bytes)}  {coll}")
    lines += [s.verdict() for s in report.steps]
    if report.weight_sync:
        w = report.weight_sync
        lines.append(f"weight sync: {w['unique'] / GiB:.2f} GiB of parameters; each sampler chip "
                     f"receives {w['received_per_chip'] / GiB:.3f} GiB, "
                     f"{w['total'] / GiB:.2f} GiB in all; "
                     f"each learner chip sends >= {w['sent_per_learner_chip'] / GiB:.3f} GiB")
    return "\n".join(lines)


def with_remat(config: ModelConfig, remat: str) -> ModelConfig:
    """``config`` with its ``remat`` field set (``""`` leaves it); an error if the model has none."""
    if not remat:
        return config
    if "remat" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"remat={remat!r} asked for, but ModelConfig has no 'remat' field: "
                         "per-layer rematerialisation is not available in this model")
    return config.replace(remat=remat)


# --- Preview of two changes proposed for policy/model.py (remove once the model has them). ---

# The first line of the scanned layer body that unpacks its inputs, and the scan call.
_LAYER_START = re.compile(r"^        p, [^\n]*= xs\n", re.M)
_SCAN_CALL = re.compile(r"^    [^\n]*= jax\.lax\.scan\(layer,", re.M)


@contextlib.contextmanager
def proposed_model_patch(*, rows: PartitionSpec | None, remat: bool):
    """Swaps ``policy.model._trunk`` for a copy with the two proposed changes, while active.

    1. ``rows``: every layer starts with ``with_sharding_constraint(x, rows)`` on the hidden rows
       ``[N, D]`` (e.g. ``P(("data", "fsdp"), None)``, resolved on the mesh set by
       :func:`compile_step`). Without it, XLA's propagation follows the FSDP-sharded weights and
       every chip computes every token of the batch.
    2. ``remat``: ``jax.checkpoint`` around the scanned layer body (per-layer rematerialisation);
       the backward pass keeps only each layer's input.

    The numbers compiled under this context are those of the patched model, not of model.py.
    """
    from agentjax.policy import model as m

    src = inspect.getsource(m)
    start, scan = _LAYER_START.search(src), _SCAN_CALL.search(src)
    if start is None or scan is None or scan.start() < start.end():
        raise RuntimeError("policy/model.py changed: the preview patch no longer applies")
    src = (src[: start.end()]
           + "        x = x if _ROWS is None else jax.lax.with_sharding_constraint(x, _ROWS)\n"
           + src[start.end(): scan.start()]
           + "    layer = jax.checkpoint(layer, prevent_cse=False) if _REMAT else layer\n"
           + src[scan.start():])
    ns = dict(vars(m), _ROWS=rows, _REMAT=remat)
    exec(compile(src, f"{m.__file__} (aot preview patch)", "exec"), ns)
    original = m._trunk
    m._trunk = ns["_trunk"]
    try:
        yield
    finally:
        m._trunk = original
