"""The task protocol: what a training run needs from a task, with minirepo and codefix built in.

    suite = tasks.make(run)          # a TaskSuite, from run.task.name
    suite.train_item(i)              # the i-th GRPO group member (task, seed, id, class)
    suite.heldout                    # held-out tasks for the in-loop evaluation
    suite.make_env()                 # a fresh host environment (agentjax.envs.protocol.Env)
    suite.demonstrations(n, seed)    # scripted episodes for the supervised warm start
    suite.baseline()                 # the scripted demonstrator's held-out success
    suite.vocabulary()               # words for the built-in word tokenizer (None: needs a HF one)
    suite.tools, suite.system        # tool schemas and system prompt for a chat template

``system.py`` composes a run through this interface only; a user's own task implements
:class:`TaskSuite` and registers a constructor in :data:`SUITES`.
"""

from __future__ import annotations

from agentjax.tasks.protocol import Demo, TaskSuite

SUITES = {}


def _register():
    from agentjax.tasks import codefix, minirepo  # noqa: PLC0415

    SUITES.setdefault("minirepo", minirepo.MinirepoSuite)
    SUITES.setdefault("codefix", codefix.CodefixSuite)


def make(run) -> TaskSuite:
    """The task suite named by ``run.task.name``."""
    _register()
    return SUITES[run.task.name](run)


__all__ = ["SUITES", "Demo", "TaskSuite", "make"]
