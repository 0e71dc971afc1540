"""The learner-side scorer: per-token log-probs of given sequences, as the sampler computed them.

    logp, logp_raw = token_logprobs(params, tokens, positions, config=c, transform=t, routes=r)

Entry ``t`` is ``log p(tokens[t] | tokens[<t])`` (aligned with the tokens, as in
``trajectory.Row``; entry 0 is 0). ``logp`` is under the sampled distribution
``softmax(transform(z))`` and ``logp_raw`` under ``softmax(z)``. Both come from the same
float32 function as the sampler's (``policy.logprobs.token_logprobs_from_logits``).

Padding: any layout works if padded tokens get a position >= every real position of their row
(``pad_positions`` uses ``max_seq_len``: their cache writes are dropped and no real token
attends to them). Left padding with ``positions = 0..n-1`` on the real tokens is the same.

Exact mode (``config.exact_tile > 0``): the value is computed with the batch-invariant kernels,
so it equals the sampler's record bitwise (ratio exactly 1.0 at the behaviour version). With
the batch-invariant kernels of ``policy/kernels.py`` (``exact_kernels`` "ordered" or
"exact_sum") every kernel is a ``jax.custom_vjp`` whose backward is the standard kernel's VJP at
the same inputs, so a float32 scorer is differentiated directly: one exact forward, one standard
backward. With the tiled reference kernels, and in bfloat16, a ``jax.custom_vjp`` on the whole
scorer supplies the standard kernels' gradient instead (their VJP is kept as the residual, so
the forward runs twice). In bfloat16 that is the cheaper of the two on CPU: measured with
``benchmarks/exact_cost.py``, the per-kernel backward cost 1.5-1.7x the fast gradient even with
every exact kernel swapped for XLA's, the whole-scorer one 1.28x:

    value = f_exact(params),   d value / d params := d f_standard / d params

``f_exact`` and ``f_standard`` differ by float rounding only (~1e-6 relative in float32), so the
gradient is that of the same function up to rounding; differentiating through the tiled path
directly costs ~3x more. MoE: ``routes`` replays the sampler's experts (R3); without them the
backward replays the experts chosen by the exact forward, so both passes use the same routing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agentjax.policy.config import ModelConfig
from agentjax.policy.logprobs import token_logprobs_from_logits
from agentjax.policy.model import Layout, check_token_ids, forward, head_logits, hidden, kernel_mesh


def pad_positions(lengths: jax.Array, width: int, pad_position: int) -> jax.Array:
    """Positions ``0..len-1`` then ``pad_position`` for right-padded rows. ``[B] -> [B, width]``."""
    j = jnp.arange(width, dtype=jnp.int32)[None, :]
    return jnp.where(j < jnp.asarray(lengths)[:, None], j, pad_position).astype(jnp.int32)


def _score(params, tokens, positions, routes, config: ModelConfig, transform, mesh):
    c = config
    if c.score_chunk and tokens.shape[1] - 1 > c.score_chunk:
        x, aux = hidden(params, tokens, positions, config=c, routes=routes, mesh=mesh)
        lp, raw = _chunked_logprobs(params, x[:, :-1], tokens[:, 1:], c, transform, mesh)
    else:
        logits, _, aux = forward(
            params, tokens, positions, config=c, routes=routes, layout=Layout.STACKED, mesh=mesh
        )
        with kernel_mesh(c, mesh):  # the log-softmax kernel partitions like the model's
            lp, raw = token_logprobs_from_logits(
                logits[:, :-1], tokens[:, 1:], transform, tile=c.row_tile, exact=c.invariant
            )
    zero = jnp.zeros((tokens.shape[0], 1), jnp.float32)
    out = (jnp.concatenate([zero, lp], 1), jnp.concatenate([zero, raw], 1))
    return out, aux.get("routes")


def _chunked_logprobs(params, x, targets, c: ModelConfig, transform, mesh):
    """Log-probs of ``targets`` [B, n] from the rows ``x`` [B, n, D], ``c.score_chunk`` columns
    at a time (``lax.map``; the last chunk padded with row 0's target, its values dropped).

    Each chunk is a ``jax.checkpoint``: the backward recomputes its [B, chunk, V] logits instead
    of keeping them, so at most one chunk's logits (and their gradient) is live, not [B, n, V].
    Every row's value comes from the same kernels on the same row, and exact mode's kernels
    are batch-invariant, so exact mode gives the unchunked call's bits (tests/policy).
    """
    b, n, d = x.shape
    k = c.score_chunk
    m = -(-n // k)
    pad = m * k - n
    x = jnp.pad(x, ((0, 0), (0, pad), (0, 0))).reshape(b, m, k, d).swapaxes(0, 1)
    y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, m, k).swapaxes(0, 1)

    @jax.checkpoint
    def one(p, xy):
        x_c, y_c = xy
        logits = head_logits(p, x_c, config=c, mesh=mesh)
        return token_logprobs_from_logits(logits, y_c, transform, tile=c.row_tile, exact=c.invariant)

    # The map is bound inside the kernels' mesh: differentiating it traces the kernels' forward
    # rules again at that moment, and a Pallas kernel traced off the mesh cannot be partitioned.
    with kernel_mesh(c, mesh):
        lp, raw = jax.lax.map(lambda xy: one(params, xy), (x, y))
    back = lambda a: a.swapaxes(0, 1).reshape(b, m * k)[:, :n]
    return back(lp), back(raw)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _exact(params, tokens, positions, routes, config, transform, mesh):
    return _score(params, tokens, positions, routes, config, transform, mesh)


def _exact_fwd(params, tokens, positions, routes, config, transform, mesh):
    out, chosen = _score(params, tokens, positions, routes, config, transform, mesh)
    replay = routes if routes is not None else chosen
    standard = config.replace(exact_tile=0)
    _, vjp = jax.vjp(lambda p: _score(p, tokens, positions, replay, standard, transform, mesh)[0], params)
    return (out, chosen), vjp


def _exact_bwd(config, transform, mesh, vjp, g):
    (g_params,) = vjp(g[0])  # the routes are integers: no cotangent
    return g_params, None, None, None


_exact.defvjp(_exact_fwd, _exact_bwd)


def token_logprobs(params, tokens, positions, *, config, transform=None, routes=None, mesh=None):
    """Per-token ``(logp, logp_raw)``, float32 ``[B, T]``, differentiable in ``params``: the first
    value of :func:`token_logprobs_and_routes`."""
    return token_logprobs_and_routes(
        params, tokens, positions, config=config, transform=transform, routes=routes, mesh=mesh
    )[0]


def token_logprobs_and_routes(
    params,
    tokens: jax.Array,
    positions: jax.Array,
    *,
    config: ModelConfig,
    transform=None,
    routes: jax.Array | None = None,
    mesh=None,
) -> tuple[tuple[jax.Array, jax.Array], jax.Array | None]:
    """``((logp, logp_raw), routes)``: per-token log-probs, float32 ``[B, T]``, differentiable in
    ``params``, and the MoE experts this forward used, ``[B, T, layers, k]`` (the replayed ones
    when ``routes`` is given; None for a dense model). The learner measures routing replay on
    the routes its loss was computed with, not on its input (``routing/mismatch``).

    Args:
      params: policy parameters.
      tokens: int ``[B, T]``; positions: int ``[B, T]`` (see the module doc for padding).
      config: the model config; ``exact_tile > 0`` gives the sampler's values bitwise.
      transform: the sampling transform the behaviour policy used (None: temperature 1).
      routes: optional ``[B, T, layers, k]`` expert ids to replay (MoE).
      mesh: the mesh the call is jitted on; needed when ``config.activation_rows`` is set
        (see :func:`agentjax.policy.model.forward`).
    """
    if tokens.shape != positions.shape:
        raise ValueError(f"positions {positions.shape} must match tokens {tokens.shape}")
    check_token_ids("token_logprobs(tokens)", tokens, config.vocab_size)
    if config.exact and (not config.invariant or config.cdtype == jnp.bfloat16):  # see the doc
        return _exact(params, tokens, positions, routes, config, transform, mesh)
    return _score(params, tokens, positions, routes, config, transform, mesh)
