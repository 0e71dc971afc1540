"""minirepo: a learnable, procedurally generated multi-turn bug-fix task (see docs/minirepo.md).

A "repository" of a few one-line integer functions, one with a single-token bug; tools to run the
visible tests, view and edit a function and submit; an isolated verifier with hidden tests.
"""

from agentjax.envs.minirepo.env import FAULTS, EnvConfig, MinirepoEnv
from agentjax.envs.minirepo.lang import Edit, Fn
from agentjax.envs.minirepo.latency import FIXED, LONG_TAILED, Dist, LatencyModel, task_duration
from agentjax.envs.minirepo.tasks import (
    DEFAULT,
    EASY,
    HARD,
    PRESETS,
    SPLITS,
    Difficulty,
    Task,
    Test,
    generate,
    split_of,
)
from agentjax.envs.minirepo.verifier import Submission, audit, verify
from agentjax.envs.minirepo.vocab import in_vocabulary, vocabulary

__all__ = [
    "DEFAULT", "EASY", "FAULTS", "FIXED", "HARD", "LONG_TAILED", "PRESETS", "SPLITS", "Difficulty",
    "Dist", "Edit", "EnvConfig", "Fn", "LatencyModel", "MinirepoEnv", "Submission", "Task", "Test",
    "audit", "generate", "in_vocabulary", "split_of", "task_duration", "verify", "vocabulary",
]  # fmt: skip
