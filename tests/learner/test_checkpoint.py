"""Checkpoint I/O: sharded save, restore onto other meshes, keep-last-N, atomicity, clear errors."""

import logging
import os
import shutil

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agentjax.learner.checkpoint import (
    CheckpointError,
    all_steps,
    latest_step,
    restore_checkpoint,
    save_checkpoint,
    saved_arrays,
)
from agentjax.policy import abstract_params
from agentjax.sharding import ShardingRules, make_mesh, param_shardings, shard_params
from agentjax.testing.models import tiny_dense

CONFIG = tiny_dense()


@pytest.fixture(scope="module")
def params():
    """Random values in the model's parameter layout (numpy: no compilation needed)."""
    rng = np.random.default_rng(0)
    return jax.tree.map(
        lambda s: jnp.asarray(rng.standard_normal(s.shape, np.float32)), abstract_params(CONFIG)
    )


def _assert_tree_equal(a, b):
    chex.assert_trees_all_equal(a, b)


def test_save_fsdp8_restore_onto_other_meshes(params, tmp_path):
    saved = shard_params(params, make_mesh({"fsdp": 8}))
    path = save_checkpoint(tmp_path, 7, {"params": saved})
    assert path == tmp_path / "7" and latest_step(tmp_path) == 7
    # Sharded layout: each device wrote its own [2, 32/8, 32] chunk of wq.
    info = saved_arrays(tmp_path)["['params']['layers']['wq']"]
    assert info == {"shape": (2, 32, 32), "dtype": "float32", "chunk_shape": (2, 4, 32)}

    target = {"params": abstract_params(CONFIG)}
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    shardings = {"params": param_shardings(target["params"], mesh, ShardingRules())}
    state, meta, step = restore_checkpoint(tmp_path, target, shardings=shardings)
    assert (meta, step) == ({}, 7)
    got = state["params"]["layers"]["wq"]
    assert got.sharding == shardings["params"]["layers"]["wq"]
    assert got.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")
    assert got.addressable_shards[0].data.shape == (2, 16, 16)
    _assert_tree_equal(state["params"], params)

    # Onto one device, from the saved metadata alone (no target) and from an explicit target.
    whole, _, _ = restore_checkpoint(tmp_path)
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    assert whole["params"]["embed"].sharding == one
    _assert_tree_equal(whole["params"], params)
    state1, _, _ = restore_checkpoint(tmp_path, target, shardings=jax.tree.map(lambda _: one, target))
    assert state1["params"]["layers"]["w_down"].sharding == one
    _assert_tree_equal(state1["params"], params)


def test_full_train_state_round_trip(params, tmp_path):
    """Optimizer NamedTuples, a typed PRNG key, scalars and JSON metadata survive unchanged."""
    opt = optax.adamw(1e-2)
    grads = jax.tree.map(jnp.ones_like, params)
    # non-trivial moments and count (jitted: one compile instead of one per op)
    opt_state = jax.jit(lambda p, g: opt.update(g, opt.init(p), p)[1])(params, grads)
    state = {"params": params, "opt": opt_state, "rng": jax.random.key(42), "step": jnp.asarray(3, jnp.int32)}
    meta = {"data_iter": {"epoch": 1, "index": 17}, "queue": [{"task": "t1", "version": 2}]}
    save_checkpoint(tmp_path, 3, state, metadata=meta)
    target = jax.tree.map(lambda x: x, state)  # same structure; leaves give shape/dtype/sharding
    got, got_meta, step = restore_checkpoint(tmp_path, target)
    assert step == 3 and got_meta == meta
    assert jax.tree.structure(got) == jax.tree.structure(state)
    assert isinstance(got["opt"][0], optax.ScaleByAdamState)
    assert int(got["opt"][0].count) == 1
    _assert_tree_equal(got["opt"], opt_state)
    np.testing.assert_array_equal(jax.random.key_data(got["rng"]), jax.random.key_data(state["rng"]))
    np.testing.assert_array_equal(
        jax.random.uniform(got["rng"], (3,)), jax.random.uniform(state["rng"], (3,))
    )


def test_keep_last_n_and_unfinished_saves(tmp_path):
    state = {"x": jnp.arange(4.0)}
    assert latest_step(tmp_path / "none") is None and all_steps(tmp_path) == []
    for s in (1, 2, 3, 4):
        save_checkpoint(tmp_path, s, {"x": state["x"] + s}, keep=2)
    assert all_steps(tmp_path) == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]
    # A crash mid-save leaves only orbax's temporary directory: it is not a checkpoint.
    shutil.copytree(tmp_path / "4", tmp_path / "5.orbax-checkpoint-tmp-1700000000")
    assert latest_step(tmp_path) == 4
    got = restore_checkpoint(tmp_path, state)
    assert got.step == 4
    np.testing.assert_array_equal(got.state["x"], [4.0, 5.0, 6.0, 7.0])
    assert restore_checkpoint(tmp_path, state, step=3).state["x"][0] == 3.0


def test_missing_checkpoint_is_an_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist") as e:
        restore_checkpoint(tmp_path / "run1")
    assert str(tmp_path / "run1") in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        restore_checkpoint(tmp_path / "empty")
    save_checkpoint(tmp_path / "run", 2, {"x": jnp.zeros(3)})
    with pytest.raises(CheckpointError, match=r"run/5 is not a complete checkpoint.*\[2\]"):
        restore_checkpoint(tmp_path / "run", step=5)


def test_corrupt_or_mismatched_checkpoint_is_an_error(tmp_path):
    state = {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.ones(4)}
    save_checkpoint(tmp_path, 1, state)
    with pytest.raises(CheckpointError, match=r"/1: .*shape"):
        restore_checkpoint(tmp_path, {**state, "w": jax.ShapeDtypeStruct((3, 5), jnp.float32)})
    with pytest.raises(CheckpointError, match=r"/1: .*tree structures do not match"):
        restore_checkpoint(tmp_path, {"w": state["w"]})
    for f in (tmp_path / "1" / "state").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=f"cannot restore {tmp_path / '1'}"):
        restore_checkpoint(tmp_path, state)


def test_save_refuses_to_overwrite_and_names_unserialisable_metadata(tmp_path):
    save_checkpoint(tmp_path, 1, {"x": jnp.zeros(2)})
    with pytest.raises(CheckpointError, match="already exists"):
        save_checkpoint(tmp_path, 1, {"x": jnp.ones(2)})
    with pytest.raises(CheckpointError, match="JSON"):
        save_checkpoint(tmp_path, 2, {"x": jnp.zeros(2)}, metadata={"bad": object()})
    with pytest.raises(CheckpointError, match="keep=0"):
        save_checkpoint(tmp_path, 2, {"x": jnp.zeros(2)}, keep=0)
    assert all_steps(tmp_path) == [1]
    np.testing.assert_array_equal(restore_checkpoint(tmp_path, {"x": jnp.zeros(2)}).state["x"], [0.0, 0.0])


def _tiny_tmpfs(path, size="64k"):
    """A size-limited tmpfs at ``path`` (a real full disk), or None where mounting is not allowed."""
    import subprocess

    os.makedirs(path, exist_ok=True)
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return path if out.returncode == 0 else None


def test_full_disk_save_is_one_checkpoint_error(tmp_path, capfd, caplog):
    """A disk that fills mid-save: one CheckpointError naming the step and the cause, no
    committed step, and not pages of orbax/asyncio noise on stderr."""
    import subprocess

    disk = _tiny_tmpfs(tmp_path / "disk")
    if disk is None:
        pytest.skip("cannot mount a tmpfs here (the monkeypatched test below still runs)")
    try:
        match = r"cannot save .*/3: No space left on device \(ValueError: RESOURCE_EXHAUSTED"
        with pytest.raises(CheckpointError, match=match):
            noise = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
            save_checkpoint(disk, 3, {"x": jnp.asarray(noise)})  # 2 MiB, incompressible
        assert all_steps(disk) == []
        err = capfd.readouterr().err
        assert err.count("\n") < 5, err[-3000:]
        noise = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not noise, noise[0].getMessage()[:500]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_failing_save_is_one_checkpoint_error(tmp_path, monkeypatch):
    import errno

    import orbax.checkpoint as ocp

    def full(self, *a, **k):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("tensorstore write failed: " + "x" * 2000) from e

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(tmp_path, 5, {"x": jnp.zeros(4)})
    msg = str(info.value)
    assert "cannot save" in msg and "/5" in msg and "No space left on device" in msg
    assert len(msg) < 500 and "\n" not in msg
