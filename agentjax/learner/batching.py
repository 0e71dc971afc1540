"""Trajectories -> fixed-shape learner arrays (no recompiles), with the configured advantages.

GRPO-family advantages are computed over the members of each group (same ``task_id``) present
in the batch; trajectories masked by their verdict (``final_reward is None``: infra faults)
never reach this point (the scheduler masks them) and never enter a group's statistics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from agentjax.objectives import group_advantages, needs_bootstrap, rloo_advantages
from agentjax.trajectory import Trajectory, to_rows


def trajectory_advantages(rewards: Sequence[float], groups: Sequence[str], estimator: str) -> np.ndarray:
    """One advantage per trajectory from its group's members in the batch, by ``estimator``:
    ``group_std`` (GRPO) and ``dr_grpo`` (Dr.GRPO, no std) via
    :func:`agentjax.objectives.group_advantages`, ``rloo`` via
    :func:`agentjax.objectives.rloo_advantages`; ``gae`` gives zeros (the critic computes them in
    the train step). A group with a single member in the batch gets 0 (no baseline)."""
    out = np.zeros(len(rewards), np.float32)
    if estimator == "gae":
        return out
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    for idx in members.values():
        if len(idx) < 2:
            continue
        r = np.asarray([[rewards[i] for i in idx]], np.float64)
        if estimator == "rloo":
            a = rloo_advantages(r)
        else:
            a = group_advantages(r, scale="std" if estimator == "group_std" else "none")
        out[idx] = np.asarray(a, np.float64)[0].astype(np.float32)
    return out


def make_batch(
    trajs: Sequence[Trajectory],
    weights: Sequence[float],
    *,
    rows: int,
    length: int,
    advantage: str = "group_std",
    rewards: Sequence[float] | None = None,
    advantages: Sequence[float] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Pads every trajectory's rows into ``[rows, length]`` arrays.

    Rows beyond the trajectories' own are all-zero with ``loss_mask`` 0 (they change nothing).
    Padded positions get position ``length`` so their cache writes are dropped and no real token
    attends to them. Besides the group advantages, every batch carries what a critic needs for
    GAE (:mod:`agentjax.learner.critic`): ``step_reward`` (the episode's reward on the last action
    token of its last row), ``bootstrap`` (1 where the row does not end the episode: a round
    budget cut, a row cut at ``length``, a rewritten context's earlier turn) and ``lengths``.
    ``rewards`` (default: each trajectory's ``final_reward``) are what the advantages are
    computed from; ``advantages`` (one per trajectory) replaces them when the batch's groups
    were computed elsewhere (:mod:`agentjax.learner.spread_batch`: a process's share of a batch).
    Returns the arrays and bookkeeping metrics.
    """
    rewards = [float(t.final_reward if rewards is None else rewards[i]) for i, t in enumerate(trajs)]
    if advantages is None:
        adv = trajectory_advantages(rewards, [t.task_id for t in trajs], advantage)
    else:
        adv = np.asarray(advantages, np.float32)
    tok = np.zeros((rows, length), np.int32)
    pos = np.full((rows, length), length, np.int32)
    mask = np.zeros((rows, length), np.float32)
    logp = np.zeros((rows, length), np.float32)
    version = np.full((rows, length), -1, np.int32)
    a = np.zeros((rows,), np.float32)
    w = np.zeros((rows,), np.float32)
    step_reward = np.zeros((rows, length), np.float32)
    boot = np.zeros((rows,), np.float32)
    lengths = np.zeros((rows,), np.int32)
    routes, r = None, 0
    truncated = 0
    for t, wt, ad in zip(trajs, weights, adv, strict=True):
        t_rows = to_rows(t)
        cut_by_system = bool(needs_bootstrap([t.stop_reason])[0])
        for k, row in enumerate(t_rows):
            if r >= rows:
                raise ValueError(f"batch needs more than {rows} rows; raise learner rows")
            n = min(row.tokens.size, length)
            truncated += row.tokens.size - n
            tok[r, :n], pos[r, :n] = row.tokens[:n], np.arange(n)
            mask[r, :n], logp[r, :n], version[r, :n] = row.loss_mask[:n], row.logp[:n], row.version[:n]
            if row.routes is not None:
                if routes is None:
                    routes = np.zeros((rows, length, *row.routes.shape[1:]), np.int32)
                routes[r, :n] = row.routes[:n]
            a[r], w[r], lengths[r] = ad, wt, n
            acts = np.flatnonzero(mask[r, :n])
            ends = k == len(t_rows) - 1 and n == row.tokens.size and not cut_by_system
            if ends and acts.size:
                step_reward[r, acts[-1]] = float(t.final_reward)
            boot[r] = 0.0 if ends else 1.0
            r += 1
    batch = {
        "tokens": tok,
        "positions": pos,
        "loss_mask": mask,
        "behav_logp": logp,
        "advantages": a,
        "weight": w,
        "behaviour_version": version,
        "step_reward": step_reward,
        "bootstrap": boot,
        "lengths": lengths,
    }
    if routes is not None:
        batch["routes"] = routes
    groups = defaultdict(list)
    for t in trajs:
        groups[t.task_id].append(t.final_reward)
    metrics = {
        "batch/rows": float(r),
        "batch/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
        "batch/groups": float(len(groups)),
        "batch/singleton_groups": float(sum(len(v) == 1 for v in groups.values())),
        "batch/all_same_groups": float(sum(len(set(v)) == 1 for v in groups.values())),
        "batch/truncated_tokens": float(truncated),
        # completion length: generated (action) tokens per trajectory, all turns together
        "batch/action_tokens": float(sum(t.num_action_tokens for t in trajs)),
        "batch/completion_tokens_mean": float(np.mean([t.num_action_tokens for t in trajs]))
        if trajs
        else 0.0,
        "batch/version_min": float(version[mask > 0].min()) if mask.any() else -1.0,
    }
    return batch, metrics
