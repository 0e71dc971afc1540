"""Multi-process (multi-host) helpers: global arrays from host data, local views, checksums.

With ``jax.distributed`` every process runs the same program; arrays that span devices of
several processes are built from host data with ``make_array_from_callback`` (each process fills
its own shards). The sampler and the environments are host-local: they read a process-local copy
of fully replicated parameters (``local_view``).
"""

from __future__ import annotations

import hashlib

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def is_multiprocess() -> bool:
    return jax.process_count() > 1


def to_global(tree, shardings):
    """Host values -> global arrays with ``shardings`` (one sharding or a matching pytree)."""
    if not isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x, s: to_global(x, s), tree, shardings)

    def one(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, shardings, lambda idx: host[idx])

    return jax.tree.map(one, tree)


def replicate(tree, mesh: Mesh):
    """Every leaf fully replicated over ``mesh`` (host data identical on every process)."""
    return to_global(jax.device_get(tree), NamedSharding(mesh, PartitionSpec()))


def shard_batch(batch: dict, mesh: Mesh, axes=("data", "fsdp")):
    """Splits each array's leading (batch) dimension over the mesh's data-parallel axes."""
    axes = tuple(a for a in axes if mesh.shape.get(a, 1) > 1)
    spec = lambda x: PartitionSpec(axes if axes else None, *([None] * (np.ndim(x) - 1)))
    return {k: to_global(v, NamedSharding(mesh, spec(v))) for k, v in batch.items()}


def local_view(tree):
    """A process-local copy of fully replicated global arrays (identity in a single process)."""
    if not is_multiprocess():
        return tree

    def one(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if not x.sharding.is_fully_replicated:
            raise ValueError(f"local_view needs replicated arrays; got sharding {x.sharding}")
        return x.addressable_data(0)

    return jax.tree.map(one, tree)


def checksum(tree) -> str:
    """sha256 of every leaf's bytes (process-local view): equal across processes iff equal."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(local_view(tree)):
        h.update(np.ascontiguousarray(np.asarray(x)).tobytes())
    return h.hexdigest()
