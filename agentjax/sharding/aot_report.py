"""Reading a compiled TPU program: per-chip memory, collectives, largest buffers, verdicts.

(One module, over 300 lines: every reading of one compiled program, memory to roofline,
feeds one report row.)

:func:`compile_step` lowers and compiles one jitted step from ``jax.ShapeDtypeStruct`` inputs
and returns a :class:`StepReport` (``memory_analysis()`` per chip, collectives from
``as_text()``); :func:`format_report` prints a :class:`PlacementReport`. Part of
:mod:`agentjax.podcheck.aot` (which re-exports every name here).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentjax.sharding.roofline import CHIP_PEAKS, DTYPE_BYTES, Cost, hlo_cost, roofline_seconds
from agentjax.sharding.topology import GiB, chip_hbm_bytes

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def count_collectives(hlo_text: str) -> dict[str, int]:
    """Collective instructions in compiled HLO, by kind (async ``-start`` counts, ``-done`` not).

    Counts are static: a collective inside the scanned layer loop counts once.
    """
    ops = re.findall(r"\b(" + "|".join(COLLECTIVES) + r")(?:-start)?\(", hlo_text)
    found = Counter(ops)
    return {k: found.get(k, 0) for k in COLLECTIVES}


def largest_hlo_values(hlo_text: str, n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` largest per-chip values in compiled HLO: ``("name = type[shape] op", bytes)``."""
    out = {}
    pat = r"%?([\w.\-]+) = (\w+)\[([\d,]*)\]\S* ([\w\-]+)\("
    for name, dt, dims, op in re.findall(pat, hlo_text):
        if dt in DTYPE_BYTES and op not in ("parameter", "bitcast", "get-tuple-element"):
            size = DTYPE_BYTES[dt] * math.prod(int(d) for d in dims.split(",") if d)
            out[f"{name} = {dt}[{dims}] {op}"] = size
    return sorted(out.items(), key=lambda kv: -kv[1])[:n]


def shard_bytes(tree, shardings) -> int:
    """Per-chip bytes of ``tree`` (ShapeDtypeStructs) under ``shardings`` (uniform shards)."""
    leaves, sh = jax.tree.leaves(tree), jax.tree.leaves(shardings)
    return sum(math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize for x, s in zip(leaves, sh, strict=True))


def largest_leaves(tree, shardings, n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` largest leaves of ``tree`` by per-chip bytes: ``(path, bytes)``."""
    flat = jax.tree.flatten_with_path(tree)[0]
    sh = jax.tree.leaves(shardings)
    sizes = [
        (jax.tree_util.keystr(p), math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize)
        for (p, x), s in zip(flat, sh, strict=True)
    ]
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
    device_kind: str = ""
    flops: float = 0.0  # per chip, loop-aware (roofline.hlo_cost); XLA's own counts loops once
    hbm_traffic: float = 0.0  # bytes per chip, loop-aware
    open_loops: int = 0  # data-dependent loops: flops/traffic are one iteration (decode: a step)

    @property
    def roofline_seconds(self) -> float:
        """Lower bound on the step time from its FLOPs and bytes (see :mod:`.roofline`)."""
        return roofline_seconds(Cost(self.flops, self.hbm_traffic), self.device_kind)

    @property
    def peak_bytes(self) -> int:
        """Arguments + outputs not aliased to donated arguments + temporaries + code + resident."""
        return (
            self.argument_bytes
            + self.output_bytes
            - self.alias_bytes
            + self.temp_bytes
            + self.code_bytes
            + self.resident_bytes
        )

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
        why = self.error or (
            f"needs {self.peak_bytes / GiB:.2f} GiB per chip of {self.hbm_bytes / GiB:.0f} GiB"
        )
        return f"{self.name}: DOES NOT FIT: {why}\n  largest buffers: {big}"


def compile_step(
    name: str,
    fn: Callable,
    args: Sequence,
    in_shardings: Sequence,
    out_shardings,
    *,
    donate: Sequence[int] = (),
    resident_bytes: int = 0,
) -> StepReport:
    """Lowers ``fn`` on ``args`` (ShapeDtypeStructs) with shardings, compiles, and reports."""
    mesh = jax.tree.leaves(in_shardings)[0].mesh
    devices = list(mesh.devices.flat)
    hbm = chip_hbm_bytes(devices[0])
    largest = tuple(largest_leaves(list(args), list(in_shardings), 3))
    jitted = jax.jit(
        fn, in_shardings=tuple(in_shardings), out_shardings=out_shardings, donate_argnums=tuple(donate)
    )
    start = time.perf_counter()
    # Executables for abstract devices cannot be loaded back from the disk cache: the entry points
    # (launch/compile_check.py, benchmarks/fit_table.py) disable it at start; this never touches it.
    try:  # the programs get their mesh explicitly (make_train_step(mesh=), Sampler(mesh=))
        lowered = jitted.lower(*args)
        compiled = lowered.compile()
    except Exception as e:  # the TPU compiler rejects programs that exceed HBM
        msg = str(e)
        if "RESOURCE_EXHAUSTED" not in msg and "Ran out of memory" not in msg:
            raise
        # Its message names no buffer: add the largest values of the program before partitioning.
        unsplit = largest_hlo_values(lowered.as_text(dialect="hlo"), 3)
        largest += tuple((f"{k} (whole, before partitioning)", v) for k, v in unsplit)
        return StepReport(
            name,
            len(devices),
            hbm,
            resident_bytes=resident_bytes,
            largest=largest,
            error=_oom_summary(msg),
            compile_seconds=time.perf_counter() - start,
        )
    ma = compiled.memory_analysis()
    text = compiled.as_text()
    cost = hlo_cost(text).per_iteration()  # decode: one step of its loop
    return StepReport(
        name,
        len(devices),
        hbm,
        device_kind=devices[0].device_kind,
        flops=cost.flops,
        hbm_traffic=cost.bytes,
        open_loops=cost.open_loops,
        argument_bytes=ma.argument_size_in_bytes,
        output_bytes=ma.output_size_in_bytes,
        alias_bytes=ma.alias_size_in_bytes,
        temp_bytes=ma.temp_size_in_bytes,
        code_bytes=ma.generated_code_size_in_bytes,
        resident_bytes=resident_bytes,
        collectives=count_collectives(text),
        largest=largest + tuple(largest_hlo_values(text, 3)),
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
        tree,
        is_leaf=lambda sub: jax.tree.structure(sub) == ptree,
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
    return {
        "unique": unique,
        "received_per_chip": per_chip,
        "total": per_chip * n_s,
        "sent_per_learner_chip": -(-per_chip * n_s // n_l),
    }


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


_SHORT = {
    "all-reduce": "AR",
    "all-gather": "AG",
    "reduce-scatter": "RS",
    "all-to-all": "A2A",
    "collective-permute": "CP",
}


def format_report(report: PlacementReport) -> str:
    """A per-chip memory table (GiB) of one placement, its verdicts and the weight sync."""
    g = lambda b: f"{b / GiB:8.2f}"
    mesh = lambda m: "x".join(f"{a}{s}" for a, s in m.items() if s > 1) or "1"
    head = (
        f"{'step':8} {'chips':>5} {'args':>8} {'out':>8} {'alias':>8} {'temp':>8} "
        f"{'code':>8} {'resid':>8} {'peak':>8} {'HBM':>8} {'free':>8}  collectives"
    )
    lines = [
        f"== {report.placement}: learner mesh {mesh(report.meshes['learner'])}, "
        f"sampler mesh {mesh(report.meshes['sampler'])} (GiB per chip)",
        head,
    ]
    for s in report.steps:
        coll = " ".join(f"{_SHORT[k]}={v}" for k, v in s.collectives.items()) or "-"
        lines.append(
            f"{s.name:8} {s.n_chips:5d} {g(s.argument_bytes)} {g(s.output_bytes)} "
            f"{g(s.alias_bytes)} {g(s.temp_bytes)} {g(s.code_bytes)} "
            f"{g(s.resident_bytes)} {g(s.peak_bytes)} {g(s.hbm_bytes)} "
            f"{g(s.headroom_bytes)}  {coll}"
        )
    lines += [s.verdict() for s in report.steps]
    lines += [roofline_line(s) for s in report.steps if s.error is None and s.device_kind]
    if report.weight_sync:
        w = report.weight_sync
        lines.append(
            f"weight sync: {w['unique'] / GiB:.2f} GiB of parameters; each sampler chip "
            f"receives {w['received_per_chip'] / GiB:.3f} GiB, "
            f"{w['total'] / GiB:.2f} GiB in all; "
            f"each learner chip sends >= {w['sent_per_learner_chip'] / GiB:.3f} GiB"
        )
    return "\n".join(lines)


def roofline_line(s: StepReport) -> str:
    """One line: the step's per-chip FLOPs and HBM bytes and its roofline time (see roofline)."""
    t = s.roofline_seconds
    bound = "compute" if s.flops / CHIP_PEAKS[s.device_kind][0] >= t else "memory"
    loops = "; one iteration of its data-dependent loop" if s.open_loops else ""
    return (
        f"roofline {s.name}: {s.flops / 1e12:.3f} TFLOP, {s.hbm_traffic / GiB:.2f} GiB HBM "
        f"per chip -> >= {t * 1e3:.2f} ms ({bound}-bound{loops})"
    )
