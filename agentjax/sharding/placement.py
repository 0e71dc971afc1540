"""Placement of learner and sampler: colocated (one mesh, the very same arrays) or disaggregated.

Disaggregated placement splits the devices into two disjoint sub-meshes; weight sync is a
resharding ``jax.device_put`` from the learner's shardings to the sampler's, timed and counted
in bytes, optionally only every ``sync_every`` learner steps (the sampler then runs on an older
version, which the trajectory's per-token versions record).

On several processes (``jax.distributed``) every process holds the same share of each mesh: the
learner takes the first ``n_learner / P`` devices of every process (one global mesh that spans
them all), and sampling is process-local: ``sampler_mesh`` is then each process's own mesh, on
its devices after the learner's. A sync gathers the learner's shards onto every process (one
collective, :func:`multihost.local_view`) and puts the whole copy on that process's sampler
mesh, while the sampler keeps decoding with the previous copy.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from agentjax.choice import Choice
from agentjax.sharding import multihost
from agentjax.sharding.mesh import make_mesh
from agentjax.sharding.rules import ShardingRules, param_shardings


class PlacementKind(Choice):
    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"


@dataclasses.dataclass(frozen=True)
class Placement:
    kind: PlacementKind
    learner_mesh: Mesh
    sampler_mesh: Mesh
    rules: ShardingRules
    sync_every: int = 1

    @property
    def colocated(self) -> bool:
        return self.kind is PlacementKind.COLOCATED


def make_placement(
    kind: str,
    learner_shape: Mapping[str, int],
    sampler_shape: Mapping[str, int] | None = None,
    *,
    rules: ShardingRules | None = None,
    sync_every: int = 1,
    devices: Sequence[jax.Device] | None = None,
    process: int | None = None,
) -> Placement:
    """Builds the meshes (:func:`split_devices` says which devices each takes); ``process``:
    whose sampler mesh, when the devices belong to several processes (default: this one)."""
    allowed = [k.value for k in PlacementKind]
    if kind not in allowed:
        raise ValueError(f"placement.kind={kind!r} is invalid; allowed values: {allowed}")
    if sync_every < 1:
        raise ValueError(f"placement.sync_every={sync_every} is invalid; must be >= 1")
    if kind != PlacementKind.COLOCATED and not sampler_shape:
        raise ValueError("placement.sampler_mesh is required for disaggregated placement")
    devices = list(jax.devices() if devices is None else devices)
    rules = ShardingRules() if rules is None else rules
    n_l = int(np.prod(list(learner_shape.values()) or [1]))
    n_s = 0 if kind == PlacementKind.COLOCATED else int(np.prod(list(sampler_shape.values()) or [1]))
    l_dev, s_dev = split_devices(devices, n_l, n_s, jax.process_index() if process is None else process)
    lm = make_mesh(learner_shape, l_dev)
    if kind == PlacementKind.COLOCATED:
        return Placement(PlacementKind.COLOCATED, lm, lm, rules, 1)
    return Placement(PlacementKind.DISAGGREGATED, lm, make_mesh(sampler_shape, s_dev), rules, sync_every)


def split_devices(devices: Sequence, n_learner: int, n_sampler: int, process: int) -> tuple[list, list]:
    """``(learner devices, sampler devices)``. One process: the first ``n_learner`` devices, then
    the next ``n_sampler``. Devices of P processes: the learner takes the first ``n_learner / P``
    devices of every process (process by process), the sampler ``n_sampler`` devices of process
    ``process`` after its learner's (each process samples on its own)."""
    by_process: dict[int, list] = {}
    for d in sorted(devices, key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(d.process_index, []).append(d)
    p = len(by_process)
    if n_learner % p:
        raise ValueError(
            f"the learner mesh's {n_learner} devices must split evenly over the {p} processes "
            f"(each holds the same share): pick a multiple of {p}"
        )
    k = n_learner // p
    if any(len(ds) < k + n_sampler for ds in by_process.values()):
        what = f"{n_learner} + {n_sampler}" if n_sampler else f"{n_learner}"
        each = f" ({k} + {n_sampler} on each of {p} processes)" if p > 1 else ""
        raise ValueError(f"placement needs {what} devices{each}, only {len(devices)} available")
    learner = [d for ds in by_process.values() for d in ds[:k]]
    return learner, by_process[process if p > 1 else next(iter(by_process))][k : k + n_sampler]


def tree_bytes(tree) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


@dataclasses.dataclass
class SyncStats:
    """Weight syncs onto the sampler mesh (disaggregated), and, on several processes, the
    all-gathers of the synced weights onto each process's sampler (``gather_*``)."""

    syncs: int = 0
    skipped: int = 0
    bytes: int = 0
    seconds: float = 0.0
    gathers: int = 0
    gather_bytes: int = 0
    gather_seconds: float = 0.0

    def gathered(self, nbytes: int, seconds: float) -> None:
        self.gathers += 1
        self.gather_bytes += nbytes
        self.gather_seconds += seconds


def sync_weights(placement: Placement, learner_params, sampler_params, step: int, stats: SyncStats):
    """Returns the sampler's parameters after learner step ``step``.

    Colocated: the learner's arrays themselves (a no-op, zero bytes). Disaggregated: a resharding
    transfer onto the sampler mesh every ``sync_every`` steps (blocked on, timed, bytes counted);
    otherwise the sampler keeps its previous copy. Several processes: the learner's shards are
    first gathered onto every process (``gather_*``; collective: every process calls this on the
    same steps), which colocated is the sampler's copy.
    """
    distributed = multihost.is_distributed()
    if placement.colocated and not distributed:
        return learner_params
    if not placement.colocated and sampler_params is not None and step % placement.sync_every:
        stats.skipped += 1
        return sampler_params
    if distributed:
        t0 = time.perf_counter()
        learner_params = jax.block_until_ready(multihost.local_view(learner_params))
        stats.gathered(tree_bytes(learner_params), time.perf_counter() - t0)
        if placement.colocated:
            return learner_params
    target = param_shardings(learner_params, placement.sampler_mesh, placement.rules)
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.device_put(learner_params, target))
    stats.seconds += time.perf_counter() - t0
    stats.syncs += 1
    stats.bytes += tree_bytes(learner_params)
    return out
