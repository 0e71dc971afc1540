"""Accounting of agentjax.podcheck.aot that needs no TPU compiler: meshes, HLO parsing, bytes."""

import jax
import pytest

from agentjax.podcheck import aot
from agentjax.policy import abstract_params
from agentjax.policy.presets import n_params, preset
from agentjax.sharding.rules import ShardingRules, param_shardings
from agentjax.testing.models import tiny_dense

# tiny_dense: embed 64x32 = 2048; per layer 2x32 norms + wq 32x32 + wk, wv 32x16 + wo 32x32
# + 3 x 32x64 mlp = 9280; 2 layers; final norm 32 -> 20640 float32 parameters.
TINY_PARAMS = 2048 + 2 * 9280 + 32


def test_resolve_mesh_shape_fills_one_axis():
    assert aot.resolve_mesh_shape({"fsdp": -1, "tensor": 2}, 8) == {
        "data": 1,
        "fsdp": 4,
        "tensor": 2,
        "expert": 1,
    }
    assert aot.resolve_mesh_shape({"data": 2, "expert": 4}, 8)["fsdp"] == 1
    with pytest.raises(ValueError, match="at most one"):
        aot.resolve_mesh_shape({"fsdp": -1, "data": -1}, 8)
    with pytest.raises(ValueError, match="not divisible"):
        aot.resolve_mesh_shape({"fsdp": -1, "tensor": 3}, 8)
    with pytest.raises(ValueError, match="needs 4 devices"):
        aot.resolve_mesh_shape({"tensor": 4}, 8)


def test_split_devices_disjoint():
    learner, sampler = aot.split_devices(list(range(8)))
    assert learner == [0, 1, 2, 3] and sampler == [4, 5, 6, 7]
    learner, sampler = aot.split_devices(list(range(8)), n_sampler=2)
    assert learner == list(range(6)) and sampler == [6, 7]
    with pytest.raises(ValueError):
        aot.split_devices(list(range(8)), n_sampler=8)


HLO = """
  %all-gather-start.1 = (f32[4,8]{1,0}, f32[16,8]{1,0}) all-gather-start(f32[4,8]{1,0} %p), dims={0}
  %all-gather-done.1 = f32[16,8]{1,0} all-gather-done(%all-gather-start.1)
  %all-reduce.2 = f32[1024]{0} all-reduce(f32[1024]{0} %all-gather-done.1), to_apply=%add
  %reduce-scatter = bf16[2,512]{1,0} reduce-scatter(bf16[8,512]{1,0} %x), dimensions={0}
  %all-reduce.3 = f32[] all-reduce(f32[] %y), to_apply=%add
  %fusion.7 = f32[64,128]{1,0:T(8,128)} fusion(f32[64,128]{1,0} %z), kind=kLoop
  %p = f32[4,8]{1,0} parameter(0)
"""


def test_count_collectives_counts_each_instruction_once():
    assert aot.count_collectives(HLO) == {
        "all-reduce": 2,
        "all-gather": 1,
        "reduce-scatter": 1,
        "all-to-all": 0,
        "collective-permute": 0,
    }


def test_largest_hlo_values_by_bytes():
    top = aot.largest_hlo_values(HLO, 2)
    assert top == [
        ("fusion.7 = f32[64,128] fusion", 64 * 128 * 4),
        ("all-reduce.2 = f32[1024] all-reduce", 4096),
    ]


def _meshes():
    devs = jax.devices()
    assert len(devs) == 8, "tests/conftest.py forces 8 CPU devices"
    learner, sampler = aot.split_devices(devs)
    return aot.topology_mesh(learner, {"fsdp": -1}), sampler


def test_weight_sync_bytes_replicated_sampler():
    params = abstract_params(tiny_dense())
    l_mesh, s_dev = _meshes()
    rules = ShardingRules()
    l_sh = param_shardings(params, l_mesh, rules)
    s_sh = param_shardings(params, aot.topology_mesh(s_dev, {"data": 4}), rules)
    w = aot.weight_sync_bytes(params, l_sh, s_sh)
    assert w["unique"] == TINY_PARAMS * 4
    assert w["received_per_chip"] == TINY_PARAMS * 4  # every sampler chip holds a full copy
    assert w["total"] == 4 * TINY_PARAMS * 4
    assert w["sent_per_learner_chip"] == TINY_PARAMS * 4


def test_weight_sync_bytes_tensor_parallel_sampler():
    params = abstract_params(tiny_dense())
    l_mesh, s_dev = _meshes()
    rules = ShardingRules()
    l_sh = param_shardings(params, l_mesh, rules)
    s_sh = param_shardings(params, aot.topology_mesh(s_dev, {"data": 2, "tensor": 2}), rules)
    w = aot.weight_sync_bytes(params, l_sh, s_sh)
    # tensor=2 halves every matrix (vocab, heads, kv_heads, mlp); the 160 norm scales stay whole.
    per_chip = (TINY_PARAMS - 160) // 2 + 160
    assert w["received_per_chip"] == per_chip * 4 == 41600
    assert w["total"] == 4 * 41600
    assert aot.shard_bytes(params, s_sh) == 41600


def test_step_report_peak_and_verdict():
    gib = aot.GiB
    r = aot.StepReport(
        "train",
        4,
        16 * gib,
        argument_bytes=6 * gib,
        output_bytes=5 * gib,
        alias_bytes=5 * gib,
        temp_bytes=4 * gib,
        code_bytes=gib // 2,
        resident_bytes=gib,
        largest=(("mu['w']", 3 * gib),),
    )
    assert r.peak_bytes == 6 * gib + 4 * gib + gib // 2 + gib
    assert r.fits and r.headroom_bytes == 16 * gib - r.peak_bytes
    assert "fits, headroom 4.50 GiB" in r.verdict()
    big = aot.StepReport("train", 4, 16 * gib, argument_bytes=20 * gib, largest=(("mu['w']", 3 * gib),))
    assert not big.fits
    assert "DOES NOT FIT" in big.verdict() and "mu['w'] (3.00 GiB)" in big.verdict()
    oom = aot.StepReport("train", 4, 16 * gib, error="RESOURCE_EXHAUSTED: Ran out of memory")
    assert not oom.fits and "RESOURCE_EXHAUSTED" in oom.verdict()


def test_with_remat_sets_the_model_field():
    c = tiny_dense()
    assert aot.with_remat(c, "") is c
    assert aot.with_remat(c, "layer").remat == "layer"
    with pytest.raises(ValueError, match="remat"):
        aot.with_remat(c, "full")


@pytest.mark.parametrize(
    "name,billions", [("qwen3_8b", 8.19), ("qwen3_32b", 32.76), ("qwen3_30b_a3b", 30.53)]
)
def test_presets_have_published_parameter_counts(name, billions):
    assert abs(n_params(preset(name)) / 1e9 - billions) < 0.01


def test_moe_preset_shapes():
    c = preset("qwen3_30b_a3b")
    assert (c.n_layers, c.d_model, c.n_experts, c.n_experts_per_token, c.d_ff) == (48, 2048, 128, 8, 768)
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.qk_norm) == (32, 4, 128, 151936, True)
    assert (c.param_dtype, c.compute_dtype, c.head_dtype) == ("bfloat16", "bfloat16", "float32")
    with pytest.raises(KeyError, match="unknown preset"):
        preset("qwen3_9000b")


@pytest.mark.slow
def test_pod_config_keeps_values_and_gradients():
    import jax.numpy as jnp
    import numpy as np

    from agentjax.policy import forward, init_params
    from agentjax.sharding.mesh import make_mesh

    c = tiny_dense()
    pod = aot.pod_config(c)
    assert pod.remat == "layer" and pod.activation_rows == ("data", "fsdp")
    assert pod.score_chunk == aot.POD_SCORE_CHUNK and aot.pod_config(c, score_chunk=0).score_chunk == 0
    assert aot.pod_config(c, ShardingRules().replace(batch="data")).activation_rows == ("data",)
    params = init_params(c, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (8, 16), 0, c.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(16), (8, 16))

    def loss(cfg, mesh=None):
        return lambda p: jnp.mean(
            jax.nn.log_softmax(forward(p, tokens, positions, config=cfg, mesh=mesh)[0])[..., 3]
        )

    ref_loss, ref_grads = jax.jit(jax.value_and_grad(loss(c)))(params)
    mesh = make_mesh({"data": 8})
    got_loss, got_grads = jax.jit(jax.value_and_grad(loss(pod, mesh)))(params)
    text = jax.jit(jax.value_and_grad(loss(pod, mesh))).lower(params).as_text()
    assert "sharding_constraint" in text  # the row constraint is in the program
    np.testing.assert_allclose(got_loss, ref_loss, rtol=1e-6)
    for g, r in zip(jax.tree.leaves(got_grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-7)


def test_half_topology_halves_the_largest_dimension():
    assert aot.half_topology("v5e:16x16") == "v5e:8x16"
    assert aot.half_topology("v6e:8x8") == "v6e:4x8"
    assert aot.half_topology("v5p:4x4x4") == "v5p:2x4x4"
    with pytest.raises(ValueError, match="cannot be halved"):
        aot.half_topology("v5e:1x1")


# A TPU-compiled lax.scan of 3 [128,128] matmuls (as libtpu prints it, trimmed): the loop
# condition compares the counter with a constant; the matmul is a convolution in a fusion.
SCAN_HLO = """
%fused (p0: f32[128,128], p1: bf16[128,128]) -> f32[128,128] {
  %p0 = f32[128,128]{1,0} parameter(0)
  %p1 = bf16[128,128]{1,0} parameter(1)
  ROOT %convolution.3 = f32[128,128]{1,0} convolution(%p0, %p1), dim_labels=bf_io->bf
}

%body (wide.param.2: (s32[], f32[128,128], bf16[128,128])) -> (s32[], f32[128,128], bf16[128,128]) {
  %wide.param.2 = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) parameter(0)
  %gte.1 = f32[128,128]{1,0} get-tuple-element(%wide.param.2), index=1
  %gte.2 = bf16[128,128]{1,0} get-tuple-element(%wide.param.2), index=2
  %fusion.10 = f32[128,128]{1,0} fusion(%gte.1, %gte.2), kind=kOutput, calls=%fused
  ROOT %tuple.14 = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) tuple(%c, %fusion.10, %gte.2)
}

%cond (wide.param.1: (s32[], f32[128,128], bf16[128,128])) -> pred[] {
  %constant.5 = s32[]{:T(128)} constant(3)
  %wide.param.1 = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) parameter(0)
  %gte.26 = s32[]{:T(128)} get-tuple-element(%wide.param.1), index=0
  ROOT %lt.3 = pred[]{:T(512)} compare(%gte.26, %constant.5), direction=LT
}

%open (wide.param.3: (s32[], f32[128,128], bf16[128,128])) -> pred[] {
  %wide.param.3 = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) parameter(0)
  %gte.27 = s32[]{:T(128)} get-tuple-element(%wide.param.3), index=0
  %gte.28 = s32[]{:T(128)} get-tuple-element(%wide.param.3), index=0
  ROOT %lt.4 = pred[]{:T(512)} compare(%gte.27, %gte.28), direction=LT
}

ENTRY %main (x: f32[128,128], w: bf16[128,128]) -> f32[128,128] {
  %x = f32[128,128]{1,0} parameter(0)
  %w = bf16[128,128]{1,0} parameter(1)
  %t = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) tuple(%c, %x, %w)
  %while.9 = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) while(%t), condition=%cond, body=%body
  %while.10 = (s32[], f32[128,128]{1,0}, bf16[128,128]{1,0}) while(%t), condition=%open, body=%body
  ROOT %out = f32[128,128]{1,0} get-tuple-element(%while.9), index=1
}
"""


def test_hlo_cost_counts_each_loop_body_times_its_trip_count():
    from agentjax.sharding.roofline import hlo_cost

    one = 2 * 128**3  # FLOPs of one [128,128] x [128,128] matmul
    io = 128 * 128 * (4 + 4 + 2)  # the fusion reads f32 and bf16 operands, writes f32
    cost = hlo_cost(SCAN_HLO)
    # 3 iterations of the counted loop + 1 of the data-dependent one (flagged as open)
    assert cost.flops == 4 * one and cost.open_loops == 1
    assert cost.bytes == 4 * io
    step = cost.per_iteration()  # the data-dependent loop's body alone (decode: one step)
    assert (step.flops, step.bytes) == (one, io)


def test_hlo_cost_of_compiled_scan_matches_xla_for_one_iteration_and_scales():
    from agentjax.sharding.roofline import hlo_cost

    def scan(x, w):
        return jax.lax.scan(lambda c, wi: (c @ wi, None), x, w)[0]

    x = jax.ShapeDtypeStruct((64, 64), jax.numpy.float32)
    costs = {}
    for n in (1, 5):
        w = jax.ShapeDtypeStruct((n, 64, 64), jax.numpy.float32)
        compiled = jax.jit(scan).lower(x, w).compile()
        costs[n] = hlo_cost(compiled.as_text())
        if n == 1:  # no loop left: XLA's own analysis agrees
            assert costs[n].flops == compiled.cost_analysis()["flops"] == 2 * 64**3
    assert costs[5].flops == 5 * costs[1].flops and costs[5].open_loops == 0


def test_roofline_is_the_slower_of_compute_and_memory():
    from agentjax.sharding.roofline import CHIP_PEAKS, Cost, roofline_seconds

    flops, bw = CHIP_PEAKS["TPU v5 lite"]
    assert roofline_seconds(Cost(flops, 0.0), "TPU v5 lite") == 1.0
    assert roofline_seconds(Cost(flops, 3 * bw), "TPU v5 lite") == 3.0
    with pytest.raises(KeyError, match="TPU v9"):
        roofline_seconds(Cost(1.0, 1.0), "TPU v9")
