"""Token-level GAE over a learner batch, with truncation bootstrap, and the aligned value loss.

A learner row is one model input: a trajectory's tokens (actions with ``loss_mask`` 1, prompts and
observations with 0). The critic's value at position ``i`` has seen tokens ``0..i``, so the state
before action token ``t`` is ``c_t = tokens[:t]`` and ``V(c_t) = values[t - 1]``
(:func:`state_values`). GAE runs over the action tokens only: observation tokens are the
environment's move and pass the recursion through untouched, each action token is one step with
discount ``gamma``, and the row's reward sits on its last action token (``batch["step_reward"]``,
from :func:`agentjax.learner.batching.make_batch`).

How a row ends decides the value after its last action (PROBLEMS.md s2, s6):

- ``bootstrap = 0``: the episode ended for good (finished, task cap, agent error, hack): ``V = 0``.
- ``bootstrap = 1``: the system cut it (round budget, the learner's ``max_seq_len``, or a row of a
  rewritten context that is not the episode's last): ``V = values[length - 1]``, the critic's value
  of everything the row holds. Never a silent zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentjax.objectives import gae, masked_mean


def state_values(values: jax.Array) -> jax.Array:
    """``V(c_t)`` for the token at every position ``t``: ``values`` shifted right by one."""
    return jnp.concatenate([jnp.zeros_like(values[:, :1]), values[:, :-1]], axis=1)


def token_gae(values, loss_mask, step_reward, bootstrap, lengths, *, gamma: float, lam: float):
    """Advantages and returns ``[B, T]`` (0 off the action tokens): :func:`agentjax.objectives.gae`
    over each row's action tokens, gathered in order to the front (observation tokens are the
    environment's move: they pass the recursion through untouched) and scattered back.

    Args:
        values: ``[B, T]`` critic outputs per position (no gradient is taken through them here).
        loss_mask: ``[B, T]`` 1 on action tokens.
        step_reward: ``[B, T]`` the reward of the step ending at each token (the episode's reward
            on its last action token, 0 elsewhere).
        bootstrap: ``[B]`` 1 where the row was cut and continues (bootstrap with the critic), 0
            where the episode ended.
        lengths: ``[B]`` real tokens per row (>= 1 for rows with actions).
        gamma, lam: discount per action token and the GAE lambda.
    """
    values = jax.lax.stop_gradient(values.astype(jnp.float32))
    v = state_values(values)
    last = jnp.clip(lengths - 1, 0, values.shape[1] - 1)
    v_end = jnp.take_along_axis(values, last[:, None], axis=1)[:, 0] * bootstrap
    m = loss_mask > 0

    def row(v_r, r_r, m_r, v_end_r):
        order = jnp.argsort(~m_r, stable=True)  # action positions first, in order
        n = jnp.sum(m_r)
        steps = jnp.arange(m_r.shape[0]) < n
        vals = jnp.concatenate([v_r[order], jnp.zeros((1,), v_r.dtype)]).at[n].set(v_end_r)
        adv, _ = gae(r_r[order], jnp.full(m_r.shape, gamma, jnp.float32), vals, lam, mask=steps)
        return jnp.zeros_like(adv).at[order].set(adv)

    adv = jax.vmap(row)(v, step_reward.astype(jnp.float32), m, v_end)
    adv = jnp.where(m, adv, 0.0)
    return adv, jnp.where(m, adv + v, 0.0)


def whiten(adv, mask, eps: float = 1e-6):
    """Advantages normalised to mean 0, std 1 over the masked tokens of the batch."""
    mu = masked_mean(adv, mask)
    sd = jnp.sqrt(masked_mean((adv - mu) ** 2, mask))
    return jnp.where(mask > 0, (adv - mu) / (sd + eps), 0.0)
