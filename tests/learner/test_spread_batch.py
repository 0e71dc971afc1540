"""A learner batch assembled from process-local rows equals one process's batch, bitwise.

The processes are simulated on the 8 CPU devices: a device's "process" is given by a mapping, each
simulated process stages only the trajectories it holds (the others are metadata), the staged
arrays are the union of the processes' shards, and one jitted take assembles the batch.
"""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from agentjax.learner.batching import make_batch
from agentjax.learner.spread_batch import assemble, batch_metrics, slots, stage
from agentjax.sharding.multihost import shard_batch
from agentjax.trajectory import StopReason, Trajectory, Turn, meta_of


def _traj(rng, task_id: str, reward: float, split_turns: bool) -> Trajectory:
    turns, ctx = [], rng.integers(1, 50, size=int(rng.integers(2, 5))).astype(np.int32)
    for _ in range(int(rng.integers(1, 4))):
        n = int(rng.integers(1, 6))
        act = rng.integers(1, 50, size=n).astype(np.int32)
        obs = rng.integers(1, 50, size=int(rng.integers(1, 3))).astype(np.int32)
        logp = rng.normal(size=n).astype(np.float32)
        turns.append(Turn(ctx, act, logp, logp, rng.integers(0, 3, size=n).astype(np.int32), obs))
        # a rewritten context makes each turn its own row (to_rows)
        ctx = ctx[:2] if split_turns else np.concatenate([ctx, act, obs])
    return Trajectory(task_id, "default", turns, StopReason.FINISHED, final_reward=reward, label="pass")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("processes", [1, 2, 4])
def test_rows_staged_on_their_holders_assemble_into_one_process_batch(seed, processes):
    rng = np.random.default_rng(seed)
    devices = np.array(jax.devices()[:8])
    mesh = Mesh(devices.reshape(2, 4) if seed % 2 else devices.reshape(1, 8), ("data", "fsdp"))
    process_of = lambda d: d.id % processes  # noqa: E731 - interleaved, not contiguous, on purpose
    trajs = [
        _traj(rng, f"g{int(rng.integers(0, 3))}", float(rng.integers(0, 2)), bool(rng.integers(0, 2)))
        for _ in range(int(rng.integers(3, 7)))
    ]
    holders = rng.integers(0, processes, size=len(trajs))
    weights = rng.uniform(0.5, 1.0, size=len(trajs)).tolist()
    rewards = [t.final_reward for t in trajs]
    rows, length = 24, 32
    want, want_m = make_batch(trajs, weights, rows=rows, length=length, rewards=rewards)

    staged, srcs = None, []
    for me in range(processes):  # each process sees its own trajectories whole, the rest as metadata
        view = [t if h == me else meta_of(t, int(h)) for t, h in zip(trajs, holders, strict=True)]
        _, mine, src = stage(
            view, weights, rows=rows, length=length, advantage="group_std", rewards=rewards,
            mesh=mesh, me=me, process_of=process_of,
        )  # fmt: skip
        staged = mine if staged is None else {k: staged[k] + mine[k] for k in staged}
        srcs.append(src)
    assert all(np.array_equal(s, srcs[0]) for s in srcs)  # every process plans the same batch
    got = assemble(staged, srcs[0], mesh)
    ref = shard_batch(want, mesh)
    assert set(got) == set(want)
    for k in want:
        assert got[k].sharding.is_equivalent_to(ref[k].sharding, want[k].ndim), k
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=k)
    m = batch_metrics([meta_of(t) for t in trajs], rewards, length)
    for k in (
        "batch/rows",
        "batch/groups",
        "batch/action_tokens",
        "batch/truncated_tokens",
        "batch/reward_mean",
    ):
        assert m[k] == pytest.approx(want_m[k]), k


def test_every_process_has_room_for_a_whole_batch():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "fsdp"))
    size, per = slots(mesh, 10, lambda d: d.id // 2)
    assert sorted(per) == [0, 1, 2, 3]
    assert all(len(v) >= 11 for v in per.values())
    assert sorted(s for v in per.values() for s in v) == list(range(size))  # disjoint, all used
