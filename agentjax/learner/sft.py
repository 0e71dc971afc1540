"""Supervised warm start on demonstration episodes (same token format as the rollout).

A demonstration ``[(obs_0, act_0), (obs_1, act_1), ...]`` becomes the row
``<bos> obs_0 <turn_agent> act_0 <eos> <turn_env> obs_1 <turn_agent> act_1 <eos> ...``: exactly
what the sampler would have produced, with the loss on the action tokens (and their ``<eos>``).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agentjax.objectives import masked_mean
from agentjax.policy.codec import Codec, fit
from agentjax.policy.config import ModelConfig
from agentjax.policy.params import onto_mesh_of
from agentjax.policy.scoring import token_logprobs


def demo_rows(
    episodes: Sequence[Sequence[tuple[str, str]]],
    codec: Codec,
    length: int,
    widths: tuple[int, int] | None = None,
):
    """``tokens``, ``positions`` and ``loss_mask`` arrays ``[N, length]`` (rows cut at ``length``).

    ``widths``: ``(prompt, observation)`` token widths the rollout cuts its inputs to
    (:func:`agentjax.sampling.episode.input_widths` of the run's caps); each prompt and
    observation is cut by the rollout's own rule (:func:`~agentjax.policy.codec.fit`), so the
    warm start trains on the inputs the policy will sample from. None: nothing cut."""
    n = len(episodes)
    tok = np.zeros((n, length), np.int32)
    pos = np.full((n, length), length, np.int32)
    mask = np.zeros((n, length), np.float32)
    for i, pairs in enumerate(episodes):
        ids, m, a = [], [], []
        for t, (obs, act) in enumerate(pairs):
            o = codec.prompt(obs) if t == 0 else codec.observation(obs, after=a)  # answers action a
            if widths is not None:
                o = fit(o, widths[0 if t == 0 else 1], codec.keep_tail)[0]
            a = codec.action_ids(act)
            ids += o + a
            m += [0] * len(o) + [1] * len(a)
        k = min(len(ids), length)
        tok[i, :k], pos[i, :k], mask[i, :k] = ids[:k], np.arange(k), m[:k]
    return {"tokens": tok, "positions": pos, "loss_mask": mask}


def demo_nll(params, rows: dict, *, config: ModelConfig, transform=None, mesh=None) -> jax.Array:
    """Mean negative log-likelihood of ``rows``' action tokens (``loss_mask``): the warm start's
    loss, and the RL loss's demonstration term (``loss.demo_coef``)."""
    lp, _ = token_logprobs(
        params, rows["tokens"], rows["positions"], config=config, transform=transform, mesh=mesh
    )
    return -masked_mean(lp, rows["loss_mask"])


def sft_train(
    params,
    config: ModelConfig,
    rows: dict,
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    log_every: int = 0,
    log=print,
    place=None,
    decay: bool = True,
    name: str = "warm start",
):
    """Adam on the mean negative log-likelihood of the action tokens; returns ``(params, losses)``.

    The learning rate warms up over the first 5% of the steps, then decays to 0 along a cosine
    (``decay=False``: stays constant; the copy pretraining's phase change needs the full rate).

    ``name`` begins each log line.
    ``place(batch) -> batch``: puts each batch of host rows on the devices (the training loop
    splits its rows over the learner mesh: data parallel); None: ``jnp.asarray``."""
    cfg = config.replace(exact_tile=0)  # the standard kernels: same function, cheaper gradient
    tx = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adam(
            optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(steps // 20, 1), max(steps, 2))
            if decay
            else optax.linear_schedule(0.0, learning_rate, max(steps // 20, 1))
        ),
    )
    opt = onto_mesh_of(tx.init(params), params)  # Adam's count where sft_step returns it

    @jax.jit
    def sft_step(params, opt, batch):
        loss, g = jax.value_and_grad(lambda p: demo_nll(p, batch, config=cfg))(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss

    # Train on the columns some row uses (a multiple of 8): the padding tail changes nothing.
    length = rows["tokens"].shape[1]
    used = int((rows["positions"] < length).sum(axis=1).max(initial=1))
    width = min(length, -(-used // 8) * 8)
    rows = {k: v[:, :width] for k, v in rows.items()}
    rng = np.random.default_rng(seed)
    n, losses = rows["tokens"].shape[0], []
    for s in range(steps):
        idx = rng.choice(n, batch_size, replace=n < batch_size)
        batch = {k: v[idx] for k, v in rows.items()}
        batch = place(batch) if place is not None else jax.tree.map(jnp.asarray, batch)
        params, opt, loss = sft_step(params, opt, batch)
        losses.append(float(loss))
        if log_every and (s % log_every == 0 or s == steps - 1):
            log(f"{name} step {s:4d}  nll {losses[-1]:.4f}")
    return params, losses
