"""The :class:`TaskSuite` protocol (see :mod:`agentjax.tasks`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

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

    def train_item(self, i: int) -> GroupTask: ...

    def make_env(self) -> Any: ...

    def demonstrations(self, n: int, seed: int) -> list[Demo]: ...

    def baseline(self) -> float: ...

    def vocabulary(self) -> Sequence[str] | None: ...
