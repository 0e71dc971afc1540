"""Policy model: shapes, dtypes, KV-cache decode vs full forward, MoE routes and replay, configs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy import ConfigError, ModelConfig, forward, init_cache, init_params
from agentjax.policy.model import Layout, axes_of, critic_values, logical_axes, unstack_cache, unstack_layers
from agentjax.testing.models import tiny_dense, tiny_moe

B, T = 3, 12


def _inputs(cfg, seed=1):
    tok = jax.random.randint(jax.random.key(seed), (B, T), 0, cfg.vocab_size)
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    return tok, pos


def _decode_all(params, cfg, tok, pos, prefill, layout=Layout.STACKED):
    """Prefill ``prefill`` tokens, then decode the rest one token at a time through the cache."""
    fwd = jax.jit(lambda p, t, q, c: forward(p, t, q, config=cfg, cache=c, layout=layout))
    cache = init_cache(cfg, B, cfg.max_seq_len)
    if layout is Layout.UNROLLED:  # what the sampler runs: per-layer weights and buffers
        params, cache = unstack_layers(params), unstack_cache(cache)
    logits, cache, aux = fwd(params, tok[:, :prefill], pos[:, :prefill], cache)
    outs, routes = [logits], [aux.get("routes")]
    for i in range(prefill, T):
        logits, cache, aux = fwd(params, tok[:, i : i + 1], pos[:, i : i + 1], cache)
        outs.append(logits)
        routes.append(aux.get("routes"))
    r = None if routes[0] is None else jnp.concatenate(routes, 1)
    return jnp.concatenate(outs, 1), r


CONFIGS = {
    "dense": tiny_dense(),
    "dense_qwen": tiny_dense(qkv_bias=True, qk_norm=True, tie_embeddings=False),
    "moe": tiny_moe(),
    "dense_exact": tiny_dense(exact_tile=4),
    "moe_exact": tiny_moe(exact_tile=4),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def setup(request):
    cfg = CONFIGS[request.param]
    params = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    full = jax.jit(lambda p, t, q: forward(p, t, q, config=cfg, layout=Layout.STACKED))(params, tok, pos)
    return cfg, params, tok, pos, full


def test_shapes_and_dtypes(setup):
    cfg, params, tok, pos, (logits, cache, aux) = setup
    assert logits.shape == (B, T, cfg.vocab_size)
    assert logits.dtype == jnp.float32
    assert cache is None
    assert bool(jnp.all(jnp.isfinite(logits)))
    if cfg.is_moe:
        assert aux["routes"].shape == (B, T, cfg.n_layers, cfg.n_experts_per_token)
        assert aux["routes"].dtype == jnp.int32
        np.testing.assert_allclose(np.asarray(aux["router_load"]).sum(-1), 1.0, rtol=1e-5)
        assert float(aux["router_lb_loss"]) > 0
    else:
        assert "routes" not in aux


def test_kv_cache_decode_matches_full_forward(setup):
    cfg, params, tok, pos, (logits, _, aux) = setup
    dec, routes = _decode_all(params, cfg, tok, pos, prefill=5)
    if cfg.exact:
        # Exact mode: the same kernels on every path, so bitwise equal.
        np.testing.assert_array_equal(np.asarray(dec), np.asarray(logits))
    else:
        np.testing.assert_allclose(np.asarray(dec), np.asarray(logits), atol=2e-5, rtol=0)
    if cfg.is_moe and cfg.exact:
        np.testing.assert_array_equal(np.asarray(routes), np.asarray(aux["routes"]))


def test_unrolled_layout_decodes_like_the_scanned_full_forward(setup):
    cfg, params, tok, pos, (logits, _, aux) = setup
    dec, routes = _decode_all(params, cfg, tok, pos, prefill=5, layout=Layout.UNROLLED)
    if cfg.exact:
        np.testing.assert_array_equal(np.asarray(dec), np.asarray(logits))
    else:
        np.testing.assert_allclose(np.asarray(dec), np.asarray(logits), atol=2e-5, rtol=0)
    if cfg.is_moe and cfg.exact:
        np.testing.assert_array_equal(np.asarray(routes), np.asarray(aux["routes"]))


def test_the_caller_picks_the_layout_and_a_mismatched_pytree_is_named():
    cfg = tiny_dense()
    p = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    cache = init_cache(cfg, B)
    cases = [
        (
            Layout.STACKED,
            unstack_layers(p),
            None,
            r"params\['layers'\] is a tuple .* pass layout=Layout.UNROLLED",
        ),
        (Layout.UNROLLED, p, None, r"params\['layers'\] is stacked: .* unstack_layers"),
        (Layout.UNROLLED, unstack_layers(p), cache, r"the cache is stacked: pass unstack_cache"),
        (Layout.STACKED, p, unstack_cache(cache), r"the cache is per layer"),
    ]
    for layout, params, c, match in cases:
        with pytest.raises(ValueError, match=match):
            forward(params, tok, pos, config=cfg, cache=c, layout=layout)
    with pytest.raises(TypeError, match="layout must be a policy.model.Layout"):
        forward(p, tok, pos, config=cfg, layout="stacked")


def test_logits_at_selects_rows_of_the_full_forward(setup):
    """Only the asked-for columns are projected; exact mode: bitwise the full call's rows."""
    cfg, params, tok, pos, (logits, _, aux) = setup
    cols = jnp.array([[T - 1, 0], [3, 3], [T - 1, 5]], jnp.int32)
    fwd = jax.jit(lambda p, t, q, a: forward(p, t, q, config=cfg, logits_at=a))
    some, _, some_aux = fwd(params, tok, pos, cols)
    want = np.take_along_axis(np.asarray(logits), np.asarray(cols)[..., None], axis=1)
    assert some.shape == (B, 2, cfg.vocab_size)
    if cfg.exact:
        np.testing.assert_array_equal(np.asarray(some), want)
    else:
        np.testing.assert_allclose(np.asarray(some), want, atol=2e-5, rtol=0)
    none = fwd(params, tok, pos, jnp.zeros((B, 0), jnp.int32))[0]
    assert none.shape == (B, 0, cfg.vocab_size)
    if cfg.is_moe:  # the trunk's outputs do not depend on which logits were asked for
        np.testing.assert_array_equal(np.asarray(some_aux["routes"]), np.asarray(aux["routes"]))
    with pytest.raises(ValueError, match="logits_at"):
        forward(params, tok, pos, config=cfg, logits_at=jnp.zeros((B,), jnp.int32))


def test_moe_replay_reproduces_logits(setup):
    cfg, params, tok, pos, (logits, _, aux) = setup
    if not cfg.is_moe:
        pytest.skip("dense model has no routes")
    replay, _, aux2 = forward(params, tok, pos, config=cfg, routes=aux["routes"])
    if cfg.exact:
        np.testing.assert_array_equal(np.asarray(replay), np.asarray(logits))
    else:  # jit vs eager: same routes, reduction order may differ by an ulp
        np.testing.assert_allclose(np.asarray(replay), np.asarray(logits), atol=1e-6, rtol=0)
    np.testing.assert_array_equal(np.asarray(aux2["routes"]), np.asarray(aux["routes"]))
    # Forcing different experts changes the output: routes really are used.
    other = (aux["routes"] + 1) % cfg.n_experts
    changed, _, aux3 = forward(params, tok, pos, config=cfg, routes=other)
    np.testing.assert_array_equal(np.asarray(aux3["routes"]), np.asarray(other))
    assert float(jnp.max(jnp.abs(changed - logits))) > 1e-6


def test_ragged_right_padding_does_not_change_real_tokens():
    cfg = tiny_dense()
    params = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    full, _, _ = forward(params, tok, pos, config=cfg)
    junk = tok.at[:, 7:].set(3)
    padded, _, _ = forward(params, junk, pos, config=cfg)
    np.testing.assert_allclose(np.asarray(padded[:, :7]), np.asarray(full[:, :7]), atol=1e-6)


def test_dtypes_bf16_body_f32_head():
    cfg = tiny_dense(param_dtype="bfloat16", compute_dtype="bfloat16", head_dtype="float32")
    params = init_params(cfg, jax.random.key(0))
    assert params["layers"]["wq"].dtype == jnp.bfloat16
    tok, pos = _inputs(cfg)
    logits, _, _ = forward(params, tok, pos, config=cfg)
    assert logits.dtype == jnp.float32
    cache = init_cache(cfg, B)
    assert cache["k"].dtype == jnp.bfloat16
    cfg16 = cfg.replace(head_dtype="bfloat16")
    assert forward(params, tok, pos, config=cfg16)[0].dtype == jnp.bfloat16


def test_shared_and_separate_value_heads_give_one_value_per_token():
    shared = tiny_dense(value_head="shared")
    p = init_params(shared, jax.random.key(0))
    tok, pos = _inputs(shared)
    _, _, aux = forward(p, tok, pos, config=shared)
    assert aux["values"].shape == (B, T)
    np.testing.assert_array_equal(
        np.asarray(critic_values(p, tok, pos, config=shared)), np.asarray(aux["values"])
    )
    sep = tiny_dense(value_head="separate", critic_layers=1)
    p = init_params(sep, jax.random.key(0))
    assert p["critic"]["layers"]["wq"].shape[0] == 1
    v = critic_values(p, tok, pos, config=sep)
    assert v.shape == (B, T) and bool(jnp.all(jnp.isfinite(v)))
    with pytest.raises(ValueError, match="value_head"):
        critic_values(p, tok, pos, config=tiny_dense())


def test_axes_of_matches_config_axes():
    for cfg in CONFIGS.values():
        p = jax.eval_shape(lambda c=cfg: init_params(c, jax.random.key(0)))
        assert axes_of(p) == logical_axes(cfg)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("compute_dtype", "float8", "compute_dtype"),
        ("value_head", "critic", "value_head"),
        ("n_kv_heads", 3, "n_kv_heads"),
        ("d_model", 0, "d_model"),
        ("n_experts_per_token", 9, "n_experts_per_token"),
    ],
)
def test_bad_config_names_field(field, value, match):
    kw = {field: value}
    if field == "n_experts_per_token":
        kw["n_experts"] = 4
    with pytest.raises(ConfigError, match=match):
        ModelConfig(**kw)


def test_from_dict_rejects_unknown_field():
    with pytest.raises(ConfigError, match="d_modle"):
        ModelConfig.from_dict({"d_modle": 3})


def test_exact_cache_length_must_match():
    with pytest.raises(ValueError, match="max_seq_len"):
        init_cache(tiny_dense(exact_tile=4), 2, 16)


def test_routes_on_dense_model_rejected():
    cfg = tiny_dense()
    p = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    with pytest.raises(ValueError, match="no experts"):
        forward(p, tok, pos, config=cfg, routes=jnp.zeros((B, T, 2, 2), jnp.int32))


def test_remat_same_values_and_gradients():
    cfg = tiny_dense()
    p = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    loss = lambda c: lambda q: jnp.mean(forward(q, tok, pos, config=c)[0] ** 2)
    v0, g0 = jax.value_and_grad(loss(cfg))(p)
    v1, g1 = jax.value_and_grad(loss(cfg.replace(remat="layer")))(p)
    np.testing.assert_allclose(float(v0), float(v1), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)
    with pytest.raises(ConfigError, match="remat"):
        tiny_dense(remat="full")


@pytest.mark.parametrize("make", [tiny_dense, tiny_moe], ids=["dense", "moe"])
def test_layer_unroll_same_values_and_gradients(make):
    cfg = make()
    p = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    loss = lambda c: lambda q: jnp.mean(forward(q, tok, pos, config=c)[0] ** 2)
    v0, g0 = jax.value_and_grad(loss(cfg))(p)
    v1, g1 = jax.value_and_grad(loss(cfg.replace(layer_unroll=cfg.n_layers)))(p)
    np.testing.assert_allclose(float(v0), float(v1), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)
    with pytest.raises(ConfigError, match="layer_unroll"):
        make(layer_unroll=0)


def test_activation_rows_constraint_same_values_and_gradients():
    from agentjax.sharding.mesh import make_mesh

    cfg = tiny_dense()
    assert cfg.activation_rows == ()  # default: no constraint, the model as it always was
    pod = cfg.replace(activation_rows=["data", "fsdp"], remat="layer")
    assert pod.activation_rows == ("data", "fsdp")  # lists (JSON, ml_collections) become tuples
    p = init_params(cfg, jax.random.key(0))
    tok, pos = _inputs(cfg)
    mesh = make_mesh({"data": 2, "fsdp": 2}, jax.devices()[:4])
    loss = lambda c, m=None: lambda q: jnp.mean(forward(q, tok, pos, config=c, mesh=m)[0] ** 2)
    v0, g0 = jax.jit(jax.value_and_grad(loss(cfg)))(p)
    assert "sharding_constraint" not in jax.jit(loss(cfg)).lower(p).as_text()
    step = jax.jit(jax.value_and_grad(loss(pod, mesh)))  # the mesh passed, no jax.set_mesh
    assert "sharding_constraint" in step.lower(p).as_text()  # at the start of every layer
    v1, g1 = step(p)
    np.testing.assert_allclose(float(v0), float(v1), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)
    for bad in [("data", "data"), ("",), (1,)]:
        with pytest.raises(ConfigError, match="activation_rows"):
            tiny_dense(activation_rows=bad)


def test_activation_rows_without_a_mesh_is_an_error_even_under_an_ambient_mesh():
    """The row constraint is resolved on the mesh the caller passes, never on jax.set_mesh."""
    from agentjax.sharding.mesh import make_mesh

    pod = tiny_dense(activation_rows=("data",))
    p = init_params(pod, jax.random.key(0))
    tok, pos = _inputs(pod)
    mesh = make_mesh({"data": 2}, jax.devices()[:2])
    with (
        jax.set_mesh(mesh),
        pytest.raises(ValueError, match=r"no mesh was given: pass forward\(\.\.\., mesh="),
    ):
        jax.jit(lambda q: forward(q, tok, pos, config=pod)[0]).lower(p)
    with pytest.raises(ValueError, match=r"the mesh has no axes \['data'\]"):
        forward(p, tok, pos, config=pod, mesh=jax.sharding.Mesh(np.asarray(jax.devices()[:2]), ("rows",)))


def test_token_ids_outside_the_vocabulary_are_rejected_at_the_public_boundary():
    """The embedding lookup clamps an out-of-range id (it silently became the last row); the
    model, the scorer and the sampler's input now name the call and the vocabulary instead."""
    from agentjax.policy.scoring import token_logprobs
    from agentjax.sampling.sampler import Sampler

    cfg = ModelConfig(
        vocab_size=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=32, max_seq_len=8
    )
    params = init_params(cfg, jax.random.key(0))
    tok, pos = np.array([[1, 2, 16]], np.int32), np.arange(3, dtype=np.int32)[None]
    with pytest.raises(
        ValueError, match=r"forward\(tokens\): token id 16 is outside the vocabulary \[0, 16\)"
    ):
        forward(params, tok, pos, config=cfg)
    with pytest.raises(ValueError, match=r"token_logprobs\(tokens\): token id -3 is outside"):
        token_logprobs(params, np.array([[1, -3, 2]], np.int32), pos, config=cfg)
    s = Sampler(cfg)
    with pytest.raises(ValueError, match=r"Sampler.extend\(tokens\): token id 99 is outside"):
        s.extend(params, s.init(1), np.array([[3, 99, 0]], np.int32), np.array([2]), version=0)
    state = s.extend(params, s.init(1), np.array([[3, 4, 99]], np.int32), np.array([2]), version=0)
    assert int(state.length[0]) == 2  # padding past the row's length is not input: not checked
