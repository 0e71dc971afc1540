"""The scorer's vocabulary chunks (``ModelConfig.score_chunk``): the learner's log-probs come
from one chunk of columns at a time, each recomputed in the backward pass, so no [B, T, V]
logits buffer is live; exact mode keeps its bits, fast mode its values up to rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentjax.policy.model import init_params
from agentjax.policy.scoring import token_logprobs
from agentjax.testing.models import tiny_dense

B, T, CHUNK = 3, 20, 6  # 19 targets per row: chunks of 6, the last padded by 5
R = np.random.default_rng(0)


def _batch(cfg):
    tokens = jnp.asarray(R.integers(0, cfg.vocab_size, (B, T)), jnp.int32)
    lengths = np.asarray([T, 13, 7])
    j = np.arange(T)[None]
    positions = jnp.asarray(np.where(j < lengths[:, None], j, cfg.max_seq_len), jnp.int32)
    return tokens, positions


def _value_and_grad(cfg, params, tokens, positions):
    def loss(p):
        lp, raw = token_logprobs(p, tokens, positions, config=cfg)
        return jnp.sum(lp) + 0.5 * jnp.sum(raw), (lp, raw)

    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)


@pytest.mark.parametrize(
    "kw",
    [
        dict(exact_tile=4, exact_kernels="pallas"),
        dict(exact_tile=4, exact_kernels="pallas", param_dtype="bfloat16", compute_dtype="bfloat16"),
        dict(exact_tile=4, exact_kernels="tiled"),
        dict(),
    ],
    ids=["exact_pallas_f32", "exact_pallas_bf16", "exact_tiled", "fast"],
)
def test_chunked_scores_equal_the_whole_sequence(kw):
    """Exact mode: bitwise the unchunked log-probs (the sampler's, by the consistency tests);
    fast mode: equal up to rounding. The gradient is the unchunked one up to rounding."""
    cfg = tiny_dense(max_seq_len=24, **kw)
    params = init_params(cfg, jax.random.key(0))
    tokens, positions = _batch(cfg)
    (_, want), g_want = _value_and_grad(cfg, params, tokens, positions)
    (_, got), g_got = _value_and_grad(cfg.replace(score_chunk=CHUNK), params, tokens, positions)
    for a, r in zip(got, want, strict=True):
        if cfg.exact:
            np.testing.assert_array_equal(a, r)
        else:
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)
    tol = 2e-2 if kw.get("param_dtype") == "bfloat16" else 1e-4
    for a, r in zip(jax.tree.leaves(g_got), jax.tree.leaves(g_want), strict=True):
        np.testing.assert_allclose(np.float32(a), np.float32(r), rtol=tol, atol=tol)


def _largest_logits_rows(fn, *args, vocab):
    """The most rows of any ``[..., V]`` value traced in ``fn`` (nested jaxprs included)."""
    most = 0

    def walk(jaxpr):
        nonlocal most
        for eqn in jaxpr.eqns:
            for v in eqn.outvars:
                shape = getattr(v.aval, "shape", ())
                if len(shape) >= 2 and shape[-1] == vocab:
                    most = max(most, int(np.prod(shape[:-1])))
            for p in eqn.params.values():
                for sub in p if isinstance(p, (tuple, list)) else (p,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return most


def test_no_whole_sequence_logits_in_the_chunked_gradient():
    """With score_chunk the value and gradient never hold the [B, T, V] logits (at most one
    chunk's, B x chunk rows); without it they do (the check bites)."""
    cfg = tiny_dense(max_seq_len=24, vocab_size=96)  # no other dimension is 96
    params = init_params(cfg, jax.random.key(0))
    tokens, positions = _batch(cfg)
    grad = lambda c: jax.grad(lambda p: jnp.sum(token_logprobs(p, tokens, positions, config=c)[0]))
    chunk = 12  # two chunks of the 19 targets; B x 12 rows > the head weight's D = 32 rows
    assert cfg.d_model < B * chunk
    whole = _largest_logits_rows(grad(cfg), params, vocab=cfg.vocab_size)
    chunked = _largest_logits_rows(grad(cfg.replace(score_chunk=chunk)), params, vocab=cfg.vocab_size)
    assert whole >= B * (T - 1)
    assert chunked == B * chunk


def test_score_chunk_must_not_be_negative():
    with pytest.raises(ValueError, match="score_chunk"):
        tiny_dense(score_chunk=-1)


def test_chunked_gradient_on_a_mesh_traces_every_kernel_on_it(monkeypatch):
    """Exact mode's Pallas kernels on 8 CPU devices (rows over data x fsdp, tensor 2): the
    chunked value and gradient trace every kernel inside the mesh (the map's differentiation
    traces their forward rules again, so it must be bound on the mesh: Mosaic cannot partition
    a kernel traced off it), and the value is the single-device unchunked one, bitwise."""
    from jax.sharding import Mesh

    from agentjax.policy import pallas_kernels as P
    from agentjax.sharding.rules import ShardingRules, param_shardings

    cfg = tiny_dense(exact_tile=4, exact_kernels="pallas", max_seq_len=24)
    params = init_params(cfg, jax.random.key(0))
    tokens, positions = _batch(cfg)
    tokens, positions = jnp.tile(tokens, (2, 1))[:4], jnp.tile(positions, (2, 1))[:4]
    want = jax.jit(lambda p: token_logprobs(p, tokens, positions, config=cfg))(params)
    seen = []
    where = P.current_mesh
    monkeypatch.setattr(P, "current_mesh", lambda: seen.append(where()) or seen[-1])
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    chunked = cfg.replace(activation_rows=("data", "fsdp"), score_chunk=CHUNK)
    sharded = jax.device_put(params, param_shardings(params, mesh, ShardingRules()))

    def loss(p):
        lp, raw = token_logprobs(p, tokens, positions, config=chunked, mesh=mesh)
        return jnp.sum(lp) + jnp.sum(raw), (lp, raw)

    (_, got), _ = jax.jit(jax.value_and_grad(loss, has_aux=True))(sharded)
    assert seen and all(ctx is not None for ctx in seen)  # no kernel traced off the mesh
    for a, r in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, r)
