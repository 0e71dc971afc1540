"""Which presets fit which TPU topologies, and with which settings: writes docs/pod_fit.md.

    python benchmarks/fit_table.py                      # all presets x topologies x placements
    python benchmarks/fit_table.py --presets=qwen3_8b --topologies=v5e:16x16 --out=/tmp/t.md

For every (preset, topology, placement) the learner's train step and the sampler's prefill and
decode steps are compiled with the real TPU compiler (libtpu, no TPU needed) for each candidate
setting in order; the first candidate that fits is recorded. It fits, but it is not the largest
setting that would. Candidates differ in mesh (FSDP / tensor / expert degree), batch, sequence
length and microbatches, largest first; all run the model as ``aot.pod_config`` sets it up
(``remat="layer"`` and ``activation_rows`` = the ``batch`` rule's mesh axes), without which FSDP
training does not fit at these sizes (see docs/pod_readiness.md).

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

from absl import app, flags  # noqa: E402

from agentjax.policy.presets import n_params, preset  # noqa: E402
from agentjax.sharding import aot  # noqa: E402
from agentjax.sharding.rules import ShardingError, ShardingRules  # noqa: E402

_PRESETS = flags.DEFINE_list("presets", ["qwen3_8b", "qwen3_32b", "qwen3_30b_a3b"], "presets")
_TOPOLOGIES = flags.DEFINE_list("topologies", ["v5e:16x16", "v5p:4x4x4", "v6e:8x8"], "topologies")
_PLACEMENTS = flags.DEFINE_list("placements", ["colocated", "disaggregated"], "placements")
_OUT = flags.DEFINE_string("out", "docs/pod_fit.md", "markdown output")
_CACHE = flags.DEFINE_string("cache", None, "JSON file of finished cases (read and extended)")
_RENDER_ONLY = flags.DEFINE_bool("render_only", False, "only render the cases in --cache")

# Learner candidates: (mesh, sequences per batch shard, train seq, microbatches), largest first.
LEARNER = {
    "dense": [({"fsdp": -1}, 1, 4096, 1), ({"fsdp": -1}, 1, 2048, 1),
              ({"fsdp": -1}, 1, 1024, 1), ({"fsdp": -1, "tensor": 4}, 1, 1024, 1)],
    "moe": [({"fsdp": -1}, 1, 4096, 1), ({"fsdp": -1}, 1, 2048, 1),
            ({"fsdp": -1}, 1, 1024, 1), ({"fsdp": -1, "expert": 8}, 1, 1024, 1)],
}
# Sampler candidates (disaggregated slice): (mesh, sequences per batch shard, prompt, cache).
SAMPLER = {
    "dense": [({"data": -1, "tensor": 8}, 16, 2048, 8192),
              ({"data": -1, "tensor": 8}, 8, 1024, 4096),
              ({"data": -1, "fsdp": 2, "tensor": 8}, 4, 1024, 4096)],
    "moe": [({"data": -1, "tensor": 4, "expert": 8}, 16, 2048, 8192),
            ({"data": -1, "tensor": 4, "expert": 8}, 8, 1024, 4096),
            ({"data": -1, "tensor": 4, "expert": 8}, 4, 1024, 2048)],
}
# Colocated sampler shares the learner's mesh: (sequences per batch shard, prompt, cache).
COLOCATED_SAMPLER = [(4, 2048, 8192), (2, 1024, 4096), (1, 1024, 2048)]


# Estimates, to skip compiles that cannot fit. Train: parameter state (bf16 parameters and
# gradients, float32 first and bf16 second AdamW moment: 10 bytes per parameter) over the chips,
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
PREVIEW = "aot.proposed_model_patch"  # cache rows compiled with the since-removed preview


def _shards(mesh: dict[str, int]) -> int:
    return mesh["data"] * mesh["fsdp"]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def estimate_train(name: str, cfg, n_chips: int, kind: str, per: int, seq: int) -> float:
    """Estimated train-step peak (bytes per chip) with ``per`` sequences of ``seq`` per chip."""
    state = n_params(cfg) * 10 / n_chips
    act = TRAIN_ACT_GIB_4096.get(name, 0.0) * aot.GiB * per * seq / 4096
    return state + act * KIND_FACTOR.get(kind, 0.8)


def estimate_sample(cfg, mesh: dict[str, int], per: int, prompt: int, cache: int,
                    resident: int = 0) -> float:
    """A rough prefill peak (bytes per chip): bf16 parameters over the parameter axes, the KV
    cache, float32 logits and attention scores of ``per`` sequences per chip (see
    :data:`SAMPLE_RATIO` for how it compares with the compiled programs)."""
    split = mesh["fsdp"] * mesh["tensor"]
    params = n_params(cfg) * 2 / (split * (mesh["expert"] if cfg.is_moe else 1))
    kv = 2 * cfg.n_layers * per * cache * cfg.n_kv_heads * cfg.head_dim * 2 / mesh["tensor"]
    logits = per * prompt * cfg.vocab_size * 4 / mesh["tensor"]
    scores = per * cfg.n_heads * prompt * cache * 4 / mesh["tensor"]
    return params + kv + logits + scores + resident


def _fit_learner(name, cfg, devices, kind, rules, opt, tried):
    hbm = aot.chip_hbm_bytes(devices[0])
    for mesh_spec, per, seq, mb in LEARNER[kind]:
        mesh = aot.topology_mesh(devices, mesh_spec)
        shape = dict(mesh.shape)
        work = aot.Workload(train_batch=_shards(shape) * per * mb, train_seq=seq, microbatches=mb)
        est = estimate_train(name, cfg, len(devices), devices[0].device_kind, per, seq)
        if est > TRAIN_SKIP * hbm:
            _log(f"  train {shape} {work.train_batch}x{seq}: skipped, estimated "
                 f"{est / aot.GiB:.1f} GiB")
            tried.append(f"train {_mesh_str(shape)} {work.train_batch} x {seq}: not compiled, "
                         f"estimated {est / aot.GiB:.1f} GiB > {TRAIN_SKIP:.0%} of HBM")
            continue
        rep, p_sh, opt_bytes = aot.compile_train(cfg, mesh, rules, work, optimizer=opt)
        _log(f"  train {shape} {work.train_batch}x{seq}: {rep.verdict().splitlines()[0]} "
             f"({rep.compile_seconds:.0f}s)")
        if rep.fits:
            return mesh, work, rep, p_sh, opt_bytes
        tried.append(f"train {_mesh_str(shape)} {work.train_batch} x {seq}: "
                     f"{rep.peak_bytes / aot.GiB:.1f} GiB" if rep.error is None else
                     f"train {_mesh_str(shape)} {work.train_batch} x {seq}: compiler OOM")
    return None


def _sample_skip(est: float, ratio: float) -> str:
    return (f"prefill estimated {est / aot.GiB:.1f} GiB, x {ratio} = "
            f"{est * ratio / aot.GiB:.1f} GiB > HBM")


def _fit_sampler(cfg, candidates, rules, make_mesh, tried, placement, param_sh=None,
                 resident=0):
    for mesh_spec, per, prompt, cache in candidates:
        mesh = make_mesh(mesh_spec)
        shape = dict(mesh.shape)
        work = aot.Workload(sample_batch=_shards(shape) * per, prompt_len=prompt, cache_len=cache)
        est = estimate_sample(cfg, shape, per, prompt, cache, resident)
        hbm = aot.chip_hbm_bytes(mesh.devices.flat[0])
        if est * SAMPLE_RATIO[placement] > hbm:
            why = _sample_skip(est, SAMPLE_RATIO[placement])
            _log(f"  sample {shape} {work.sample_batch}x{cache}: skipped, {why}")
            tried.append(f"sample {_mesh_str(shape)} {work.sample_batch} x {cache}: not "
                         f"compiled, {why}")
            continue
        try:
            pre, dec = aot.compile_sampler(cfg, mesh, rules, work, param_sh=param_sh,
                                           resident_bytes=resident)
        except ShardingError as e:
            _log(f"  sampler {shape}: {e}")
            tried.append(f"sampler {_mesh_str(shape)}: {e}")
            continue
        _log(f"  sample {shape} {work.sample_batch}x{cache}: {pre.verdict().splitlines()[0]}; "
             f"{dec.verdict().splitlines()[0]} ({pre.compile_seconds + dec.compile_seconds:.0f}s)")
        if pre.fits and dec.fits:
            return mesh, work, pre, dec
        tried.append(f"sample {_mesh_str(shape)} {work.sample_batch} x {cache}: prefill "
                     f"{pre.peak_bytes / aot.GiB:.1f}, decode {dec.peak_bytes / aot.GiB:.1f} GiB")
    return None


def run_case(name: str, topology: str, placement: str, save=lambda row: None) -> dict:
    """Finds the first fitting learner and sampler setting; returns a table row.

    ``save`` gets the partial row (learner only) before the sampler is compiled.
    """
    import jax.numpy as jnp
    import optax

    rules, opt = ShardingRules(), optax.adamw(1e-6, mu_dtype=jnp.float32)
    cfg = aot.pod_config(preset(name), rules)  # per-layer remat, rows split like the batch
    kind = "moe" if cfg.is_moe else "dense"
    devices = aot.topology_devices(topology)
    row = {"preset": name, "topology": topology, "chips": len(devices), "placement": placement,
           "kind": devices[0].device_kind, "hbm": aot.chip_hbm_bytes(devices[0])}
    l_dev = s_dev = devices
    if placement == "disaggregated":
        l_dev, s_dev, row["slices"] = aot.disaggregated_devices(topology)
    row["tried"] = tried = []
    learner = _fit_learner(name, cfg, l_dev, kind, rules, opt, tried)
    if learner is None:
        return {**row, "fits": False, "why": "no learner candidate fits"}
    l_mesh, l_work, train, p_sh, opt_bytes = learner
    row.update(learner_mesh=dict(l_mesh.shape), train_batch=l_work.train_batch,
               train_seq=l_work.train_seq, microbatches=l_work.microbatches,
               train_peak=train.peak_bytes, train_coll=dict(train.collectives))
    save({**row, "fits": False, "partial": True, "why": "sampler not compiled yet"})
    if placement == "colocated":
        cands = [(dict(l_mesh.shape), per, p, c) for per, p, c in COLOCATED_SAMPLER]
        sampler = _fit_sampler(cfg, cands, rules, lambda s: l_mesh, tried, placement, p_sh,
                               opt_bytes)
    else:
        sampler = _fit_sampler(cfg, SAMPLER[kind], rules, lambda s: aot.topology_mesh(s_dev, s),
                               tried, placement)
    if sampler is None:
        return {**row, "fits": False, "why": "no sampler candidate fits"}
    s_mesh, s_work, pre, dec = sampler
    row.update(sampler_mesh=dict(s_mesh.shape), sample_batch=s_work.sample_batch,
               prompt_len=s_work.prompt_len, cache_len=s_work.cache_len,
               prefill_peak=pre.peak_bytes, decode_peak=dec.peak_bytes,
               decode_coll=dict(dec.collectives), fits=True)
    if placement == "disaggregated":
        params = aot.abstract_params(cfg)
        s_sh = aot.param_shardings(params, s_mesh, rules, aot.logical_axes(cfg))
        row["sync_per_chip"] = aot.weight_sync_bytes(params, p_sh, s_sh)["received_per_chip"]
    return row


def _mesh_str(m) -> str:
    return "x".join(f"{a}{s}" for a, s in m.items() if s > 1) or "1"


def markdown(rows: list[dict], missing: list[str] = ()) -> str:
    g = lambda b: f"{b / aot.GiB:.1f}"
    lines = [
        "# Pod fit: Qwen3 presets on TPU topologies",
        "",
        "Made by `python benchmarks/fit_table.py` (do not edit by hand): each step compiled by the",
        "TPU compiler from libtpu on a CPU host, per-chip peak = arguments + outputs - donated",
        "aliases + temporaries + generated code (+ the optimizer state kept resident while a",
        "colocated sampler runs). Candidates are tried in a fixed order (`LEARNER`, `SAMPLER`,",
        "`COLOCATED_SAMPLER` in the script), largest first, and the first that fits is shown: it",
        "fits, but it is not the largest setting that would (compare peak with HBM). A candidate",
        "whose estimate is clearly over HBM is not compiled (listed below as skipped, with the",
        "estimate). All rows run the model as `aot.pod_config` sets it up: `remat=\"layer\"` and",
        "`activation_rows=(\"data\", \"fsdp\")` (`ModelConfig` fields of `policy/model.py`).",
        "AdamW with float32 first moment; bf16 parameters; float32 LM head.",
        "Disaggregated: learner on half of the chips, sampler on the other half: two halves",
        "of one slice on v5p; two slices of half the shape on v5e and v6e, whose compiler",
        "rejects programs on part of a slice (\"limited ICI routing\"; measured on v5e:16x16).",
        "",
        "| preset | topology (chips, HBM) | placement | learner mesh | train batch x seq "
        "| train GiB/chip | sampler mesh | sample batch, prompt / cache | prefill / decode "
        "GiB/chip | sync GiB/sampler chip | fits |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        topo = f"{r['topology']} ({r['chips']} x {r['kind']}, {r['hbm'] // aot.GiB} GiB)"
        if "learner_mesh" not in r:
            lines.append(f"| {r['preset']} | {topo} | {r['placement']} | - | - | - | - | - | - "
                         f"| - | no: {r['why']} |")
            continue
        train = f"{r['train_batch']} x {r['train_seq']}"
        if r["microbatches"] > 1:
            train += f" ({r['microbatches']} microbatches)"
        samp = sb = "-"
        if "sampler_mesh" in r:
            samp = _mesh_str(r["sampler_mesh"])
            sb = f"{r['sample_batch']}, {r['prompt_len']} / {r['cache_len']}"
            sp = f"{g(r['prefill_peak'])} / {g(r['decode_peak'])}"
        else:
            sp = "-"
        sync = g(r["sync_per_chip"]) if "sync_per_chip" in r else "-"
        fits = ("yes" if r["fits"] else f"unfinished: learner fits, {r['why']}"
                if r.get("partial") else f"no: {r['why']}")
        mark = " *" if r.get("model") == PREVIEW else ""
        lines.append(f"| {r['preset']} ({n_params(preset(r['preset'])) / 1e9:.1f}B){mark} | {topo} "
                     f"| {r['placement']} | {_mesh_str(r['learner_mesh'])} | {train} "
                     f"| {g(r['train_peak'])} | {samp} | {sb} | {sp} | {sync} | {fits} |")
    lines += ["", "Settings common to all rows: remat = per layer (full, `jax.checkpoint` of the",
              "scanned layer body); rules = `DEFAULT_RULES` (FSDP over `embed`, tensor over",
              "heads / kv heads / mlp / vocab, experts over `expert`, batch over data x fsdp).",
              ""]
    if any(r.get("model") == PREVIEW for r in rows):
        lines += ["\\* Compiled before the two options were in `policy/model.py`, with",
                  "`aot.proposed_model_patch`, a since-removed preview that inserted the same",
                  "`with_sharding_constraint` and `jax.checkpoint` at the same places of `_trunk`",
                  "(the same program). The colocated ones among them predate the KV cache moving",
                  "into the scan carry: their prefill / decode numbers may be high.", ""]
    notes = [f"- {r['preset']} on {r['topology']}, {r['placement']}: " + "; ".join(r["tried"])
             for r in rows if r.get("tried")]
    if notes:
        lines += ["Larger candidates that did not fit (per-chip peak) or were skipped:", "", *notes,
                  ""]
    if missing:
        lines += ["Not compiled yet (rerun the script): " + "; ".join(missing) + ".", ""]
    return "\n".join(lines)


def main(argv):
    del argv
    cache = {}
    if _CACHE.value and os.path.exists(_CACHE.value):
        with open(_CACHE.value) as f:
            cache = json.load(f)
    rows, missing = [], []
    for name in _PRESETS.value:
        for topology in _TOPOLOGIES.value:
            for placement in _PLACEMENTS.value:
                key = f"{name}|{topology}|{placement}"
                if key not in cache and _RENDER_ONLY.value:
                    missing.append(f"{name} on {topology}, {placement}")
                    continue
                if key not in cache or (cache[key].get("partial") and not _RENDER_ONLY.value):

                    def save(row, key=key):
                        cache[key] = row
                        if _CACHE.value:
                            with open(_CACHE.value, "w") as f:
                                json.dump(cache, f, indent=1)

                    _log(f"{key}")
                    save(run_case(name, topology, placement, save))
                rows.append(cache[key])
                with open(_OUT.value, "w") as f:
                    f.write(markdown(rows, missing))
    with open(_OUT.value, "w") as f:
        f.write(markdown(rows, missing))
    _log(f"wrote {_OUT.value}")


if __name__ == "__main__":
    app.run(main)
