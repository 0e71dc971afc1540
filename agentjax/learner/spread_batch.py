"""A learner batch assembled on the devices from the rows each process holds (multi-process runs).

In a multi-process real-time run a finished trajectory stays on the process that sampled it
(:mod:`agentjax.sampling.spread`); the others hold its metadata
(:class:`~agentjax.trajectory.TrajectoryMeta`). Every process knows the whole batch's layout from
that metadata (which trajectory, how many rows, held by which process), so the batch is built
without moving a token through a host channel:

1. **Advantages** come from every member's reward (metadata), so a group is normalised as on one
   process.
2. **Staging**: each process packs its own trajectories' rows (:func:`make_batch` with those
   advantages) into the *slots* of a staging array that its own devices hold (a global array of
   the learner mesh's batch sharding, built with ``make_array_from_callback``: each process
   fills only its addressable shards). Every process has room for a whole batch plus one
   all-padding row, so any split of the batch fits.
3. **Gather**: one jitted ``take`` with the (replicated) source-slot index moves each row to its
   place in the batch, in the batch's order: the same arrays, bitwise, as one process running
   :func:`make_batch` over every trajectory. XLA moves the rows over the device interconnect.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from agentjax.learner.batching import make_batch, trajectory_advantages
from agentjax.trajectory import Trajectory, TrajectoryMeta, meta_of

DATA_AXES = ("data", "fsdp")


def holder(t: Trajectory, me: int) -> int:
    """The process that holds ``t``'s rows: its metadata says so; a full trajectory is ours."""
    return t.process if isinstance(t, TrajectoryMeta) else me


def _axes(mesh) -> tuple[str, ...]:
    return tuple(a for a in DATA_AXES if mesh.shape.get(a, 1) > 1)


def batch_spec(mesh, ndim: int) -> PartitionSpec:
    """The batch's split (as :func:`~agentjax.sharding.multihost.shard_batch`): rows over the
    mesh's data-parallel axes."""
    axes = _axes(mesh)
    return PartitionSpec(axes if axes else None, *([None] * (ndim - 1)))


def slots(
    mesh, rows: int, process_of: Callable = lambda d: d.process_index
) -> tuple[int, dict[int, list[int]]]:
    """``(staging rows, {process: its slots})``: a staging array split like the batch over the
    mesh's data axes, with at least ``rows + 1`` slots on every process's devices."""
    split = int(np.prod([mesh.shape[a] for a in _axes(mesh)]))
    probe = NamedSharding(mesh, batch_spec(mesh, 1)).devices_indices_map((split,))
    owners: dict[int, set[int]] = {}
    for d, idx in probe.items():
        owners.setdefault(idx[0].start or 0, set()).add(process_of(d))
    if any(len(o) > 1 for o in owners.values()):
        raise ValueError("a batch shard lies on several processes' devices (a tensor axis across hosts)")
    per_process: dict[int, list[int]] = {}
    for k, o in sorted(owners.items()):
        per_process.setdefault(o.pop(), []).append(k)
    per_slice = -(-(rows + 1) // min(len(v) for v in per_process.values()))
    out = {p: [k * per_slice + j for k in ks for j in range(per_slice)] for p, ks in per_process.items()}
    return split * per_slice, out


def plan(trajs: Sequence[Trajectory], me: int, rows: int, process_slots: dict[int, list[int]]) -> np.ndarray:
    """The staging slot of each of the batch's ``rows`` rows (the same on every process): row
    ``r`` of trajectory ``i`` sits at its holder's next free slot; padding rows read an
    all-padding slot (process 0's last)."""
    src, used = [], dict.fromkeys(process_slots, 0)
    for t in trajs:
        p = holder(t, me)
        n = len(meta_of(t).row_sizes)
        src += process_slots[p][used[p] : used[p] + n]
        used[p] += n
    if len(src) > rows:
        raise ValueError(f"batch needs more than {rows} rows; raise learner rows")
    pad = process_slots[min(process_slots)][-1]
    return np.asarray(src + [pad] * (rows - len(src)), np.int32)


def stage(
    trajs: Sequence[Trajectory],
    weights: Sequence[float],
    *,
    rows: int,
    length: int,
    advantage: str,
    rewards: Sequence[float],
    mesh,
    me: int,
    process_of: Callable = lambda d: d.process_index,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """``(local, staged, src)``: this process's rows (host arrays), the staging arrays with them
    in this process's slots (zeros elsewhere) and the source slot of every batch row."""
    adv = trajectory_advantages(rewards, [t.task_id for t in trajs], advantage)
    mine = [i for i, t in enumerate(trajs) if holder(t, me) == me]
    size, process_slots = slots(mesh, rows, process_of)
    local, _ = make_batch(
        [trajs[i] for i in mine],
        [weights[i] for i in mine],
        rows=len(process_slots[me]),
        length=length,
        advantages=[adv[i] for i in mine],
    )
    staged = {}
    for k, block in local.items():
        staged[k] = np.zeros((size, *block.shape[1:]), block.dtype)
        staged[k][process_slots[me]] = block
    return local, staged, plan(trajs, me, rows, process_slots)


def assemble(staged: dict[str, np.ndarray], src: np.ndarray, mesh) -> dict[str, jax.Array]:
    """The batch as global arrays split over ``mesh``'s data axes: each process contributes its
    addressable shards of ``staged``; one jitted take per array puts every row in its place."""
    index = jax.make_array_from_callback(src.shape, NamedSharding(mesh, PartitionSpec()), lambda i: src[i])
    out = {}
    for k, host in staged.items():
        sharding = NamedSharding(mesh, batch_spec(mesh, host.ndim))
        arr = jax.make_array_from_callback(host.shape, sharding, lambda i, h=host: h[i])
        out[k] = _take(sharding)(arr, index)
    return out


def spread_batch(trajs, weights, *, rows, length, advantage, rewards, mesh):
    """``(local, arrays, metrics)``: this process's rows (host arrays, for checks), the batch as
    global arrays over ``mesh`` (:func:`stage`, :func:`assemble`) and the whole batch's metrics."""
    local, staged, src = stage(
        trajs, weights, rows=rows, length=length, advantage=advantage, rewards=rewards, mesh=mesh,
        me=jax.process_index(),
    )  # fmt: skip
    return local, assemble(staged, src, mesh), batch_metrics(trajs, rewards, length)


@functools.cache
def _take(sharding: NamedSharding):
    return jax.jit(lambda staged, index: staged[index], out_shardings=sharding)


def batch_metrics(trajs: Sequence[Trajectory], rewards: Sequence[float], length: int) -> dict[str, float]:
    """:func:`make_batch`'s metrics from every trajectory's metadata (the rows may be elsewhere)."""
    metas = [meta_of(t) for t in trajs]
    groups: dict[str, list] = {}
    for t in metas:
        groups.setdefault(t.task_id, []).append(t.final_reward)
    acted = [t.version_min for t in metas if t.action_tokens]
    return {
        "batch/rows": float(sum(len(t.row_sizes) for t in metas)),
        "batch/reward_mean": float(np.mean(rewards)) if len(rewards) else 0.0,
        "batch/groups": float(len(groups)),
        "batch/singleton_groups": float(sum(len(v) == 1 for v in groups.values())),
        "batch/all_same_groups": float(sum(len(set(v)) == 1 for v in groups.values())),
        "batch/truncated_tokens": float(sum(max(n - length, 0) for t in metas for n in t.row_sizes)),
        "batch/action_tokens": float(sum(t.action_tokens for t in metas)),
        "batch/completion_tokens_mean": float(np.mean([t.action_tokens for t in metas])) if metas else 0.0,
        "batch/version_min": float(min(acted)) if acted else -1.0,
    }
