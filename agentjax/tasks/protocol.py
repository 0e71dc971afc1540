"""The :class:`TaskSuite` protocol (see :mod:`agentjax.tasks`), and the check a suite passes.

The minimal task a user writes (``task.name=my_pkg.my_task:make_suite``; ``examples/`` has one):

    class MySuite:
        name = "my_task"
        heldout = [...]                      # held-out task objects (any type your env takes)
        def __init__(self, run, **kwargs):   # the RunConfig, and task.kwargs
        def train_item(self, i): -> GroupTask(task, seed, task_id, task_class)
        def make_env(self):      -> an Env (agentjax.envs.protocol): reset(task, seed) -> str,
                                    step(action) -> StepResult, its final step with a Verdict
        def vocabulary(self):    -> words for the built-in word tokenizer (None: a HF tokenizer)

Optional members, with the defaults :func:`checked` gives an absent one: ``demonstrations(n,
seed)`` (needed only with ``warm_start.steps > 0``), ``baseline()`` (a scripted agent's held-out
success; nan), ``tools`` (() ), ``system`` (""), ``audit_fn`` and ``planted`` (None),
``parses_replies`` (False; True: a HF chat codec hands the environment the reply text as it is,
and takes demonstrations' actions as reply text, instead of parsing/rendering tool calls), and
``eval_set`` ("held-out": what ``heldout`` is, in the run's log, header and report), and
``record_types``: the dataclasses a task object is made of, allowed into the journal and the
checkpoint's scheduler snapshot (:func:`agentjax.tagjson.allow`; ``()``: none stored there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agentjax import tagjson
from agentjax.policy.config import ConfigError
from agentjax.sampling.worker import GroupTask


@dataclasses.dataclass(frozen=True)
class Demo:
    """One scripted episode: ``[(observation, plain-format action), ...]`` and whether it passed."""

    pairs: Sequence[tuple[str, str]]
    success: bool


class TaskSuite(Protocol):
    name: str
    heldout: Sequence[Any]
    tools: tuple  # OpenAI-style function schemas (chat templates render them); () for none
    system: str  # system prompt for a chat template ("" for none)
    audit_fn: Callable | None  # (task, env) -> Verdict of the independent audit, or None
    planted: Callable[[Any], bool] | None  # whether a task offers a planted hack
    eval_set: str  # what ``heldout`` is, named in the run's log, header and report

    def train_item(self, i: int) -> GroupTask: ...

    def make_env(self) -> Any: ...

    def demonstrations(self, n: int, seed: int) -> list[Demo]: ...

    def baseline(self) -> float: ...

    def vocabulary(self) -> Sequence[str] | None: ...


REQUIRED = ("heldout", "train_item", "make_env", "vocabulary")
OPTIONAL = {
    "tools": (),
    "system": "",
    "audit_fn": None,
    "planted": None,
    "record_types": (),
    "parses_replies": False,
    "eval_set": "held-out",
}


class _Completed:
    """A user's suite with the optional members it leaves out (see the module doc)."""

    def __init__(self, suite, name: str):
        self._suite, self._field = suite, name
        self.name = getattr(suite, "name", name)

    def __getattr__(self, attr):
        if hasattr(self._suite, attr):
            return getattr(self._suite, attr)
        if attr in OPTIONAL:
            return OPTIONAL[attr]
        raise AttributeError(attr)

    def demonstrations(self, n: int, seed: int) -> list[Demo]:
        if not hasattr(self._suite, "demonstrations"):
            raise ConfigError(
                f"task.name={self._field!r} has no demonstrations(n, seed): set warm_start.steps=0"
            )
        return self._suite.demonstrations(n, seed)

    def baseline(self) -> float:
        return self._suite.baseline() if hasattr(self._suite, "baseline") else float("nan")


def checked(suite, name: str):
    """``suite`` (what ``task.name``'s factory returned) with the optional members filled in;
    a missing required member is a ConfigError naming ``task.name`` and the members."""
    missing = [m for m in REQUIRED if not hasattr(suite, m)]
    if missing:
        raise ConfigError(
            f"task.name={name!r} returned a {type(suite).__name__} without {missing}; a task suite "
            f"has {list(REQUIRED)} (agentjax/tasks/protocol.py)"
        )
    if not len(suite.heldout):
        raise ConfigError(
            f"task.name={name!r}: its suite's heldout is empty (the in-loop evaluation's tasks)"
        )
    tagjson.allow(*getattr(suite, "record_types", ()))
    return _Completed(suite, name)
