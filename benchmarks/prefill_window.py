"""The sampler's prefill compiled for TPU with the window aligned (``sampler.WINDOW_ALIGN = 16``,
ours) and unaligned (``1``: the tokens plus the pending one, the previous design), side by side:
compile seconds, host memory of the compile (peak RSS of a fresh process per variant) and the
program's peak per chip. No TPU needed (libtpu compiles for an abstract topology).

    python benchmarks/prefill_window.py --topology=v5p:4x4x4 --mode=exact_pallas_bf16 \\
        --prompt=16384 --cache=32768 --layers=2             # docs/pod_fit.md, 32k rows
    python benchmarks/prefill_window.py --topology=v5e:16x16 --mode=exact_pallas_bf16 \\
        --prompt=1024 --cache=4096 --batch_per_shard=16     # compile_check's default sampler

Disaggregated placement: the sampler on its half of the slice (``aot.disaggregated_devices``)
with ``--mesh`` (default data x tensor8); ``--colocated``: the learner's fsdp mesh on every
chip, with the learner's optimizer state resident (as ``compile_check`` counts it).
Writes ``benchmarks/results/prefill_window_<topology>_<mode>_<prompt>.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

_TOPOLOGY = flags.DEFINE_string("topology", "v5p:4x4x4", "TPU topology")
_PRESET = flags.DEFINE_string("preset", "qwen3_8b", "model preset")
_MODE = flags.DEFINE_string("mode", "exact_pallas_bf16", "programs.MODES")
_PROMPT = flags.DEFINE_integer("prompt", 16384, "prompt tokens per sequence")
_CACHE = flags.DEFINE_integer("cache", 32768, "cache slots per sequence")
_PER = flags.DEFINE_integer("batch_per_shard", 4, "sequences per batch shard")
_LAYERS = flags.DEFINE_integer("layers", 0, "layers to compile (0: the preset's)")
_MESH = flags.DEFINE_string("mesh", "data:-1,tensor:8", "disaggregated sampler mesh")
_COLOCATED = flags.DEFINE_bool("colocated", False, "the learner's fsdp mesh on every chip")
_ALIGN = flags.DEFINE_integer("align", 0, "internal: compile one variant with this alignment")


def _one(align: int) -> dict:
    """Compiles the prefill with ``WINDOW_ALIGN = align`` in this process."""
    from agentjax.podcheck import aot, programs
    from agentjax.policy import pallas_kernels
    from agentjax.policy.presets import preset
    from agentjax.sampling import sampler
    from agentjax.sharding.rules import ShardingRules

    sampler.WINDOW_ALIGN = align
    rules = ShardingRules()
    cfg = programs.mode_config(aot.pod_config(preset(_PRESET.value), rules), _MODE.value)
    if _LAYERS.value:
        cfg = cfg.replace(n_layers=_LAYERS.value)
    devices = aot.topology_devices(_TOPOLOGY.value)
    p_sh, resident = None, 0
    if _COLOCATED.value:
        mesh = aot.topology_mesh(devices, {"fsdp": -1})
        params = aot.abstract_params(cfg)
        p_sh = aot.param_shardings(params, mesh, rules, aot.logical_axes(cfg))
        resident = aot.learner_resident_bytes(params, p_sh, mesh)
    else:
        spec = {k: int(v) for k, v in (kv.split(":") for kv in _MESH.value.split(","))}
        mesh = aot.topology_mesh(aot.disaggregated_devices(_TOPOLOGY.value)[1], spec)
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    work = aot.Workload(sample_batch=shards * _PER.value, prompt_len=_PROMPT.value, cache_len=_CACHE.value)
    with pallas_kernels.interpret_mode(False):
        pre, _ = aot.compile_sampler(cfg, mesh, rules, work, param_sh=p_sh, resident_bytes=resident)
    hwm = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1)) * 1024
    return {
        "align": align,
        "rows_per_sequence": sampler.window_rows(_PROMPT.value),
        "compile_s": round(pre.compile_seconds, 1),
        "host_peak_gib": round(hwm / 2**30, 2),
        "prefill_peak_gib": round(pre.peak_bytes / 2**30, 2),
        "fits": pre.fits,
        "mesh": dict(mesh.shape),
        "batch": work.sample_batch,
        "layers": cfg.n_layers,
    }


def main(argv):
    del argv
    if _ALIGN.value:
        print("RESULT " + json.dumps(_one(_ALIGN.value)), flush=True)
        return
    rows = []
    for align in (1, 16):  # previous design, ours
        start = time.perf_counter()
        cmd = [sys.executable, os.path.abspath(__file__), f"--align={align}", *sys.argv[1:]]
        out = subprocess.run(cmd, capture_output=True, text=True)
        found = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        row = json.loads(found[-1][7:]) if found else {"align": align, "error": out.stderr[-2000:]}
        row["wall_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(row, flush=True)
    old, new = rows
    print(f"\n{_PRESET.value} {_MODE.value} prefill on {_TOPOLOGY.value}, prompt {_PROMPT.value}")
    print("| window | rows/seq | compile s | host GiB | prefill GiB/chip | fits |")
    print("|---|---|---|---|---|---|")
    for name, r in (("unaligned (before)", old), ("aligned to 16 (ours)", new)):
        if "error" in r:
            print(f"| {name} | - | failed: {r['error'].splitlines()[-1] if r['error'] else '?'} | | | |")
            continue
        print(
            f"| {name} | {r['rows_per_sequence']} | {r['compile_s']} | {r['host_peak_gib']} | "
            f"{r['prefill_peak_gib']} | {r['fits']} |"
        )
    if "error" not in old and "error" not in new:
        print(
            f"ratio ours / before: compile {new['compile_s'] / old['compile_s']:.2f}x, host memory "
            f"{new['host_peak_gib'] / old['host_peak_gib']:.2f}x"
        )
    name = f"prefill_window_{_TOPOLOGY.value.replace(':', '_')}_{_MODE.value}_{_PROMPT.value}"
    if _LAYERS.value:
        name += f"_{_LAYERS.value}layers"
    if _COLOCATED.value:
        name += "_colocated"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name + ".json")
    with open(path, "w") as f:
        json.dump({"argv": sys.argv[1:], "rows": rows}, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
