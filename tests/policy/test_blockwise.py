"""Blockwise (online-softmax) attention (issue #32 item 1): the same values and gradients as the
full-score kernels, teacher-forced and against the KV cache, with causal masking, right and
left padding, sliding windows, soft-capping and block sizes that do not divide the keys; the
selection rule keeps the default shapes and exact mode on their kernels; and the compiled memory
of the full path grows as T^2 while the blockwise one grows as T."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import ConfigError, ModelConfig, forward, init_cache, init_params
from agentjax.policy import attention as A
from agentjax.policy import layers as L
from agentjax.policy.blockwise import blockwise_attention
from agentjax.policy.model import Layout, unstack_cache, unstack_layers
from agentjax.rundefaults import run_defaults
from agentjax.testing.models import tiny_dense, tiny_moe

BIG = 10_000  # a left-padding key's position: beyond every real query, so no real query sees it


def _qkv(seed, b, t, s, h, hkv, d, dtype=jnp.float32):
    ks = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(ks[0], (b, t, h, d), dtype)
    k = jax.random.normal(ks[1], (b, s, hkv, d), dtype)
    v = jax.random.normal(ks[2], (b, s, hkv, d), dtype)
    return q, k, v, ks[3]


def _positions(b, t, padding):
    """[B, T] positions: none, right padding at position ``length`` (the learner's batches),
    or left padding (pad keys at :data:`BIG`, the real tokens 0.. after them)."""
    pos = np.broadcast_to(np.arange(t), (b, t)).copy()
    for r in range(1, b):
        n = max(1, t - 3 * r)
        if padding == "right":
            pos[r, n:] = n
        elif padding == "left":
            pos[r, : t - n], pos[r, t - n :] = BIG, np.arange(n)
    return jnp.asarray(pos, jnp.int32)


SHAPES = [(2, 13, 4, 2, 8), (3, 32, 6, 3, 16), (1, 1, 2, 1, 8), (2, 40, 8, 1, 4)]  # b, t, h, hkv, d


# every padding with every shape, the block size cycling so that each padding and each shape
# meets every block size too (pairwise: 12 cases for the 36 of the full product)
PAIRWISE = [
    (shape, (1, 7, 64)[(i + j) % 3], padding)
    for i, padding in enumerate(("none", "right", "left"))
    for j, shape in enumerate(SHAPES)
]


@pytest.mark.parametrize("shape, block, padding", PAIRWISE)
def test_teacher_forced_values_and_gradients_match_the_full_scores(shape, block, padding):
    b, t, h, hkv, d = shape
    q, k, v, kc = _qkv(block, b, t, t, h, hkv, d)
    pos = _positions(b, t, padding)
    cot = jax.random.normal(kc, q.shape)
    for window, cap, scalar in ((None, 0.0, 0.0), (5, 0.0, 0.0), (None, 2.5, 3.0), (jnp.int32(4), 1.5, 0.0)):
        opt = dict(window=window, cap=cap, scalar=scalar)
        ref = lambda q, k, v, opt=opt: L.attention_standard(q, k, v, pos, pos, jnp.ones((b, t), bool), **opt)
        bw = lambda q, k, v, opt=opt: blockwise_attention(
            q, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, block=block, **opt
        )
        np.testing.assert_allclose(bw(q, k, v), ref(q, k, v), atol=2e-6, rtol=1e-5)
        g_ref = jax.grad(lambda *a, f=ref: jnp.sum(f(*a) * cot), (0, 1, 2))(q, k, v)
        g_bw = jax.grad(lambda *a, f=bw: jnp.sum(f(*a) * cot), (0, 1, 2))(q, k, v)
        for name, x, y in zip("qkv", g_bw, g_ref, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-4, err_msg=f"d{name} {opt}")


@pytest.mark.parametrize("t", [1, 4, 9])
@pytest.mark.parametrize("block", [5, 16, 100])
def test_cache_values_match_the_cache_kernel_with_per_row_offsets_and_the_sink(t, block):
    """The slot engine's layout: [B, Hkv, S, D] with slot == position, each row's queries at its
    own offset, padding queries at the write sink (slot S - 1)."""
    b, s, h, hkv, d = 4, 33, 4, 2, 8
    ks = jax.random.split(jax.random.key(t * 100 + block), 4)
    kbuf = jax.random.normal(ks[0], (b, hkv, s, d))
    vbuf = jax.random.normal(ks[1], (b, hkv, s, d))
    q = jax.random.normal(ks[2], (b, t, h, d))
    start = jnp.array([0, 5, 31 - t, 17])
    pos = start[:, None] + jnp.arange(t)[None, :]
    pos = pos.at[3, t // 2 :].set(s - 1)  # row 3: padding queries at the sink
    slots = jnp.broadcast_to(jnp.arange(s), (b, s))
    for window, cap in ((None, 0.0), (6, 0.0), (None, 3.0)):
        ref = L.attention_cache(q, kbuf, vbuf, pos, window=window, cap=cap)
        got = blockwise_attention(q, kbuf, vbuf, pos, slots, window=window, cap=cap, block=block)
        np.testing.assert_allclose(got, ref, atol=2e-6, rtol=1e-5)


def test_bfloat16_inputs_match_within_bfloat16_rounding():
    b, t, h, hkv, d = 2, 48, 4, 2, 16
    q, k, v, _ = _qkv(3, b, t, t, h, hkv, d, jnp.bfloat16)
    pos = _positions(b, t, "right")
    ref = L.attention_standard(q, k, v, pos, pos, jnp.ones((b, t), bool))
    got = blockwise_attention(q, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, block=10)
    assert got.dtype == ref.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.float32(got), np.float32(ref), atol=3e-2, rtol=3e-2)
    cot = jax.random.normal(jax.random.key(5), q.shape, jnp.bfloat16)
    f_ref = lambda q, k, v: jnp.sum(L.attention_standard(q, k, v, pos, pos, jnp.ones((b, t), bool)) * cot)
    f_bw = lambda q, k, v: jnp.sum(
        blockwise_attention(q, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, block=10) * cot
    )
    g_ref = jax.grad(f_ref, (0, 1, 2))(q, k, v)
    g_bw = jax.grad(f_bw, (0, 1, 2))(q, k, v)
    for x, y in zip(g_bw, g_ref, strict=True):
        assert x.dtype == jnp.bfloat16
        scale = float(jnp.max(jnp.abs(np.float32(y))))
        np.testing.assert_allclose(np.float32(x), np.float32(y), atol=3e-2 * scale)


def test_a_query_that_sees_no_key_averages_every_value_as_the_full_scores_do():
    b, t, h, hkv, d = 1, 6, 2, 1, 4
    q, k, v, kc = _qkv(4, b, t, t, h, hkv, d)
    q_pos = jnp.array([[-1, 0, 1, 2, -1, 4]], jnp.int32)  # queries 0 and 4 precede every key
    k_pos = jnp.arange(t, dtype=jnp.int32)[None]
    ref = lambda q, k, v: L.attention_standard(q, k, v, q_pos, k_pos, jnp.ones((b, t), bool))
    bw = lambda q, k, v: blockwise_attention(q, k.swapaxes(1, 2), v.swapaxes(1, 2), q_pos, k_pos, block=4)
    got = bw(q, k, v)
    assert bool(jnp.all(jnp.isfinite(got)))
    np.testing.assert_allclose(got, ref(q, k, v), atol=2e-6)
    np.testing.assert_allclose(got[0, 0, 0], jnp.mean(v[0, :, 0], axis=0), atol=2e-6)
    cot = jax.random.normal(kc, q.shape)
    g_ref = jax.grad(lambda *a: jnp.sum(ref(*a) * cot), (0, 1, 2))(q, k, v)
    g_bw = jax.grad(lambda *a: jnp.sum(bw(*a) * cot), (0, 1, 2))(q, k, v)
    for x, y in zip(g_bw, g_ref, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-4)


# --- in the model: forward, the cache (prefill + decode), gradients ----------------------------


def _blockwise(cfg: ModelConfig, block=5) -> ModelConfig:
    return cfg.replace(attention_kernel="blockwise", attention_block=block)


@pytest.mark.parametrize(
    "make", [tiny_dense, tiny_moe, lambda: tiny_dense(sliding_window=4, attn_softcap=20.0, qk_norm=True)]
)
def test_forward_decode_and_gradients_match_the_full_kernels(make):
    cfg = make()
    params = init_params(cfg, jax.random.key(0))
    b, t = 3, 12
    tok = jax.random.randint(jax.random.key(1), (b, t), 0, cfg.vocab_size)
    pos = _positions(b, t, "right")
    run = lambda c: jax.jit(lambda p: forward(p, tok, pos, config=c)[0])(params)
    np.testing.assert_allclose(run(_blockwise(cfg)), run(cfg), atol=2e-5, rtol=1e-5)

    def loss(c):
        f = lambda p: jnp.mean(jax.nn.log_softmax(forward(p, tok, pos, config=c)[0])[..., 0])
        return jax.jit(jax.grad(f))(params)

    for x, y in zip(jax.tree.leaves(loss(_blockwise(cfg))), jax.tree.leaves(loss(cfg)), strict=True):
        np.testing.assert_allclose(x, y, atol=2e-6, rtol=1e-4)

    def decode(c, prefill=5):  # what the sampler runs: unrolled layers and per-layer buffers
        fwd = jax.jit(
            lambda p, tk, q, cache: forward(p, tk, q, config=c, cache=cache, layout=Layout.UNROLLED)
        )
        p, cache = unstack_layers(params), unstack_cache(init_cache(c, b, c.max_seq_len))
        out, cache, _ = fwd(p, tok[:, :prefill], pos[:, :prefill], cache)
        outs = [out]
        for i in range(prefill, t):
            out, cache, _ = fwd(p, tok[:, i : i + 1], pos[:, i : i + 1], cache)
            outs.append(out)
        return jnp.concatenate(outs, 1)

    np.testing.assert_allclose(decode(_blockwise(cfg)), decode(cfg), atol=2e-5, rtol=1e-5)
    lengths = np.array([t] + [max(1, t - 3 * r) for r in range(1, b)])  # as _positions pads
    real = np.arange(t)[None, :] < lengths[:, None]  # the padded tokens' logits are not compared
    np.testing.assert_allclose(decode(_blockwise(cfg))[real], run(cfg)[real], atol=2e-5, rtol=1e-5)


# --- the selection rule -------------------------------------------------------------------------


def test_the_default_run_keeps_its_kernels_bit_for_bit():
    """The default run's model is in exact mode (its batch-invariant kernels, whatever the
    attention setting); its fast-mode counterpart attends over at most max_seq_len + 1 keys,
    below the threshold, so 'auto' is the full-score path there: the same bits as before."""
    exact = ModelConfig(**{**run_defaults()["model"], "vocab_size": 64})
    assert exact.exact and A.attention_plan(exact, 96, 97)[0] == "exact"
    cfg = exact.replace(exact_tile=0)
    assert cfg.attention_kernel == "auto" and cfg.max_seq_len + 1 < cfg.attention_blockwise_from
    for q_len, k_len in ((cfg.max_seq_len, cfg.max_seq_len), (1, cfg.max_seq_len + 1)):
        assert A.attention_plan(cfg, q_len, k_len)[0] == "full"
    params = init_params(cfg, jax.random.key(0))
    tok = jax.random.randint(jax.random.key(1), (2, 16), 0, cfg.vocab_size)
    pos = _positions(2, 16, "right")
    run = lambda c: np.asarray(jax.jit(lambda p: forward(p, tok, pos, config=c)[0])(params))
    np.testing.assert_array_equal(run(cfg), run(cfg.replace(attention_kernel="full")))


def test_auto_turns_blockwise_from_the_threshold_and_records_why():
    cfg = tiny_dense(attention_blockwise_from=8, attention_block=4)
    assert A.attention_plan(cfg, 7, 7)[0] == "full"
    kernel, reason = A.attention_plan(cfg, 8, 8, backend="gpu")
    assert kernel == "blockwise" and "attention_blockwise_from=8" in reason and "cuDNN" in reason
    assert "Splash" in A.attention_plan(cfg, 8, 4097, backend="tpu")[1]
    kernel, reason = A.attention_plan(cfg, 3, 4097)  # decode: fewer queries than a block
    assert kernel == "full" and "attention_block=4" in reason
    assert A.attention_plan(cfg.replace(attention_kernel="full"), 1, 10**6)[0] == "full"
    params = init_params(cfg, jax.random.key(0))
    tok = jnp.zeros((1, 9), jnp.int32)
    pos = jnp.arange(9, dtype=jnp.int32)[None]
    auto = jax.jit(lambda p: forward(p, tok, pos, config=cfg)[0])(params)
    explicit = jax.jit(lambda p: forward(p, tok, pos, config=_blockwise(cfg, 4))[0])(params)
    np.testing.assert_array_equal(auto, explicit)  # the same kernel, so the same bits
    plans = [p for p in A.recorded_plans() if p["queries"] == 9 and p["keys"] == 9]
    assert plans and all(p["kernel"] == "blockwise" and p["where"] == "forced" for p in plans)


def test_exact_mode_keeps_its_batch_invariant_kernels_whatever_the_setting():
    cfg = tiny_dense(exact_tile=4)
    kernel, reason = A.attention_plan(_blockwise(cfg), 128, 4097)
    assert kernel == "exact" and "batch-invariant" in reason
    params = init_params(cfg, jax.random.key(0))
    tok = jax.random.randint(jax.random.key(1), (2, 10), 0, cfg.vocab_size)
    pos = _positions(2, 10, "right")
    run = lambda c: np.asarray(jax.jit(lambda p: forward(p, tok, pos, config=c)[0])(params))
    np.testing.assert_array_equal(run(_blockwise(cfg).replace(attention_blockwise_from=1)), run(cfg))


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("attention_kernel", "flash", r"attention_kernel='flash' is invalid; allowed values"),
        ("attention_block", 0, r"attention_block=0 is invalid"),
        ("attention_blockwise_from", -1, r"attention_blockwise_from=-1 is invalid"),
    ],
)
def test_bad_attention_settings_name_the_field(field, value, match):
    with pytest.raises(ConfigError, match=match):
        tiny_dense(**{field: value})


# --- memory: O(T^2) for the full scores, O(T x block) blockwise (compiled, not run) -------------


def _temp_bytes(attn, t, grad):
    b, h, hkv, d = 1, 4, 2, 32
    q = jax.ShapeDtypeStruct((b, t, h, d), jnp.float32)
    k = jax.ShapeDtypeStruct((b, t, hkv, d), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    f = lambda q, k, v: attn(q, k, v, pos)
    if grad:
        f = jax.grad(lambda q, k, v: jnp.sum(attn(q, k, v, pos)), (0, 1, 2))
    return jax.jit(f).lower(q, k, k).compile().memory_analysis().temp_size_in_bytes


FULL = lambda q, k, v, pos: L.attention_standard(q, k, v, pos, pos, jnp.ones(pos.shape, bool))
BLOCKWISE = lambda q, k, v, pos: blockwise_attention(
    q, k.swapaxes(1, 2), v.swapaxes(1, 2), pos, pos, block=256
)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "gradient"])
def test_compiled_temporaries_grow_as_t_squared_for_full_scores_and_as_t_blockwise(grad):
    """Temporaries of the compiled program (``memory_analysis``) at T = 1024, 2048, 4096: the
    full-score path holds [B, Hkv, G, T, T] float32 scores (64 MiB per head group pair at
    4096), the blockwise one a [.., T, 256] block."""
    full = [_temp_bytes(FULL, t, grad) for t in (1024, 2048, 4096)]
    block = [_temp_bytes(BLOCKWISE, t, grad) for t in (1024, 2048, 4096)]
    scores_4096 = 4 * 4096 * 4096 * 4  # the [1, 2, 2, 4096, 4096] float32 score tensor
    assert full[2] >= scores_4096
    for small, large in zip(full, full[1:], strict=False):
        assert large >= 3.5 * small, full  # doubling T quadruples it
    for small, large in zip(block, block[1:], strict=False):
        assert large <= 2.2 * small, block  # doubling T doubles it
    assert block[2] * 6 < full[2], (block, full)


def _in_a_layer_scan(attn):
    """``attn`` applied twice in a ``lax.scan``, as the model's stacked layers run it."""

    def f(q, k, v, pos):
        return jax.lax.scan(lambda x, _: (attn(x, k, v, pos), None), q, None, length=2)[0]

    return f


def test_blockwise_gradient_inside_a_layer_scan_grows_as_t():
    """Inside a scan over layers the gradient's partial evaluation split the forward's key-block
    loop (a fori_loop, i.e. a scan) and stacked its per-block masks across the blocks, a
    [blocks, B, Hkv, G, T, block] boolean: T^2 bytes per head (Qwen3-8B at 32k tokens, fast
    mode: three 32 GiB stacks per chip). The loop is a while_loop now: the temporaries grow as T."""
    block = [_temp_bytes(_in_a_layer_scan(BLOCKWISE), t, True) for t in (1024, 2048, 4096)]
    for small, large in zip(block, block[1:], strict=False):
        assert large <= 2.2 * small, block  # doubling T doubles it
