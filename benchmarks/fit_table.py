"""Which presets fit which TPU topologies, and with which settings: writes docs/pod_fit.md.

    python benchmarks/fit_table.py --cache=docs/pod_fit.json   # every preset x topology x
                                                               # placement x mode (resumable)
    python benchmarks/fit_table.py --presets=qwen3_8b --topologies=v5e:16x16 --modes=fast

For every (preset, topology, placement, mode) the real programs (``aot.compile_train``: the
learner's ``make_train_step`` with ``aot.POD_LOSS``; ``aot.compile_sampler``: the sampler's
prefill and decode) are compiled with the real TPU compiler (libtpu, no TPU needed) for each
candidate setting in order; the first candidate that fits is recorded, with a roofline estimate
of each step (``agentjax/sharding/roofline.py``). Modes are ``programs.MODES`` (default: fast,
exact_pallas_bf16, exact_pallas_f32, the exact modes that compile for TPU; traced with
``interpret=False``). ``--tokens=8192,32768`` makes one row per length (train sequence = sampler
cache = the length, prompt = half; ``TOKEN_LEARNER`` / ``TOKEN_SAMPLER`` candidates vary only
the mesh and the sequences per shard). ``--notes`` appends a markdown file after the table.
The flags select a subset; ``--cache`` keeps every finished case, so the full table
is built over several runs and the document lists the cases not compiled yet. The first
candidate that fits is not necessarily the largest setting that would. Candidates differ in
mesh (FSDP / tensor / expert degree), batch, sequence length and microbatches, largest first;
all run the model as ``aot.pod_config`` sets it up (``remat="layer"`` and ``activation_rows``
= the ``batch`` rule's mesh axes), without which FSDP training does not fit at these sizes (see
docs/pod_readiness.md).

A compile takes minutes on a 2-core host (a Qwen3-8B train step: ~3.5 CPU-minutes), so a
candidate whose per-chip estimate is over the chip's HBM is not compiled: the table lists it as
skipped, with the estimate. Both estimates are calibrated on measured rows so that they err low
(:func:`estimate_train`, :func:`estimate_sample` and the constants below). ``--cache`` (a JSON
file) keeps finished cases across runs; ``--render_only`` rewrites the table from it.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax.numpy as jnp  # noqa: E402
from absl import app, flags  # noqa: E402

from agentjax.podcheck import aot, programs  # noqa: E402
from agentjax.policy import pallas_kernels  # noqa: E402
from agentjax.policy.presets import n_params, preset  # noqa: E402
from agentjax.sharding.rules import ShardingError, ShardingRules  # noqa: E402

_PRESETS = flags.DEFINE_list("presets", ["qwen3_8b", "qwen3_32b", "qwen3_30b_a3b"], "presets")
_TOPOLOGIES = flags.DEFINE_list("topologies", ["v5e:16x16", "v5p:4x4x4", "v6e:8x8"], "topologies")
_PLACEMENTS = flags.DEFINE_list("placements", ["colocated", "disaggregated"], "placements")
_MODES = flags.DEFINE_list(
    "modes",
    ["fast", "exact_pallas_bf16", "exact_pallas_f32"],
    "kernel modes (programs.MODES; the exact modes that compile for TPU are the Pallas ones)",
)
_OUT = flags.DEFINE_string("out", "docs/pod_fit.md", "markdown output")
_CACHE = flags.DEFINE_string("cache", None, "JSON file of finished cases (read and extended)")
_RENDER_ONLY = flags.DEFINE_bool("render_only", False, "only render the cases in --cache")
_TOKENS = flags.DEFINE_list(
    "tokens",
    [],
    "sequence lengths, one row each (train seq = sampler cache = tokens, prompt = tokens / 2; "
    "the candidates of TOKEN_LEARNER / TOKEN_SAMPLER); 0 or empty: the candidate search over lengths",
)
_NOTES = flags.DEFINE_string(
    "notes", "benchmarks/results/pod_fit_notes.md", "markdown appended after the table (if it exists)"
)

# Learner candidates: (mesh, sequences per batch shard, train seq, microbatches), largest first.
LEARNER = {
    "dense": [
        ({"fsdp": -1}, 1, 4096, 1),
        ({"fsdp": -1}, 1, 2048, 1),
        ({"fsdp": -1}, 1, 1024, 1),
        ({"fsdp": -1, "tensor": 4}, 1, 1024, 1),
    ],
    "moe": [
        ({"fsdp": -1}, 1, 4096, 1),
        ({"fsdp": -1}, 1, 2048, 1),
        ({"fsdp": -1}, 1, 1024, 1),
        ({"fsdp": -1, "expert": 8}, 1, 1024, 1),
    ],
}
# Sampler candidates (disaggregated slice): (mesh, sequences per batch shard, prompt, cache).
SAMPLER = {
    "dense": [
        ({"data": -1, "tensor": 8}, 16, 2048, 8192),
        ({"data": -1, "tensor": 8}, 8, 1024, 4096),
        ({"data": -1, "fsdp": 2, "tensor": 8}, 4, 1024, 4096),
    ],
    "moe": [
        ({"data": -1, "tensor": 4, "expert": 8}, 16, 2048, 8192),
        ({"data": -1, "tensor": 4, "expert": 8}, 8, 1024, 4096),
        ({"data": -1, "tensor": 4, "expert": 8}, 4, 1024, 2048),
    ],
}
# Colocated sampler shares the learner's mesh: (sequences per batch shard, prompt, cache).
COLOCATED_SAMPLER = [(4, 2048, 8192), (2, 1024, 4096), (1, 1024, 2048)]


# Rows at a fixed length (--tokens=8192,32768): the sequence length is the row's, only the mesh
# and the sequences per shard vary. Learner: (mesh, sequences per batch shard, microbatches).
TOKEN_LEARNER = {
    "dense": [({"fsdp": -1}, 1, 1), ({"fsdp": -1, "tensor": 4}, 1, 1), ({"fsdp": -1, "tensor": 8}, 1, 1)],
    "moe": [({"fsdp": -1}, 1, 1), ({"fsdp": -1, "expert": 8}, 1, 1)],
}
# Sampler: (disaggregated mesh, sequences per batch shard); colocated: sequences per shard.
TOKEN_SAMPLER = {
    "dense": [({"data": -1, "tensor": 8}, 4), ({"data": -1, "tensor": 8}, 1)],
    "moe": [({"data": -1, "tensor": 4, "expert": 8}, 4), ({"data": -1, "tensor": 4, "expert": 8}, 1)],
}
TOKEN_COLOCATED = [2, 1]


def learner_candidates(kind: str, tokens: int | None):
    """(mesh, sequences per shard, train seq, microbatches), largest first."""
    if not tokens:
        return LEARNER[kind]
    return [(m, per, tokens, mb) for m, per, mb in TOKEN_LEARNER[kind]]


def sampler_candidates(kind: str, tokens: int | None):
    """Disaggregated sampler (mesh, sequences per shard, prompt, cache), largest first."""
    if not tokens:
        return SAMPLER[kind]
    return [(m, per, tokens // 2, tokens) for m, per in TOKEN_SAMPLER[kind]]


def colocated_candidates(tokens: int | None):
    """Colocated sampler (sequences per shard, prompt, cache), largest first."""
    if not tokens:
        return COLOCATED_SAMPLER
    return [(per, tokens // 2, tokens) for per in TOKEN_COLOCATED]


# Estimates, to skip compiles that cannot fit. Train: parameter state (parameters, gradients,
# both AdamW moments and the KL reference, all in the parameter dtype: 5 x 2 bytes per bf16
# parameter) over the chips,
# plus activations per sequence per chip, measured at 4096 tokens on v5p (train peak minus the
# state: Qwen3-8B 6.9, Qwen3-32B 14.5, 30B-A3B 9.4 GiB), scaled linearly with the sequence
# length and by chip kind and slice: the smallest ratio measured over the three presets and both
# placements (v5p 0.93-1.14, v5e 0.95-1.31, v6e 0.8-1.35), so that a skipped candidate is
# clearly over HBM.
TRAIN_ACT_GIB_4096 = {"qwen3_8b": 6.9, "qwen3_32b": 14.5, "qwen3_30b_a3b": 9.4}
KIND_FACTOR = {"TPU v5": 0.93, "TPU v5 lite": 0.95, "TPU v6 lite": 0.8}
TRAIN_SKIP = 0.9  # skip a learner candidate estimated above this fraction of HBM
# Sampler: measured prefill peak / estimate_sample, smallest seen per placement (colocated, on
# the learner's FSDP mesh: 1.15 to 2.1; disaggregated, data x tensor (x expert): 0.8 to 1.2).
SAMPLE_RATIO = {"colocated": 1.15, "disaggregated": 0.8}


def _shards(mesh: dict[str, int]) -> int:
    return mesh["data"] * mesh["fsdp"]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def estimate_train(name: str, cfg, n_chips: int, kind: str, per: int, seq: int) -> float:
    """Estimated train-step peak (bytes per chip) with ``per`` sequences of ``seq`` per chip."""
    state = n_params(cfg) * 5 * jnp.dtype(cfg.pdtype).itemsize / n_chips
    act = TRAIN_ACT_GIB_4096.get(name, 0.0) * aot.GiB * per * seq / 4096
    return state + act * KIND_FACTOR.get(kind, 0.8)


def estimate_sample(cfg, mesh: dict[str, int], per: int, prompt: int, cache: int, resident: int = 0) -> float:
    """A rough prefill peak (bytes per chip): parameters over the parameter axes, the KV cache
    and attention scores of ``per`` sequences per chip (one key block of them where the
    attention is blockwise; prefill computes no logits; see
    :data:`SAMPLE_RATIO` for how it compares with the compiled programs)."""
    split = mesh["fsdp"] * mesh["tensor"]
    size = jnp.dtype(cfg.pdtype).itemsize
    params = n_params(cfg) * size / (split * (mesh["expert"] if cfg.is_moe else 1))
    kv = 2 * cfg.n_layers * per * cache * cfg.n_kv_heads * cfg.head_dim * size / mesh["tensor"]
    # scores: the full tensor, or one block of keys at a time (fast mode's blockwise attention
    # from attention_blockwise_from keys; the Pallas exact kernels always, by chunks of keys)
    blockwise = cfg.invariant == "pallas" or (not cfg.exact and cache >= cfg.attention_blockwise_from)
    keys = min(cache, cfg.attention_block) if blockwise else cache
    scores = per * cfg.n_heads * prompt * keys * 4 / mesh["tensor"]
    return params + kv + scores + resident


def _fit_learner(name, cfg, devices, kind, rules, tried, tokens=None):
    hbm = aot.chip_hbm_bytes(devices[0])
    for mesh_spec, per, seq, mb in learner_candidates(kind, tokens):
        mesh = aot.topology_mesh(devices, mesh_spec)
        shape = dict(mesh.shape)
        work = aot.Workload(train_batch=_shards(shape) * per * mb, train_seq=seq, microbatches=mb)
        est = estimate_train(name, cfg, len(devices), devices[0].device_kind, per, seq)
        if est > TRAIN_SKIP * hbm:
            _log(f"  train {shape} {work.train_batch}x{seq}: skipped, estimated {est / aot.GiB:.1f} GiB")
            tried.append(
                f"train {_mesh_str(shape)} {work.train_batch} x {seq}: not compiled, "
                f"estimated {est / aot.GiB:.1f} GiB > {TRAIN_SKIP:.0%} of HBM"
            )
            continue
        rep, p_sh, opt_bytes = aot.compile_train(cfg, mesh, rules, work)
        _log(
            f"  train {shape} {work.train_batch}x{seq}: {rep.verdict().splitlines()[0]} "
            f"({rep.compile_seconds:.0f}s)"
        )
        if rep.fits:
            return mesh, work, rep, p_sh, opt_bytes
        tried.append(
            f"train {_mesh_str(shape)} {work.train_batch} x {seq}: {rep.peak_bytes / aot.GiB:.1f} GiB"
            if rep.error is None
            else f"train {_mesh_str(shape)} {work.train_batch} x {seq}: compiler OOM"
        )
    return None


def _sample_skip(est: float, ratio: float) -> str:
    return f"prefill estimated {est / aot.GiB:.1f} GiB, x {ratio} = {est * ratio / aot.GiB:.1f} GiB > HBM"


def _fit_sampler(cfg, candidates, rules, make_mesh, tried, placement, param_sh=None, resident=0):
    for mesh_spec, per, prompt, cache in candidates:
        mesh = make_mesh(mesh_spec)
        shape = dict(mesh.shape)
        work = aot.Workload(sample_batch=_shards(shape) * per, prompt_len=prompt, cache_len=cache)
        est = estimate_sample(cfg, shape, per, prompt, cache, resident)
        hbm = aot.chip_hbm_bytes(mesh.devices.flat[0])
        if est * SAMPLE_RATIO[placement] > hbm:
            why = _sample_skip(est, SAMPLE_RATIO[placement])
            _log(f"  sample {shape} {work.sample_batch}x{cache}: skipped, {why}")
            tried.append(f"sample {_mesh_str(shape)} {work.sample_batch} x {cache}: not compiled, {why}")
            continue
        try:
            pre, dec = aot.compile_sampler(cfg, mesh, rules, work, param_sh=param_sh, resident_bytes=resident)
        except ShardingError as e:
            _log(f"  sampler {shape}: {e}")
            tried.append(f"sampler {_mesh_str(shape)}: {e}")
            continue
        _log(
            f"  sample {shape} {work.sample_batch}x{cache}: {pre.verdict().splitlines()[0]}; "
            f"{dec.verdict().splitlines()[0]} ({pre.compile_seconds + dec.compile_seconds:.0f}s)"
        )
        if pre.fits and dec.fits:
            return mesh, work, pre, dec
        peak = lambda s: "compiler OOM" if s.error else f"{s.peak_bytes / aot.GiB:.1f} GiB"
        tried.append(
            f"sample {_mesh_str(shape)} {work.sample_batch} x {cache}: prefill "
            f"{peak(pre)}, decode {peak(dec)}"
        )
    return None


def _roofline(step, tokens: int) -> dict:
    return {
        "flops": step.flops,
        "traffic": step.hbm_traffic,
        "seconds": step.roofline_seconds,
        "tok_s_chip": tokens / step.roofline_seconds / step.n_chips,
    }


def _learner_from(row: dict, cfg, devices, rules):
    """The learner setting of a partial row (its train step compiled and fitting), rebuilt
    without compiling: the mesh, the workload, the parameter shardings and resident bytes."""
    mesh = aot.topology_mesh(devices, row["learner_mesh"])
    work = aot.Workload(
        train_batch=row["train_batch"], train_seq=row["train_seq"], microbatches=row["microbatches"]
    )
    params = aot.abstract_params(cfg)
    p_sh = aot.param_shardings(params, mesh, rules, aot.logical_axes(cfg))
    return mesh, work, None, p_sh, aot.learner_resident_bytes(params, p_sh, mesh)


def run_case(
    name: str,
    topology: str,
    placement: str,
    mode: str = "fast",
    save=lambda row: None,
    prior: dict | None = None,
    tokens: int | None = None,
) -> dict:
    """Finds the first fitting learner and sampler setting; returns a table row (``tokens``:
    the row's fixed sequence length, see :data:`TOKEN_LEARNER`).

    ``save`` gets the partial row (learner only) before the sampler is compiled; a partial
    ``prior`` row is continued from there (its learner is not compiled again).
    """
    rules = ShardingRules()
    # per-layer remat, rows split like the batch; the kernels and dtypes of ``mode``
    cfg = programs.mode_config(aot.pod_config(preset(name), rules), mode)
    kind = "moe" if cfg.is_moe else "dense"
    devices = aot.topology_devices(topology)
    row = {
        "preset": name,
        "topology": topology,
        "chips": len(devices),
        "placement": placement,
        "mode": mode,
        "kind": devices[0].device_kind,
        "hbm": aot.chip_hbm_bytes(devices[0]),
        "tokens": tokens,
        "score_chunk": cfg.score_chunk,
    }
    l_dev = s_dev = devices
    if placement == "disaggregated":
        l_dev, s_dev, row["slices"] = aot.disaggregated_devices(topology)
    row["tried"] = tried = []
    if prior and prior.get("partial") and "learner_mesh" in prior:
        _log("  learner: from the partial row in the cache")
        row = {k: v for k, v in prior.items() if k not in ("fits", "partial", "why")}
        tried = row["tried"]
        l_mesh, l_work, _, p_sh, opt_bytes = _learner_from(prior, cfg, l_dev, rules)
    else:
        learner = _fit_learner(name, cfg, l_dev, kind, rules, tried, tokens)
        if learner is None:
            return {**row, "fits": False, "why": "no learner candidate fits"}
        l_mesh, l_work, train, p_sh, opt_bytes = learner
        row.update(
            learner_mesh=dict(l_mesh.shape),
            train_batch=l_work.train_batch,
            train_seq=l_work.train_seq,
            microbatches=l_work.microbatches,
            train_peak=train.peak_bytes,
            train_coll=dict(train.collectives),
            train_roofline=_roofline(train, l_work.train_batch * l_work.train_seq),
        )
        save({**row, "fits": False, "partial": True, "why": "sampler not compiled yet"})
    if placement == "colocated":
        cands = [(dict(l_mesh.shape), per, p, c) for per, p, c in colocated_candidates(tokens)]
        sampler = _fit_sampler(cfg, cands, rules, lambda s: l_mesh, tried, placement, p_sh, opt_bytes)
    else:
        sampler = _fit_sampler(
            cfg,
            sampler_candidates(kind, tokens),
            rules,
            lambda s: aot.topology_mesh(s_dev, s),
            tried,
            placement,
        )
    if sampler is None:
        return {**row, "fits": False, "why": "no sampler candidate fits"}
    s_mesh, s_work, pre, dec = sampler
    row.update(
        sampler_mesh=dict(s_mesh.shape),
        sample_batch=s_work.sample_batch,
        prompt_len=s_work.prompt_len,
        cache_len=s_work.cache_len,
        prefill_peak=pre.peak_bytes,
        decode_peak=dec.peak_bytes,
        decode_coll=dict(dec.collectives),
        fits=True,
        prefill_roofline=_roofline(pre, s_work.sample_batch * s_work.prompt_len),
        decode_roofline=_roofline(dec, s_work.sample_batch),
    )
    if placement == "disaggregated":
        params = aot.abstract_params(cfg)
        s_sh = aot.param_shardings(params, s_mesh, rules, aot.logical_axes(cfg))
        row["sync_per_chip"] = aot.weight_sync_bytes(params, p_sh, s_sh)["received_per_chip"]
    return row


def _mesh_str(m) -> str:
    return "x".join(f"{a}{s}" for a, s in m.items() if s > 1) or "1"


def _tok(r: dict, step: str) -> str:
    roof = r.get(f"{step}_roofline")
    return "-" if not roof else f"{roof['tok_s_chip']:,.0f}"


HEADER = """# Pod fit: Qwen3 presets on TPU topologies

Made by `python benchmarks/fit_table.py --cache=docs/pod_fit.json` (do not edit by hand): the
real programs, compiled by the TPU compiler from libtpu on a CPU host. Learner: `make_train_step`
with the default objective (GRPO) and filter (IcePop), the KL penalty on (`kl_coef=1e-3`: the
reference parameters are resident and scored), global-norm clipping, AdamW (moments in the
parameter dtype), the NaN/Inf guard and gradient accumulation over the row's microbatches, on a
`make_batch` layout (MoE: with the sampler's routes replayed). Sampler: prefill is `extend` (a
prompt into an empty state; no logits), decode is `generate` (its `while_loop` of decode steps).
Modes (`agentjax/podcheck/programs.py`): fast = the preset (bf16 body, float32 LM head);
exact_pallas_bf16 / exact_pallas_f32 = exact mode's batch-invariant Pallas kernels
(`exact_kernels="pallas"`, Mosaic, each kernel in a `shard_map` over the mesh) in bf16 /
float32; exact_bf16 / exact_f32 rows (if any) were compiled with `exact_kernels="tiled"`.
Rows marked "Nk tokens" fix the sequence length: train sequence = sampler cache = N k, prompt =
half of it. Rows marked "scored by N" take the learner's log-probs N tokens per row at a time
(`ModelConfig.score_chunk`, `aot.POD_SCORE_CHUNK`: no `[B, T, V]` logits in the train step;
exact mode's bits unchanged); rows without it were compiled before that setting existed (their
rows of more than 2049 tokens held the whole float32 logits).
Per-chip peak = arguments + outputs - donated aliases + temporaries + generated code (+ the
optimizer state and KL reference kept resident while a colocated sampler runs). Candidates are
tried in a fixed order (`LEARNER`, `SAMPLER`, `COLOCATED_SAMPLER` in the script), largest
first, and the first that fits is shown: it fits, but it is not the largest setting that would.
A candidate whose estimate is clearly over HBM is not compiled (listed below as skipped).
All rows run the model as `aot.pod_config` sets it up: `remat="layer"` and
`activation_rows=("data", "fsdp")`. Disaggregated: learner on half of the chips, sampler on the
other half: two halves of one slice on v5p; two slices of half the shape on v5e and v6e.

Roofline tokens/s per chip (`agentjax/sharding/roofline.py`): step time = max(FLOPs / peak,
HBM bytes / bandwidth) per chip, FLOPs = the compiled program's matmuls and bytes = operands and
results of its top-level instructions, each loop body times its trip count (XLA's own
`cost_analysis()` counts a loop body once). Peaks per chip (bf16 FLOP/s, HBM bytes/s), Google
Cloud TPU docs: v5e 197 T, 819 G; v5p 459 T, 2765 G; v6e 918 T, 1640 G. Assumed: all matmuls at
the bf16 peak (XLA's default precision runs float32 matmuls as one bf16 pass on TPU), elementwise
work free, collectives overlapped, no on-chip reuse across instructions. Train: batch x seq
tokens per step; prefill: batch x prompt; decode: one token per row per step (one iteration of
the decode loop). Known overcount: an in-place update (the KV cache and token buffers written
by `dynamic-update-slice` / `scatter`) counts its whole buffer as read and written, so the
memory-bound decode estimate is pessimistic (Qwen3-8B colocated below: ~130 ms per step where
the FSDP weight gather alone is ~40 ms); train and prefill are dominated by their matmuls and
weight traffic (Qwen3-8B train: 3.4e14 FLOPs per chip, matching 8 x 8.2e9 x 4096 tokens with
remat and the KL reference forward).
"""


def markdown(rows: list[dict], missing: list[str] = ()) -> str:
    g = lambda b: f"{b / aot.GiB:.1f}"
    lines = [
        *HEADER.splitlines(),
        "",
        "| preset | topology (chips, HBM) | placement | mode | learner mesh | train batch x seq "
        "| train GiB/chip | sampler mesh | sample batch, prompt / cache | prefill / decode "
        "GiB/chip | sync GiB/sampler chip | roofline tok/s/chip train / prefill / decode | fits |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        topo = f"{r['topology']} ({r['chips']} x {r['kind']}, {r['hbm'] // aot.GiB} GiB)"
        head = (
            f"| {r['preset']} ({n_params(preset(r['preset'])) / 1e9:.1f}B) | {topo} "
            f"| {r['placement']} | {r.get('mode', 'fast')}"
            + (f", {r['tokens'] // 1024}k tokens" if r.get("tokens") else "")
            + (f", scored by {r['score_chunk']}" if r.get("score_chunk") else "")
            + " "
        )
        if "learner_mesh" not in r:
            lines.append(head + f"| - | - | - | - | - | - | - | - | no: {r['why']} |")
            continue
        train = f"{r['train_batch']} x {r['train_seq']}"
        if r["microbatches"] > 1:
            train += f" ({r['microbatches']} microbatches)"
        samp = sb = sp = "-"
        if "sampler_mesh" in r:
            samp = _mesh_str(r["sampler_mesh"])
            sb = f"{r['sample_batch']}, {r['prompt_len']} / {r['cache_len']}"
            sp = f"{g(r['prefill_peak'])} / {g(r['decode_peak'])}"
        sync = g(r["sync_per_chip"]) if "sync_per_chip" in r else "-"
        roof = " / ".join(_tok(r, k) for k in ("train", "prefill", "decode"))
        fits = (
            "yes"
            if r["fits"]
            else f"unfinished: learner fits, {r['why']}"
            if r.get("partial")
            else f"no: {r['why']}"
        )
        lines.append(
            head + f"| {_mesh_str(r['learner_mesh'])} | {train} | {g(r['train_peak'])} "
            f"| {samp} | {sb} | {sp} | {sync} | {roof} | {fits} |"
        )
    lines += [
        "",
        "Settings common to all rows: remat = per layer (full, `jax.checkpoint` of the",
        "scanned layer body); rules = `DEFAULT_RULES` (FSDP over `embed`, tensor over",
        "heads / kv heads / mlp / vocab, experts over `expert`, batch over data x fsdp).",
        "",
    ]
    notes = [
        f"- {r['preset']} on {r['topology']}, {r['placement']}, {r.get('mode', 'fast')}: "
        + "; ".join(r["tried"])
        for r in rows
        if r.get("tried")
    ]
    if notes:
        lines += ["Larger candidates that did not fit (per-chip peak) or were skipped:", "", *notes, ""]
    if missing:
        lines += [
            "Not compiled yet (rerun the script with `--cache=docs/pod_fit.json`; each "
            "case takes minutes to an hour of CPU): " + "; ".join(missing) + ".",
            "",
        ]
    return "\n".join(lines)


FULL = {
    "presets": _PRESETS.default,
    "topologies": _TOPOLOGIES.default,
    "placements": _PLACEMENTS.default,
    "modes": _MODES.default,
}


def case_key(name: str, topology: str, placement: str, mode: str, tokens: int | None = None) -> str:
    return f"{name}|{topology}|{placement}|{mode}" + (f"|{tokens}" if tokens else "")


def _case_str(name, topology, placement, mode, tokens=None) -> str:
    return f"{name} on {topology}, {placement}, {mode}" + (f", {tokens} tokens" if tokens else "")


def write(cache: dict, grid) -> None:
    """Renders every case of ``grid`` that ``cache`` holds, then the cached cases outside it
    (e.g. another mode); lists the grid's others as not compiled."""
    rows, missing, keys = [], [], set()
    for case in grid:
        key = case_key(*case)
        keys.add(key)
        if key in cache:
            rows.append(cache[key])
        else:
            missing.append(_case_str(*case))
    rows += [row for key, row in cache.items() if key not in keys]
    text = markdown(rows, missing)
    if _NOTES.value and os.path.exists(_NOTES.value):
        with open(_NOTES.value) as f:
            text += "\n" + f.read()
    with open(_OUT.value, "w") as f:
        f.write(text)


def main(argv):
    del argv
    aot.offline_compile_setup()  # process state: only an entry point changes it
    cache = {}
    if _CACHE.value and os.path.exists(_CACHE.value):
        with open(_CACHE.value) as f:
            cache = json.load(f)
    lengths = [int(x) or None for x in _TOKENS.value] or [None]  # 0: the candidate search
    grid = [
        (n, t, p, m, k)
        for n in FULL["presets"]
        for k in lengths
        for t in FULL["topologies"]
        for p in FULL["placements"]
        for m in FULL["modes"]
    ]
    chosen = [
        (n, t, p, m, k)
        for n in _PRESETS.value
        for k in lengths
        for t in _TOPOLOGIES.value
        for p in _PLACEMENTS.value
        for m in _MODES.value
    ]
    for name, topology, placement, mode, tokens in [] if _RENDER_ONLY.value else chosen:
        key = case_key(name, topology, placement, mode, tokens)
        if key in cache and not cache[key].get("partial"):
            continue

        def save(row, key=key):
            cache[key] = row
            if _CACHE.value:
                with open(_CACHE.value, "w") as f:
                    json.dump(cache, f, indent=1)

        _log(key)
        with pallas_kernels.interpret_mode(False):  # Mosaic, not the host's interpreter
            save(run_case(name, topology, placement, mode, save, prior=cache.get(key), tokens=tokens))
        write(cache, grid + [c for c in chosen if c not in grid])
    write(cache, grid + [c for c in chosen if c not in grid])
    _log(f"wrote {_OUT.value}")


if __name__ == "__main__":
    app.run(main)
