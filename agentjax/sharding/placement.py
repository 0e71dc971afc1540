"""Placement of learner and sampler: colocated (one mesh, the very same arrays) or disaggregated.

Disaggregated placement splits the devices into two disjoint sub-meshes; weight sync is a
resharding ``jax.device_put`` from the learner's shardings to the sampler's, timed and counted
in bytes, optionally only every ``sync_every`` learner steps (the sampler then runs on an older
version, which the trajectory's per-token versions record).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from agentjax.choice import Choice
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
) -> Placement:
    """Builds the meshes over the first devices. Disaggregated: the learner takes the first
    devices, the sampler the next ones."""
    allowed = [k.value for k in PlacementKind]
    if kind not in allowed:
        raise ValueError(f"placement.kind={kind!r} is invalid; allowed values: {allowed}")
    if sync_every < 1:
        raise ValueError(f"placement.sync_every={sync_every} is invalid; must be >= 1")
    devices = list(jax.devices() if devices is None else devices)
    rules = ShardingRules() if rules is None else rules
    n_l = int(np.prod(list(learner_shape.values()) or [1]))
    if kind == PlacementKind.COLOCATED:
        if n_l > len(devices):
            raise ValueError(f"placement.learner_mesh needs {n_l} devices, only {len(devices)} available")
        mesh = make_mesh(learner_shape, devices[:n_l])
        return Placement(PlacementKind.COLOCATED, mesh, mesh, rules, 1)
    if not sampler_shape:
        raise ValueError("placement.sampler_mesh is required for disaggregated placement")
    n_s = int(np.prod(list(sampler_shape.values()) or [1]))
    if n_l + n_s > len(devices):
        raise ValueError(
            f"disaggregated placement needs {n_l} + {n_s} devices, only {len(devices)} available"
        )
    lm = make_mesh(learner_shape, devices[:n_l])
    sm = make_mesh(sampler_shape, devices[n_l : n_l + n_s])
    return Placement(PlacementKind.DISAGGREGATED, lm, sm, rules, sync_every)


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
    otherwise the sampler keeps its previous copy.
    """
    if placement.colocated:
        return learner_params
    if sampler_params is not None and step % placement.sync_every:
        stats.skipped += 1
        return sampler_params
    target = param_shardings(learner_params, placement.sampler_mesh, placement.rules)
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.device_put(learner_params, target))
    stats.seconds += time.perf_counter() - t0
    stats.syncs += 1
    stats.bytes += tree_bytes(learner_params)
    return out
