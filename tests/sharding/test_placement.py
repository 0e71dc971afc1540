"""Colocated placement shares arrays; disaggregated placement reshards onto disjoint devices."""

import jax
import numpy as np
import pytest

from agentjax.policy import init_params
from agentjax.sharding import shard_params
from agentjax.sharding.placement import SyncStats, make_placement, sync_weights, tree_bytes
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
