"""One process of ``benchmarks/multihost.py``'s weight-sync row (run by it, N at once).

The learner's parameters (the default run's model) FSDP-sharded over every process's devices
are made whole on each process's sampler device by ``multihost.local_view`` (what the training
loop does after every learner step on several processes); the raw reference moves the same
bytes as one flat float32 array sharded the same way, through the same all-gather. Process 0
prints one JSON line: bytes, seconds per sync (median of ``--reps``) for both, and the ratio.

    python benchmarks/multihost_sync.py --coordinator 127.0.0.1:PORT --processes N --process_id I
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
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator, args.processes, args.process_id)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from agentjax.policy.model import init_params
    from agentjax.run import config as runconfig
    from agentjax.sharding import multihost, param_shardings
    from agentjax.sharding.placement import tree_bytes
    from agentjax.sharding.rules import ShardingRules
    from configs import default

    run = runconfig.parse(default.get_config())
    mesh = Mesh(np.array(jax.devices()).reshape(1, -1, 1), ("data", "fsdp", "tensor"))
    host = jax.device_get(init_params(run.model, jax.random.key(0)))
    params = multihost.to_global(host, param_shardings(host, mesh, ShardingRules()))
    nbytes = tree_bytes(params)
    n = -(-nbytes // 4 // jax.device_count()) * jax.device_count()
    flat = jax.make_array_from_callback(
        (n,), NamedSharding(mesh, PartitionSpec("fsdp")), lambda i: np.ones(n, np.float32)[i]
    )

    def timed(tree) -> float:
        out = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            jax.block_until_ready(multihost.local_view(tree))
            out.append(time.perf_counter() - t0)
        return statistics.median(out[1:])  # the first call compiles

    ours, raw = timed(params), timed(flat)
    if args.process_id == 0:
        row = {
            "processes": args.processes,
            "bytes": nbytes,
            "sync_s": ours,
            "raw_s": raw,
            "ratio": ours / raw,
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
