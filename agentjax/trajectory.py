"""The one record that crosses every boundary: a multi-turn agent episode (host side, numpy).

A trajectory is a list of turns. Each turn stores the exact token ids the model was given as input
(``context``, after any context management ``f_ctx``), the action tokens it generated with their
behaviour record, and the observation tokens the environment returned. The learner trains each
action on exactly its turn's ``context``: it never re-stitches or re-tokenises the history.

When every turn's context is the previous turn's context + action + observation (keep-all), the
whole episode is one training row (:func:`to_rows` merges it); otherwise each turn is its own row.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np


class StopReason(str, enum.Enum):
    """Why an episode (or a round of it) stopped. Always recorded; never inferred later."""

    FINISHED = "finished"  # the agent submitted / the task ended normally
    TASK_CAP = "task_cap"  # a per-task cap (max tokens, max tool calls) was hit: the agent failed
    CONTEXT_FULL = "context_full"  # the model's context (max_seq_len) is full: a system limit
    ROUND_BUDGET_PAUSED = "round_budget_paused"  # the system cut sampling: resume or bootstrap
    AGENT_ERROR = "agent_error"
    INFRA_FAULT = "infra_fault"
    REWARD_HACK = "reward_hack"
    CANCELLED = "cancelled"
    REJECTED_STALE = "rejected_stale"


@dataclasses.dataclass
class Turn:
    """One model call and the environment's answer."""

    context: np.ndarray  # int32 [C]: the model's actual input for this turn
    action: np.ndarray  # int32 [A]: generated tokens (trained on)
    logp: np.ndarray  # float32 [A]: log-prob under the distribution actually sampled from
    logp_raw: np.ndarray  # float32 [A]: log-prob at temperature 1, no truncation
    version: np.ndarray  # int32 [A]: policy version that produced each token
    observation: np.ndarray  # int32 [O]: tokens appended by the environment (never trained on)
    routes: np.ndarray | None = None  # int32 [C + A, layers, k]: MoE experts used at sampling
    pauses: tuple[int, ...] = ()  # action offsets where sampling paused and later resumed
    recomputed: bool = False  # the slot engine evicted the episode while its environment ran:
    #                           this turn's context was re-prefilled (partial rollout's recompute)


@dataclasses.dataclass
class Trajectory:
    """One agent episode with the full record of how it was produced."""

    task_id: str
    task_class: str
    turns: list[Turn]
    stop_reason: StopReason
    rewards: list[float] = dataclasses.field(default_factory=list)  # per step
    final_reward: float | None = None  # None: masked out (e.g. infra fault), never a silent zero
    label: str | None = None  # the verifier's Verdict label
    reward_evidence: dict[str, Any] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)  # generation/env/queue/verify
    env_fingerprint: str = ""
    verifier_version: str = ""
    submit_index: int = -1  # position in the scheduler's submission order

    @property
    def num_action_tokens(self) -> int:
        return int(sum(t.action.size for t in self.turns))

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def versions(self) -> np.ndarray:
        if not self.turns:
            return np.zeros((0,), np.int32)
        return np.concatenate([t.version for t in self.turns]).astype(np.int32)

    def is_keep_all(self) -> bool:
        """True when each turn's context extends the previous turn's full stream exactly."""
        for prev, cur in zip(self.turns, self.turns[1:], strict=False):
            stream = np.concatenate([prev.context, prev.action, prev.observation])
            if cur.context.shape != stream.shape or not np.array_equal(cur.context, stream):
                return False
        return True


@dataclasses.dataclass
class Row:
    """A learner row: tokens with per-token masks and behaviour record (aligned with tokens)."""

    tokens: np.ndarray  # int32 [T]
    loss_mask: np.ndarray  # float32 [T]: 1 on action tokens only
    logp: np.ndarray  # float32 [T]: 0 off the action tokens
    logp_raw: np.ndarray  # float32 [T]
    version: np.ndarray  # int32 [T]: -1 off the action tokens
    routes: np.ndarray | None  # int32 [T, layers, k] or None


def _row(context: np.ndarray, turns: list[Turn]) -> Row:
    """One row: ``context`` + every turn's action and (except the last's) observation."""
    parts, mask, logp, raw, ver = [context], [np.zeros(context.size)], [], [], []
    logp.append(np.zeros(context.size))
    raw.append(np.zeros(context.size))
    ver.append(np.full(context.size, -1))
    for i, t in enumerate(turns):
        obs = t.observation if i < len(turns) - 1 else t.observation[:0]
        parts += [t.action, obs]
        mask += [np.ones(t.action.size), np.zeros(obs.size)]
        logp += [t.logp, np.zeros(obs.size)]
        raw += [t.logp_raw, np.zeros(obs.size)]
        ver += [t.version, np.full(obs.size, -1)]
    cat = lambda xs, dt: np.concatenate(xs).astype(dt)
    tokens = cat(parts, np.int32)
    # The last turn's routes cover its context + action, which is the whole row.
    routes = turns[-1].routes
    if routes is not None and routes.shape[0] != tokens.size:
        raise ValueError(f"routes cover {routes.shape[0]} positions, the row has {tokens.size}")
    return Row(
        tokens=tokens,
        loss_mask=cat(mask, np.float32),
        logp=cat(logp, np.float32),
        logp_raw=cat(raw, np.float32),
        version=cat(ver, np.int32),
        routes=None if routes is None else routes.astype(np.int32),
    )


def to_rows(traj: Trajectory) -> list[Row]:
    """Training rows that reproduce exactly what the model saw for every action."""
    if not traj.turns:
        return []
    if traj.is_keep_all():
        return [_row(traj.turns[0].context, traj.turns)]
    return [_row(t.context, [t]) for t in traj.turns]


@dataclasses.dataclass
class TrajectoryMeta(Trajectory):
    """A trajectory held by another process of a multi-process run: every scalar field of its
    :class:`Trajectory` (what the scheduler decides on and the step's metrics read), no tokens.
    ``row_sizes``: the token count of each of its learner rows (:func:`to_rows`), so every
    process can lay out a learner batch whose rows it does not hold."""

    action_tokens: int = 0
    version_min: int = -1  # the oldest policy version among its action tokens (-1: none)
    row_sizes: tuple[int, ...] = ()
    turn_count: int = 0
    process: int = 0  # the process that holds the trajectory

    @property
    def num_action_tokens(self) -> int:
        return self.action_tokens

    @property
    def num_turns(self) -> int:
        return self.turn_count

    @property
    def versions(self) -> np.ndarray:
        return np.asarray([self.version_min] if self.action_tokens else [], np.int32)


def decision_evidence(evidence: dict) -> dict:
    """The part of a verdict's evidence that decisions read on any process: the fault's
    attribution (the retry policy's root cause) and the rubric's score (``rubric.mode='reward'``)."""
    out = {}
    if "attribution" in evidence:
        out["attribution"] = evidence["attribution"]
    if isinstance(evidence.get("rubric"), dict) and "score" in evidence["rubric"]:
        out["rubric"] = {"score": evidence["rubric"]["score"]}
    return out


def meta_of(traj: Trajectory, process: int = 0) -> TrajectoryMeta:
    """``traj`` (held by ``process``) without its tokens: what crosses processes instead (its
    full evidence stays with it, in its process's journal)."""
    if isinstance(traj, TrajectoryMeta):
        return traj
    fields = {f.name: getattr(traj, f.name) for f in dataclasses.fields(Trajectory) if f.name != "turns"}
    fields["reward_evidence"] = decision_evidence(traj.reward_evidence)
    versions = traj.versions
    return TrajectoryMeta(
        **fields,
        turns=[],
        action_tokens=traj.num_action_tokens,
        version_min=int(versions.min()) if versions.size else -1,
        row_sizes=tuple(int(r.tokens.size) for r in to_rows(traj)),
        turn_count=len(traj.turns),
        process=process,
    )
