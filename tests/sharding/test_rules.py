"""Sharding on 8 fake CPU devices: specs per parameter, sharded == unsharded, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from agentjax.policy import forward, init_params
from agentjax.sharding import (
    ShardingError,
    ShardingRules,
    activation_sharding,
    make_mesh,
    param_shardings,
    shard_params,
)
from agentjax.testing.models import tiny_dense, tiny_moe


def test_the_suite_runs_on_eight_fake_devices():
    assert jax.device_count() == 8


def test_expected_partition_specs_dense():
    cfg = tiny_dense(tie_embeddings=False)
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    mesh = make_mesh({"fsdp": 2, "tensor": 4})
    sh = param_shardings(params, mesh, ShardingRules())
    lay = sh["layers"]
    assert sh["embed"].spec == P("tensor", "fsdp")
    assert sh["lm_head"].spec == P("fsdp", "tensor")
    assert sh["final_norm"].spec == P(None)
    assert lay["wq"].spec == P(None, "fsdp", "tensor")
    assert lay["wk"].spec == P(None, "fsdp", "tensor")
    assert lay["wo"].spec == P(None, "tensor", "fsdp")
    assert lay["w_gate"].spec == P(None, "fsdp", "tensor")
    assert lay["w_down"].spec == P(None, "tensor", "fsdp")
    assert lay["attn_norm"].spec == P(None, None)


def test_expected_partition_specs_moe_expert_axis():
    cfg = tiny_moe()
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    mesh = make_mesh({"fsdp": 2, "expert": 4})
    sh = param_shardings(params, mesh, ShardingRules())
    assert sh["layers"]["w_gate"].spec == P(None, "expert", "fsdp", None)
    assert sh["layers"]["router"].spec == P(None, "fsdp", None)


@pytest.mark.parametrize("cfg", [tiny_dense(), tiny_moe()], ids=["dense", "moe"])
@pytest.mark.parametrize("shape", [{"fsdp": 8}, {"data": 2, "fsdp": 2, "tensor": 2}], ids=["fsdp8", "d2f2t2"])
def test_sharded_forward_matches_unsharded(cfg, shape):
    params = init_params(cfg, jax.random.key(0))
    tok = jax.random.randint(jax.random.key(1), (8, 6), 0, cfg.vocab_size)
    pos = jnp.broadcast_to(jnp.arange(6), (8, 6))
    ref, _, _ = forward(params, tok, pos, config=cfg)
    mesh = make_mesh(shape)
    rules = ShardingRules()
    sp = shard_params(params, mesh, rules)
    assert sp["layers"]["wq"].sharding.spec == param_shardings(params, mesh, rules)["layers"]["wq"].spec
    tok_s = jax.device_put(tok, activation_sharding("tokens", mesh, rules, tok.shape))
    pos_s = jax.device_put(pos, activation_sharding("tokens", mesh, rules, pos.shape))
    out, _, _ = jax.jit(lambda p, t, q: forward(p, t, q, config=cfg))(sp, tok_s, pos_s)
    # float32; only reduction order changes under sharding.
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=1e-5)


def test_unknown_mesh_axis_names_param_and_axis():
    params = jax.eval_shape(lambda: init_params(tiny_dense(), jax.random.key(0)))
    mesh = make_mesh({"fsdp": 8})
    rules = ShardingRules().replace(heads="model")
    with pytest.raises(ShardingError, match=r"\['layers'\]\['w[oq]'\].*'model'"):
        param_shardings(params, mesh, rules)


def test_indivisible_dimension_names_param_and_axis():
    cfg = tiny_dense(vocab_size=66)
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    mesh = make_mesh({"tensor": 4, "fsdp": 2})
    with pytest.raises(ShardingError, match=r"\['embed'\].*66.*'vocab'.*tensor"):
        param_shardings(params, mesh, ShardingRules())


def test_unknown_logical_name_and_bad_mesh():
    mesh = make_mesh({"fsdp": 8})
    with pytest.raises(ShardingError, match="no rule"):
        ShardingRules({}).spec(("embed",), mesh=mesh)
    with pytest.raises(ValueError, match="needs 6 devices"):
        make_mesh({"fsdp": 3, "tensor": 2})
    with pytest.raises(ValueError, match="unknown mesh axes"):
        make_mesh({"model": 8})
