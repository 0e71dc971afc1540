"""The learner: train state and jitted train step, objective by config, batching, checkpoints.

from agentjax.learner import LossConfig, OptimConfig, init_train_state, make_optimizer, make_train_step
"""

from agentjax.learner.batching import make_batch
from agentjax.learner.checkpoint import CheckpointError, latest_step, restore_checkpoint, save_checkpoint
from agentjax.learner.objective import LossConfig, policy_objective
from agentjax.learner.step import OptimConfig, TrainState, init_train_state, make_optimizer, make_train_step

__all__ = [
    "CheckpointError",
    "LossConfig",
    "OptimConfig",
    "TrainState",
    "init_train_state",
    "latest_step",
    "make_batch",
    "make_optimizer",
    "make_train_step",
    "policy_objective",
    "restore_checkpoint",
    "save_checkpoint",
]
