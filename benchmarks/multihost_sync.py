"""One process of ``benchmarks/multihost.py``'s weight-sync rows (run by it, N at once).

The learner's parameters (the default run's model) FSDP-sharded over one device of every process
are made whole on each process's sampler by ``placement.sync_weights``, what the training loop
does after every learner step on several processes:

* ``colocated``: each process one device; the sampler reads the gathered copy where it lands;
* ``disaggregated``: each process two devices, the learner on the first of each, the sampler on
  the second (each process's own sampler mesh): the gather, then a local device-to-device put.

Side by side, the same bytes: ``ours`` (one all-gather per dtype of every leaf's blocks as a flat buffer,
``multihost.gather_whole``), ``per_leaf`` (the previous design: XLA's gathers, one per leaf), and
``raw`` (one flat float32 array sharded the same way through the same steps). Process 0 prints
one JSON line: seconds per sync (median of ``--reps``) and the ratios to raw.

    python benchmarks/multihost_sync.py --coordinator 127.0.0.1:PORT --processes N --process_id I \
        [--placement disaggregated]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--processes", type=int, required=True)
    ap.add_argument("--process_id", type=int, required=True)
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--placement", choices=["colocated", "disaggregated"], default="colocated")
    args = ap.parse_args()
    split = args.placement == "disaggregated"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={2 if split else 1}"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator, args.processes, args.process_id)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from agentjax.policy.model import init_params
    from agentjax.run import config as runconfig
    from agentjax.sharding import multihost, param_shardings
    from agentjax.sharding.placement import SyncStats, make_placement, sync_weights, tree_bytes
    from configs import default

    run = runconfig.parse(default.get_config())
    pl = make_placement(args.placement, {"fsdp": args.processes}, {"data": 1} if split else None)
    mesh = pl.learner_mesh
    host = jax.device_get(init_params(run.model, jax.random.key(0)))
    params = multihost.to_global(host, param_shardings(host, mesh, pl.rules))
    nbytes = tree_bytes(params)
    n = -(-nbytes // 4 // args.processes) * args.processes
    flat = jax.make_array_from_callback(
        (n,), NamedSharding(mesh, PartitionSpec("fsdp")), lambda i: np.ones(n, np.float32)[i]
    )
    sampler = pl.sampler_mesh.devices.flat[0] if split else None

    def previous(tree):  # XLA's gathers, one per leaf, then the same local put
        whole = jax.tree.map(lambda x: x.addressable_data(0), multihost._replicate(mesh)(tree))
        return jax.device_put(whole, sampler) if split else whole

    fns = {
        "sync_s": (lambda t: sync_weights(pl, t, None, 1, SyncStats()), params),
        "per_leaf_s": (previous, params),
        "raw_s": (previous, flat),
    }
    times = {k: [] for k in fns}
    for rep in range(args.reps + 1):  # interleaved, so that the machine's noise hits all three
        for k, (fn, tree) in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(tree))
            if rep:  # the first round compiles
                times[k].append(time.perf_counter() - t0)
    ours, per_leaf, raw = (statistics.median(times[k]) for k in fns)
    got = sync_weights(pl, params, None, 1, SyncStats())
    held = {d for x in jax.tree.leaves(got) for d in x.sharding.device_set}
    assert held == ({sampler} if split else {jax.local_devices()[0]}), held
    if args.process_id == 0:
        row = {
            "processes": args.processes,
            "placement": args.placement,
            "bytes": nbytes,
            "leaves": len(jax.tree.leaves(params)),
            "sync_s": ours,
            "per_leaf_s": per_leaf,
            "raw_s": raw,
            "ratio": ours / raw,
            "per_leaf_ratio": per_leaf / raw,
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
