"""Disaggregated weight sync vs a raw ``jax.device_put`` of the same pytree, side by side.

Issue 6 target: disaggregated weight sync time <= 1.5x a raw ``jax.device_put`` of the same bytes
between the same sub-meshes. On the 8 fake CPU devices the learner mesh is ``fsdp=4`` on devices
0-3 and the sampler mesh ``data=2, tensor=2`` on devices 4-7 (``make_placement``). For each model
the two transfers are interleaved (sync, raw, sync, raw, ...) so machine load hits both alike;
each row is the median (and p10/p90) over ``--reps`` transfers after ``--warmup`` untimed ones.

* ``sync_weights``: the whole call, timed from outside (target shardings, transfer, block).
* raw ``device_put``: the same learner arrays to the same target shardings, computed once
  beforehand, blocked on.

``stats_seconds_mean`` in the JSON is ``SyncStats.seconds / syncs``: the transfer alone as
``sync_weights`` times it (excluding its target-sharding computation), a mean over every call.

The target is checked on the main model (a few M parameters); the tiny model row shows the fixed
per-call overhead, where it matters most. Writes ``benchmarks/results/weight_sync.json``.

    python benchmarks/weight_sync.py [--reps 60] [--warmup 5]
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from agentjax.policy import ModelConfig, abstract_params  # noqa: E402
from agentjax.sharding import param_shardings, shard_params  # noqa: E402
from agentjax.sharding.placement import SyncStats, make_placement, sync_weights, tree_bytes  # noqa: E402
from agentjax.testing.models import tiny_dense  # noqa: E402

TARGET_RATIO = 1.5
LEARNER = {"fsdp": 4}
SAMPLER = {"data": 2, "tensor": 2}
MODELS = {
    "main (d512 L4 V4096)": ModelConfig(
        vocab_size=4096,
        d_model=512,
        n_layers=4,
        n_heads=8,
        n_kv_heads=4,
        head_dim=64,
        d_ff=1024,
        max_seq_len=512,
    ),
    "tiny (tiny_dense)": tiny_dense(),
}


def _random_params(config: ModelConfig, seed: int = 0):
    """Random values in the model's layout (numpy: no compilation, no init cost)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda s: jnp.asarray(0.02 * rng.standard_normal(s.shape, np.float32)), abstract_params(config)
    )


def _stats(ts: list[float]) -> dict[str, float]:
    a = np.asarray(ts)
    return {
        "median_s": float(np.median(a)),
        "p10_s": float(np.percentile(a, 10)),
        "p90_s": float(np.percentile(a, 90)),
    }


def bench(config: ModelConfig, reps: int, warmup: int) -> dict:
    pl = make_placement("disaggregated", LEARNER, SAMPLER)
    learner = shard_params(_random_params(config), pl.learner_mesh, pl.rules)
    jax.block_until_ready(learner)
    target = param_shardings(learner, pl.sampler_mesh, pl.rules)
    nbytes = tree_bytes(learner)

    def sync():
        return sync_weights(pl, learner, None, step=0, stats=stats)

    def raw():
        return jax.block_until_ready(jax.device_put(learner, target))

    stats = SyncStats()
    out = sync()  # correctness: same values, on the sampler's devices, with the sampler's specs
    leaf, want = out["layers"]["wq"], learner["layers"]["wq"]
    assert leaf.sharding == target["layers"]["wq"]
    assert set(leaf.sharding.device_set) == set(pl.sampler_mesh.devices.flat)
    np.testing.assert_array_equal(np.asarray(leaf), np.asarray(want))
    del out
    times = {"sync": [], "raw": []}
    for i in range(warmup + reps):
        order = (("sync", sync), ("raw", raw)) if i % 2 == 0 else (("raw", raw), ("sync", sync))
        for name, fn in order:
            t0 = time.perf_counter()
            res = fn()
            dt = time.perf_counter() - t0
            del res
            if i >= warmup:
                times[name].append(dt)
    s, r = _stats(times["sync"]), _stats(times["raw"])
    n_params = int(sum(x.size for x in jax.tree.leaves(learner)))
    return {
        "params": n_params,
        "bytes": nbytes,
        "leaves": len(jax.tree.leaves(learner)),
        "sync": {
            **s,
            "bytes_per_s": nbytes / s["median_s"],
            "stats_seconds_mean": stats.seconds / stats.syncs,
        },
        "raw_device_put": {**r, "bytes_per_s": nbytes / r["median_s"]},
        "ratio": s["median_s"] / r["median_s"],
        "syncs_counted": stats.syncs,
        "bytes_counted": stats.bytes,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "weight_sync.json"))
    args = ap.parse_args()
    rows = {name: bench(cfg, args.reps, args.warmup) for name, cfg in MODELS.items()}

    print(
        f"learner mesh {LEARNER} on devices 0-3 -> sampler mesh {SAMPLER} on devices 4-7 "
        f"({len(jax.devices())} fake CPU devices, jax {jax.__version__}); "
        f"median of {args.reps} (p10-p90)"
    )
    head = (
        f"{'model':22} {'params':>9} {'MB':>7} | {'sync_weights ms':>22} {'GB/s':>6} | "
        f"{'raw device_put ms':>22} {'GB/s':>6} | {'ratio':>6}"
    )
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        s, d = r["sync"], r["raw_device_put"]
        cell = lambda x: (
            f"{1e3 * x['median_s']:7.2f} ({1e3 * x['p10_s']:6.2f}-"  # noqa: E731
            f"{1e3 * x['p90_s']:6.2f})"
        )
        print(
            f"{name:22} {r['params']:9d} {r['bytes'] / 1e6:7.2f} | {cell(s):>22} "
            f"{s['bytes_per_s'] / 1e9:6.2f} | {cell(d):>22} {d['bytes_per_s'] / 1e9:6.2f} | "
            f"{r['ratio']:6.3f}"
        )
    main_name = next(iter(MODELS))
    ratio = rows[main_name]["ratio"]
    ok = ratio <= TARGET_RATIO
    print(
        f"target: sync_weights <= {TARGET_RATIO}x raw device_put ({main_name}): "
        f"{ratio:.3f}x -> {'PASS' if ok else 'FAIL'}"
    )

    result = {
        "benchmark": "weight_sync",
        "target": f"disaggregated sync time <= {TARGET_RATIO}x raw jax.device_put, same bytes, "
        "same sub-meshes",
        "target_model": main_name,
        "ratio": ratio,
        "pass": ok,
        "learner_mesh": LEARNER,
        "sampler_mesh": SAMPLER,
        "devices": f"{len(jax.devices())} x {jax.devices()[0].platform} (fake host devices)",
        "reps": args.reps,
        "warmup": args.warmup,
        "jax": jax.__version__,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m": os.getloadavg()[0],
        },
        "rows": rows,
        "unix_time": time.time(),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
