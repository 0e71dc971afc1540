"""Simulated tool latency for minirepo (virtual seconds: nothing ever sleeps).

Each tool has a latency distribution; ``run`` and ``submit`` (which execute tests) are scaled by
the task's :attr:`~agentjax.envs.minirepo.tasks.Task.cost` (mean call-chain length of the tested
functions), so deeper repositories are slower. A draw is a pure function of
``(model, tool, task, seed, step)``, so an episode's latencies are reproducible and a task's
*true duration* (:func:`task_duration`) can be computed without running it.

Distributions (``scale`` and ``shape`` per kind):

- ``fixed``: ``scale``.
- ``lognormal``: ``scale * exp(shape * z)``, ``z ~ N(0, 1)`` (median ``scale``).
- ``pareto``: ``scale * u ** (-1 / shape)``, ``u ~ U(0, 1]`` (minimum ``scale``, tail index
  ``shape``; the mean is infinite for ``shape <= 1``).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence

KINDS = ("fixed", "lognormal", "pareto")
SOLUTION_TOOLS = ("run", "view", "edit", "submit")  # the shortest honest episode


@dataclasses.dataclass(frozen=True)
class Dist:
    """One latency distribution (see the module docstring)."""

    kind: str = "fixed"
    scale: float = 0.1
    shape: float = 1.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"latency kind must be one of {KINDS}, got {self.kind!r}")
        if self.scale < 0 or self.shape <= 0:
            raise ValueError(f"need scale >= 0 and shape > 0, got {self.scale}, {self.shape}")

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.scale
        if self.kind == "lognormal":
            return self.scale * math.exp(self.shape * rng.gauss(0.0, 1.0))
        return self.scale * (1.0 - rng.random()) ** (-1.0 / self.shape)


@dataclasses.dataclass(frozen=True)
class LatencyModel:
    """Per-tool latency; tools not listed take ``default``."""

    tools: Mapping[str, Dist] = dataclasses.field(default_factory=dict)
    default: Dist = Dist("fixed", 0.1)
    cost_scaled: tuple[str, ...] = ("run", "submit")
    timeout_s: float = 30.0  # what an injected ``timeout`` fault costs

    def latency(self, tool: str, task, seed: int, step: int) -> float:
        """Seconds the tool call at ``step`` of the episode seeded ``seed`` takes."""
        rng = random.Random(f"latency:{seed}:{step}:{tool}:{task.task_id}")
        value = self.tools.get(tool, self.default).sample(rng)
        return value * task.cost if tool in self.cost_scaled else value


FIXED = LatencyModel(
    tools={"run": Dist("fixed", 1.0), "submit": Dist("fixed", 2.0)}, default=Dist("fixed", 0.1)
)
LONG_TAILED = LatencyModel(
    tools={"run": Dist("lognormal", 1.0, 1.0), "submit": Dist("pareto", 1.0, 1.5)},
    default=Dist("lognormal", 0.1, 0.5),
)


def task_duration(task, model: LatencyModel, seed: int, tools: Sequence[str] = SOLUTION_TOOLS) -> float:
    """True duration of an episode that calls ``tools`` in order (default: run, view, edit,
    submit), with no faults: the same numbers the environment reports for those steps."""
    return sum(model.latency(tool, task, seed, step) for step, tool in enumerate(tools))
