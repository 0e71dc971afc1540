"""Dynamic sampling: the scheduler's gate that keeps groups of equal rewards out of the batch.

A GRPO group whose members all got the same reward (all pass or all fail) has advantage 0 for
every member: it costs a learner row and carries no signal. With ``scheduler.uniform_groups='drop'``
the scheduler holds each completed trajectory until its group is decided (every member has an
outcome), then releases the group to the learner if its rewards differ and drops it (terminal
``filtered``) if they are all equal, and samples more groups in its place, so that every learner
step sees ``rl.batch_size`` informative trajectories (DAPO's dynamic sampling, Yu et al. 2025).
In ``sync`` mode a round whose groups were dropped is followed by rounds for the missing ones
before the learner steps; in ``async`` and ``windowed_fifo`` free slots simply take more tasks.

The drop budget bounds the extra sampling: once ``drop_budget x batch_size`` trajectories were
dropped since the last learner step, uniform groups are released (trained with advantage 0)
until the next step, so a policy on which every group is uniform still steps (and an anchor
such as ``loss.kl_coef`` still acts) instead of sampling forever.

Members are grouped by ``task_id`` (the task source gives each group's ``group_size`` members
consecutively; a retried member keeps its task id). An outcome is a completion with a reward, or
an end without one: masked with no retry queued, failed, cancelled. A member rejected over the
version-gap bound while held has already counted: it only leaves the group.
"""

from __future__ import annotations

import dataclasses

from agentjax.choice import Choice


class UniformGroups(Choice):
    KEEP = "keep"  # train every completed trajectory (the classic GRPO batch)
    DROP = "drop"  # dynamic sampling: drop all-same groups and sample more in their place


@dataclasses.dataclass
class GroupGate:
    """The gate's state (part of the scheduler snapshot). ``held``: task id -> its completed
    members (submission index, reward) waiting for the group's last outcome; ``seen``: outcomes so
    far per open group; ``dropped``: trajectories dropped since the last learner step."""

    group_size: int
    budget: int  # trajectories that may be dropped per learner step
    held: dict = dataclasses.field(default_factory=dict)
    seen: dict = dataclasses.field(default_factory=dict)
    dropped: int = 0
    dropped_total: int = 0
    released_uniform: int = 0  # uniform trajectories trained because the budget was spent

    def outcome(self, task_id: str, index: int | None = None, reward: float | None = None):
        """Counts one member's outcome (``index`` and ``reward`` for a completion with a reward;
        held until the group is decided). Returns ``(release, drop)``: submission indices to make
        consumable (in completion order) and to drop; both empty while the group is open."""
        if index is not None:
            self.held.setdefault(task_id, []).append((index, float(reward)))
        self.seen[task_id] = self.seen.get(task_id, 0) + 1
        if self.seen[task_id] < self.group_size:
            return [], []
        del self.seen[task_id]
        members = self.held.pop(task_id, [])
        indices = [i for i, _ in members]
        if len({r for _, r in members}) > 1:
            return indices, []
        if self.dropped + len(indices) > self.budget:
            self.released_uniform += len(indices)
            return indices, []
        self.dropped += len(indices)
        self.dropped_total += len(indices)
        return [], indices

    def leave(self, index: int) -> None:
        """A held member rejected over the gap bound: it leaves its group (its outcome stays)."""
        for task_id, members in self.held.items():
            self.held[task_id] = [m for m in members if m[0] != index]

    def holding(self) -> list[int]:
        return sorted(i for members in self.held.values() for i, _ in members)

    def on_step(self) -> None:
        self.dropped = 0

    def clear(self) -> None:
        self.held, self.seen = {}, {}

    def copy(self) -> GroupGate:
        """An independent copy (the scheduler's step changes a copy, never its input state)."""
        held = {k: list(v) for k, v in self.held.items()}
        return dataclasses.replace(self, held=held, seen=dict(self.seen))

    def account(self) -> dict:
        """Dynamic sampling's figures at a learner step: uniform-group trajectories dropped since
        the last step and in total, uniform ones trained because the drop budget was spent."""
        return {
            "sampling/dropped_uniform": float(self.dropped),
            "sampling/dropped_uniform_total": float(self.dropped_total),
            "sampling/released_uniform_total": float(self.released_uniform),
        }


@dataclasses.dataclass(frozen=True)
class PassGate:
    """``uniform_groups='keep'``: every outcome with a reward is released at once, nothing is
    dropped (the gate's interface, so the scheduler has no "no gate" branches)."""

    group_size: int = 1  # a sync round's unit
    dropped: int = 0

    def outcome(self, task_id: str, index: int | None = None, reward: float | None = None):
        return ([] if index is None else [index]), []

    def leave(self, index: int) -> None:
        pass

    def holding(self) -> list[int]:
        return []

    def on_step(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def copy(self) -> PassGate:
        return self

    def account(self) -> dict:
        return {}
