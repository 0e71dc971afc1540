"""The task protocol: what a training run needs from a task, with minirepo and codefix built in.

    suite = tasks.make(run)          # a TaskSuite, from run.task.name
    suite.train_item(i)              # the i-th GRPO group member (task, seed, id, class)
    suite.heldout                    # held-out tasks for the in-loop evaluation
    suite.make_env()                 # a fresh host environment (agentjax.envs.protocol.Env)
    suite.demonstrations(n, seed)    # scripted episodes for the supervised warm start
    suite.baseline()                 # the scripted demonstrator's held-out success
    suite.vocabulary()               # words for the built-in word tokenizer (None: needs a HF one)
    suite.tools, suite.system        # tool schemas and system prompt for a chat template

``agentjax.run`` composes a run through this interface only. ``task.name`` is a short name of
:data:`BUILTIN` or any ``package.module:factory``: a callable ``factory(run, **task.kwargs)``
returning a suite (:mod:`agentjax.tasks.protocol` documents the minimal one); the built-ins are
import paths of their classes, loaded the same way.
"""

from __future__ import annotations

from agentjax import importpath
from agentjax.policy.config import ConfigError
from agentjax.sampling.worker import GroupTask
from agentjax.tasks.protocol import Demo, TaskSuite, checked

BUILTIN = {
    "minirepo": "agentjax.tasks.minirepo:MinirepoSuite",
    "codefix": "agentjax.tasks.codefix:CodefixSuite",
    "dataset": "agentjax.tasks.dataset:DatasetSuite",  # JSONL prompts + a verifier by import path
}


def resolve(name: str):
    """The factory ``task.name`` names (a ConfigError naming the field when it cannot be loaded)."""
    if not importpath.is_path(name) and name not in BUILTIN:
        raise ConfigError(
            f"task.name={name!r} is invalid; allowed values: {list(BUILTIN)} "
            "or an import path 'package.module:factory'"
        )
    try:
        factory = importpath.load(BUILTIN.get(name, name), "task.name")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not callable(factory):
        raise ConfigError(
            f"task.name={name!r} is a {type(factory).__name__}; name a factory "
            "factory(run, **task.kwargs) -> task suite (agentjax/tasks/protocol.py)"
        )
    return factory


def make(run) -> TaskSuite:
    """The task suite named by ``run.task.name``, built with ``run.task.kwargs``."""
    factory, kwargs = resolve(run.task.name), dict(run.task.kwargs)
    try:
        suite = factory(run, **kwargs)
    except TypeError as e:
        if not kwargs:
            raise
        raise ConfigError(f"task.name={run.task.name!r} with task.kwargs={sorted(kwargs)}: {e}") from None
    return checked(suite, run.task.name)


__all__ = ["BUILTIN", "Demo", "GroupTask", "TaskSuite", "make", "resolve"]
