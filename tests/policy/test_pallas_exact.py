"""The Pallas kernels of exact mode (exact_kernels="pallas"): each kernel's rows do not depend on
the row count, decode attention against the cache equals the teacher-forced pass, and the tiny
model's sampler and learner agree bitwise. On the CPU they run in Pallas interpret mode; on a GPU
(benchmarks/gpu_check.sh) the same tests run the Triton lowering."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import kernels as K
from agentjax.policy import pallas_attention as PA
from agentjax.policy import pallas_kernels as P
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import init_params
from agentjax.testing.models import tiny_dense
from tests.diagnostics.test_consistency import T, _check_contract

R = np.random.default_rng(0)
normal = lambda *shape: jnp.asarray(R.standard_normal(shape), jnp.float32)


def test_interpret_is_decided_by_backend_and_can_be_forced():
    assert P.interpret() == (jax.default_backend() == "cpu")
    with P.interpret_mode(False):
        assert not P.interpret() and "forced" in P.decision()
    assert "default backend" in P.decision()
    assert ModelConfig(exact_tile=1, exact_kernels="pallas").invariant == "pallas"


def test_row_kernels_give_a_row_the_same_bits_in_any_row_count():
    """A row of an M = 1 call equals the same row of an M = 37 call (K = 300: three K blocks,
    the last one padded), for the matmul, RMSNorm and (log-)softmax over a padded vocabulary."""
    x, w, s, z = normal(37, 300), normal(300, 70), normal(300), normal(37, 200)
    full, rows = P.matmul(x, w), [0, 5, 36]
    for i in rows:
        np.testing.assert_array_equal(P.matmul(x[i : i + 1], w), full[i : i + 1])
    np.testing.assert_array_equal(P.matmul(x[5:21], w), full[5:21])  # a subset, other offsets
    np.testing.assert_allclose(full, x @ w, rtol=1e-4, atol=1e-4)
    norm = P.rms_norm(x, s, 1e-6)
    np.testing.assert_array_equal(P.rms_norm(x[5:6], s, 1e-6), norm[5:6])
    for fn, ref in ((P.log_softmax, jax.nn.log_softmax), (P.softmax, jax.nn.softmax)):
        out = fn(z)
        np.testing.assert_array_equal(fn(z[36:37]), out[36:37])
        np.testing.assert_allclose(out, ref(z), rtol=1e-5, atol=1e-6)


def test_decode_attention_equals_the_teacher_forced_pass_bitwise():
    """Queries at every position of a left-padded learner batch (B = 3) against the sequence's
    own keys, and each position decoded alone (B = 1) against a 33-slot cache with stale
    values after it, give the same bits; the values match the standard attention."""
    b, t, h, hkv, d, n_slots, pad = 3, 9, 4, 2, 8, 33, 2
    q, k, v = normal(b, t, h, d), normal(b, hkv, t, d), normal(b, hkv, t, d)
    pos = jnp.broadcast_to(jnp.arange(t), (b, t))
    padp = lambda a, axis, c=0: jnp.pad(
        a, [(pad, 0) if i == axis else (0, 0) for i in range(a.ndim)], constant_values=c
    )
    lpos = padp(pos, 1, n_slots)  # garbage pads at a position past every query
    ones = jnp.ones((b, t + pad), bool)
    forced = PA.attention(padp(q, 1), padp(k, 2), padp(v, 2), lpos, lpos, ones, n_max=n_slots)[:, pad:]
    from agentjax.policy import layers

    ref = layers.attention_standard(q, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, jnp.ones((b, t), bool))
    np.testing.assert_allclose(forced, ref, rtol=1e-5, atol=1e-5)
    stale = normal(1, hkv, n_slots, d)
    slots = jnp.arange(n_slots)[None]
    for i in (0, 4, t - 1):
        kc = stale.at[:, :, : i + 1].set(k[1:2, :, : i + 1])
        vc = stale.at[:, :, : i + 1].set(v[1:2, :, : i + 1])
        dec = PA.attention(
            q[1:2, i : i + 1],
            kc,
            vc,
            pos[1:2, i : i + 1],
            slots,
            slots < n_slots - 1,
            n_max=n_slots,
            slotted=True,
        )
        np.testing.assert_array_equal(dec[0, 0], forced[1, i])


def test_kernels_take_the_standard_gradient():
    x, w = normal(3, 40), normal(40, 24)
    g = jax.grad(lambda x_, w_: jnp.sum(K.matmul(x_, w_, "pallas") ** 2), (0, 1))(x, w)
    ref = jax.grad(lambda x_, w_: jnp.sum((x_ @ w_) ** 2), (0, 1))(x, w)
    for a, r in zip(g, ref, strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiny_model_sampler_and_learner_agree_bitwise(dtype):
    """Sampler batches 1, 3 and 8 (decode against the cache, top-k/top-p transform), every row
    rescored in shuffled, randomly padded learner batches (teacher-forced): bitwise."""
    cfg = tiny_dense(exact_tile=4, exact_kernels="pallas", param_dtype=dtype, compute_dtype=dtype)
    assert cfg.invariant == "pallas"
    params = init_params(cfg, jax.random.key(0))
    _, n_tokens = _check_contract(
        cfg,
        params,
        (1, 3, 8),
        np.random.default_rng(1),
        transform=T,
        max_new=6,
        prompt_width=6,
        compositions=1,
    )
    assert n_tokens >= 40


def test_tiny_moe_sampler_and_learner_agree_bitwise():
    """The MoE gate normalisation and combine in float32 Pallas kernels (no float64): sampler
    batches 1 and 3 against learner batches, bitwise, routes replayed."""
    from agentjax.policy.scoring import token_logprobs
    from agentjax.testing.models import tiny_moe

    cfg = tiny_moe(exact_tile=4, exact_kernels="pallas")
    params = init_params(cfg, jax.random.key(0))
    tokens = jnp.zeros((2, 8), jnp.int32)
    score = jax.jit(lambda p, t_: token_logprobs(p, t_, t_, config=cfg))
    assert "f64" not in score.lower(params, tokens).as_text()  # TPUs have no float64
    _, n_tokens = _check_contract(
        cfg, params, (1, 3), np.random.default_rng(2), transform=T, max_new=5, prompt_width=5, compositions=1
    )
    assert n_tokens >= 15


def test_moe_kernels_are_row_invariant_and_close_to_the_float64_ones():
    from agentjax.policy import pallas_moe

    p, h, w = jnp.abs(normal(37, 4)), normal(37, 6, 130), normal(37, 6)
    gates, combined = pallas_moe.normalize(p), pallas_moe.weighted_sum(h, w)
    np.testing.assert_array_equal(pallas_moe.normalize(p[5:6]), gates[5:6])
    np.testing.assert_array_equal(pallas_moe.weighted_sum(h[5:9], w[5:9]), combined[5:9])
    with jax.enable_x64(False):
        np.testing.assert_allclose(gates, K.normalize(p), rtol=1e-6)
        np.testing.assert_allclose(combined, K.weighted_sum(h, w), rtol=1e-5, atol=1e-5)
    text = str(jax.make_jaxpr(lambda a, b: K.weighted_sum(a, b, "pallas"))(h, w))
    assert "f64" not in text and "pallas_call" in text


def _mesh(shape, names):
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()[:8]).reshape(shape), names)


def _call_on_mesh(fn, mesh, rows, args):
    """``fn(*args)`` jitted inside ``on_mesh(mesh, rows)``, even-length inputs placed split on
    the first mesh axis; asserts the kernels were wrapped in a shard_map."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as Spec

    def on_mesh(*a):
        with P.on_mesh(mesh, rows):
            return fn(*a)

    first = mesh.axis_names[0]
    placed = lambda a: jax.device_put(a, NamedSharding(mesh, Spec(first, *([None] * (a.ndim - 1)))))
    args = tuple(placed(a) if a.shape[0] % 2 == 0 else a for a in args)
    assert "shard_map" in str(jax.make_jaxpr(on_mesh)(*args))
    return jax.jit(on_mesh)(*args)


def test_kernels_on_a_mesh_give_the_unpartitioned_bits():
    """On 8 CPU devices (data 2 x fsdp 2 x tensor 2, and fsdp 2 x expert 2 x tensor 2), each
    kernel wrapped in its shard_map (rows over the row axes, matmul columns and kv heads over
    tensor, groups over expert; inputs placed sharded) equals the unwrapped kernel bitwise, with
    row counts the split does not divide (37 rows: padded over every row axis) or divides only
    in part (38 rows: split over the one axis of 2 that divides, no padding). The attention
    spans two key chunks (600 slots: chunks of KV_CHUNK = 512), and equals the one-chunk kernel
    bitwise too."""
    x, w, s, z = normal(37, 300), normal(300, 256), normal(300), normal(37, 200)
    xg, wg = normal(4, 13, 40), normal(4, 40, 130)
    b, t, h, hkv, d, n = 4, 7, 4, 2, 8, 600
    q, k, v = normal(b, t, h, d), normal(b, hkv, t, d), normal(b, hkv, t, d)
    pos = jnp.asarray(R.integers(0, 20, (b, t)), jnp.int32)
    valid = jnp.asarray(R.random((b, t)) < 0.8)
    cases = {
        "matmul": (P.matmul, (x, w)),
        "batched_matmul": (P.batched_matmul, (xg, wg)),
        "rms_norm": (lambda a, c: P.rms_norm(a, c, 1e-6), (x, s)),
        "rms_norm_38": (lambda a, c: P.rms_norm(a, c, 1e-6), (normal(38, 300), s)),
        "matmul_38": (P.matmul, (normal(38, 300), w)),
        "log_softmax": (P.log_softmax, (z,)),
        "softmax": (P.softmax, (z,)),
        "elementwise": (lambda a, c: P.elementwise(lambda u, y: u * y + jnp.tanh(u), a, c), (z, z)),
        "attention": (
            lambda *a: PA.attention(*a, n_max=n, window=5),
            (q, k, v, pos, pos, valid),
        ),
    }
    want = {name: jax.jit(fn)(*args) for name, (fn, args) in cases.items()}
    for shape, names in (((2, 2, 2), ("data", "fsdp", "tensor")), ((2, 2, 2), ("fsdp", "expert", "tensor"))):
        mesh = _mesh(shape, names)
        rows = tuple(a for a in names if a != "tensor")
        for name, (fn, args) in cases.items():
            got = _call_on_mesh(fn, mesh, rows, args)
            np.testing.assert_array_equal(got, want[name], err_msg=f"{name} on {names}")
    one_chunk = PA.KV_CHUNK
    try:
        PA.KV_CHUNK = 1 << 20
        fn, args = cases["attention"]
        np.testing.assert_array_equal(jax.jit(lambda *a: fn(*a))(*args), want["attention"])
    finally:
        PA.KV_CHUNK = one_chunk


def test_tiny_model_on_a_mesh_gives_the_unpartitioned_log_probs():
    """The tiny model's exact log-probs (teacher-forced, rows split over data x fsdp, weights
    sharded by the default rules, tensor 2) on 8 CPU devices equal the single-device ones bitwise."""
    from agentjax.policy.scoring import token_logprobs
    from agentjax.sharding.rules import ShardingRules, param_shardings

    cfg = tiny_dense(exact_tile=4, exact_kernels="pallas", max_seq_len=16)
    params = init_params(cfg, jax.random.key(0))
    tokens = jnp.asarray(R.integers(0, cfg.vocab_size, (4, 12)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), tokens.shape)
    want = jax.jit(lambda p, t_, q_: token_logprobs(p, t_, q_, config=cfg))(params, tokens, positions)
    mesh = _mesh((2, 2, 2), ("data", "fsdp", "tensor"))
    sharded_cfg = cfg.replace(activation_rows=("data", "fsdp"))
    sharded = jax.device_put(params, param_shardings(params, mesh, ShardingRules()))
    got = jax.jit(lambda p, t_, q_: token_logprobs(p, t_, q_, config=sharded_cfg, mesh=mesh))(
        sharded, tokens, positions
    )
    for a, r in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, r)


@pytest.mark.slow
@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_an_exact_step_with_the_pallas_kernels_compiles_for_tpu(moe):
    """AOT, Mosaic (interpret=False): the tiny model's (and the tiny MoE's, gates and combine
    included) exact-mode log-prob value and gradient for one v5e chip (a chip of the v5e:2x2
    topology; no float64 reaches the program)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from agentjax.policy.model import abstract_params
    from agentjax.policy.scoring import token_logprobs
    from agentjax.sharding.topology import TopologyUnavailable, topology_devices
    from agentjax.testing.models import tiny_moe

    try:
        devices = topology_devices("v5e:2x2")
    except TopologyUnavailable as e:
        pytest.skip(f"no TPU compiler: {e}")
    rep = NamedSharding(Mesh(np.array(devices[:1]), ("x",)), PartitionSpec())
    cfg = (tiny_moe if moe else tiny_dense)(exact_tile=8, exact_kernels="pallas")
    params = abstract_params(cfg)
    tokens = jax.ShapeDtypeStruct((4, 32), jnp.int32)

    def loss(p, t, pos):
        return -jnp.mean(token_logprobs(p, t, pos, config=cfg)[0])

    step = jax.jit(jax.value_and_grad(loss), in_shardings=(jax.tree.map(lambda _: rep, params), rep, rep))
    with P.interpret_mode(False):
        lowered = step.lower(params, tokens, tokens)
    text = lowered.as_text()
    assert text.count("tpu_custom_call") >= 10 and "f64" not in text
    mem = lowered.compile().memory_analysis()
    assert 0 < mem.argument_size_in_bytes < 1 << 20


def test_the_sampler_on_a_mesh_decodes_the_unpartitioned_tokens_and_log_probs(monkeypatch):
    """The sampler enters the kernels' mesh itself (its log-prob kernels run outside forward, and
    Mosaic cannot partition a kernel traced outside it): every kernel of its prefill and decode is
    traced on the mesh, and with rows over data x fsdp and weights sharded by the default rules
    (tensor 2) on 8 CPU devices they give the single-device tokens and log-probs bitwise."""
    from agentjax.sampling.sampler import Sampler, take
    from agentjax.sharding.rules import ShardingRules, param_shardings

    cfg = tiny_dense(exact_tile=4, exact_kernels="pallas", max_seq_len=16)
    params = init_params(cfg, jax.random.key(1))
    prompts = np.asarray(R.integers(1, cfg.vocab_size, (4, 5)), np.int32)
    lengths = np.asarray([5, 3, 4, 2], np.int32)

    def decode(sampler, p):
        st = sampler.extend(p, sampler.init(4), prompts, lengths, version=0)
        st, span = sampler.generate(p, st, jax.random.key(2), max_new_tokens=4, version=0)
        return take(st, span)

    want = decode(Sampler(cfg, stop_tokens=(0,)), params)
    seen = []
    where = P.current_mesh
    monkeypatch.setattr(P, "current_mesh", lambda: seen.append(where()) or seen[-1])
    mesh = _mesh((2, 2, 2), ("data", "fsdp", "tensor"))
    sharded = jax.device_put(params, param_shardings(params, mesh, ShardingRules()))
    got = decode(Sampler(cfg.replace(activation_rows=("data", "fsdp")), stop_tokens=(0,), mesh=mesh), sharded)
    assert seen and all(ctx is not None for ctx in seen)  # no kernel traced off the mesh
    for a, b in zip(got, want, strict=True):
        for k in ("tokens", "logp", "logp_raw"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
