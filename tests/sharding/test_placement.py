"""Colocated placement shares arrays; disaggregated placement reshards onto disjoint devices."""

import jax
import numpy as np
import pytest

from agentjax.policy import init_params
from agentjax.sharding import shard_params
from agentjax.sharding.placement import SyncStats, make_placement, split_devices, sync_weights, tree_bytes
from agentjax.testing.models import tiny_dense


@pytest.fixture(scope="module")
def params():
    return init_params(tiny_dense(), jax.random.key(0))


def test_colocated_is_a_noop(params):
    pl = make_placement("colocated", {"fsdp": 8})
    lp = shard_params(params, pl.learner_mesh, pl.rules)
    stats = SyncStats()
    sp = sync_weights(pl, lp, None, step=1, stats=stats)
    assert sp is lp  # the very same arrays
    assert stats.bytes == 0 and stats.syncs == 0


def test_disaggregated_disjoint_and_resharded(params):
    pl = make_placement("disaggregated", {"fsdp": 4}, {"tensor": 2, "data": 2}, sync_every=2)
    ldev = set(pl.learner_mesh.devices.flat)
    sdev = set(pl.sampler_mesh.devices.flat)
    assert not ldev & sdev and len(ldev) == 4 and len(sdev) == 4
    lp = shard_params(params, pl.learner_mesh, pl.rules)
    stats = SyncStats()
    sp = sync_weights(pl, lp, None, step=1, stats=stats)
    leaf = sp["layers"]["wq"]
    assert set(leaf.sharding.device_set) == sdev
    np.testing.assert_array_equal(np.asarray(leaf), np.asarray(params["layers"]["wq"]))
    assert stats.syncs == 1 and stats.bytes == tree_bytes(params) > 0 and stats.seconds > 0
    # step 3 is not a multiple of sync_every=2: the sampler keeps its copy.
    again = sync_weights(pl, lp, sp, step=3, stats=stats)
    assert again is sp and stats.skipped == 1 and stats.syncs == 1
    sync_weights(pl, lp, sp, step=4, stats=stats)
    assert stats.syncs == 2


def test_bad_placement_config():
    with pytest.raises(ValueError, match="placement.kind='split'.*colocated"):
        make_placement("split", {"fsdp": 8})
    with pytest.raises(ValueError, match="needs 8 \\+ 2 devices"):
        make_placement("disaggregated", {"fsdp": 8}, {"data": 2})
    with pytest.raises(ValueError, match="sync_every"):
        make_placement("disaggregated", {"fsdp": 4}, {"data": 4}, sync_every=0)


class _Dev:
    def __init__(self, process_index: int, id: int):
        self.process_index, self.id = process_index, id

    def __repr__(self):
        return f"p{self.process_index}d{self.id}"


@pytest.mark.parametrize("processes,per,n_l,n_s", [(2, 2, 2, 1), (2, 3, 4, 1), (4, 2, 4, 1), (3, 4, 6, 2)])
def test_several_processes_hold_the_same_share_of_each_mesh(processes, per, n_l, n_s):
    """The learner mesh spans every process (its first devices, process by process); each process
    samples on its own devices after its learner's, whatever order the devices come in."""
    devs = [_Dev(p, p * 10 + i) for p in range(processes) for i in range(per)]
    shuffled = [devs[i] for i in np.random.default_rng(per).permutation(len(devs))]
    k = n_l // processes
    for me in range(processes):
        learner, sampler = split_devices(shuffled, n_l, n_s, me)
        assert learner == [d for d in devs if d.id % 10 < k]  # process-major, then local order
        assert sampler == [d for d in devs if d.process_index == me and k <= d.id % 10 < k + n_s]
    with pytest.raises(ValueError, match=f"split evenly over the {processes} processes"):
        split_devices(devs, processes + 1, 0, 0)
    with pytest.raises(ValueError, match=f"\\({k} \\+ {per} on each of {processes} processes\\)"):
        split_devices(devs, n_l, per, 0)


def test_one_process_takes_the_first_devices_then_the_next():
    devs = [_Dev(0, i) for i in range(8)]
    assert split_devices(devs, 4, 2, 0) == (devs[:4], devs[4:6])
    assert split_devices(devs, 8, 0, 0) == (devs, [])
