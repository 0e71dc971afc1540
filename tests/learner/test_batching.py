"""The learner batch's bookkeeping metrics (``batch/*``), which the metrics rows and TensorBoard show."""

import numpy as np
import pytest

from agentjax.learner.batching import make_batch
from agentjax.trajectory import StopReason, Trajectory, Turn


def _traj(task_id: str, actions: list[int], reward: float) -> Trajectory:
    turns, ctx = [], np.arange(3, dtype=np.int32)
    for n in actions:
        act = np.full(n, 5, np.int32)
        obs = np.full(2, 7, np.int32)
        z = np.zeros(n, np.float32)
        turns.append(Turn(ctx, act, z, z, np.zeros(n, np.int32), obs))
        ctx = np.concatenate([ctx, act, obs])
    return Trajectory(task_id, "default", turns, StopReason.FINISHED, final_reward=reward, label="pass")


def test_batch_metrics_count_the_completion_length_in_action_tokens():
    trajs = [_traj("a", [2, 3], 1.0), _traj("a", [4], 0.0)]  # 5 and 4 action tokens
    _, m = make_batch(trajs, [1.0, 1.0], rows=4, length=32)
    assert m["batch/action_tokens"] == 9.0
    assert m["batch/completion_tokens_mean"] == pytest.approx(4.5)
    assert m["batch/rows"] == 2.0
