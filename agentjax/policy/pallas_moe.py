"""Exact mode's MoE gate normalisation and combine in float32 Pallas kernels (``kind="pallas"``
of ``kernels.normalize`` / ``kernels.weighted_sum``): no float64, so Mosaic compiles them.

Each sum is a chain of two-operand kernel calls in a fixed order (the gates' columns left to
right; the experts ``e = 0 .. E-1``), each call :func:`pallas_kernels.elementwise`: its code is
fixed, so no compiler fuses the combine's multiply into the add differently for one caller than
for another, and a row's value depends on that row only (the kernels split rows, never the
summed axis, on a mesh). The sampler's decode and the learner's teacher-forced pass therefore
get the same bits (``tests/policy/test_pallas_exact.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agentjax.policy.pallas_kernels import elementwise

F32 = jnp.float32


def normalize(p):
    """float32 ``p / sum(p)`` over the last axis of ``p [N, k]`` (k small: the chosen gates)."""
    p = p.astype(F32)
    total = p[:, :1]
    for j in range(1, p.shape[-1]):
        total = elementwise(jnp.add, total, p[:, j : j + 1])
    return elementwise(jnp.divide, p, jnp.broadcast_to(total, p.shape))


def weighted_sum(h, w):
    """float32 ``sum_e h[:, e] * w[:, e, None]`` for ``h [N, E, D]``, ``w [N, E]``, accumulated
    over ``e`` in order (one kernel per expert: ``acc + h_e * w_e``)."""
    n, _, d = h.shape

    def step(acc, hw):
        h_e, w_e = hw
        return elementwise(lambda a, x, c: a + x * c, acc, h_e, jnp.broadcast_to(w_e[:, None], (n, d))), None

    xs = (h.astype(F32).swapaxes(0, 1), w.astype(F32).T)  # [E, N, D], [E, N]
    out, _ = jax.lax.scan(step, jnp.zeros((n, d), F32), xs)
    return out
