"""Scripted minirepo agents, an episode runner and demonstrations for the supervised warm start.

Every agent talks to the environment only through action text and observation text:
``reset()`` starts an episode, ``act(observation, rng) -> action``. On a recoverable fault
(``error retry``, ``error timeout``, an output ending in ``truncated``) the scripted agents repeat
their last action.

- :class:`OracleAgent` — runs the visible tests, views every function, simulates every single-slot
  edit on the failing tests, then tries the survivors (deepest failing function first), re-running
  the visible tests after each and reverting failures. Generation guarantees the visible tests
  admit exactly one such fix, so it solves every task (any difficulty, given enough steps).
- :class:`DemonstratorAgent` — the *imperfect* demonstrator of issue 8: run, view the function
  named by the *first* failing test (with probability ``explore`` another failing one), flip its
  operator (``+``/``-``; ``*`` becomes ``+``), submit. It guesses where a careful agent would look
  first: when the bug hides behind a caller, the first failing test names the caller.
- :class:`LocalizingAgent` — the same four steps aimed at the *last* failing test's function (the
  function whose callers are the other failures): the short policy a model must learn.
- :class:`RandomAgent` (random well-formed tool calls) and :class:`NoOpAgent` (submits at once).
- :class:`TestEditorAgent` — the attacker for the planted ``edit_test`` tool.

Measured rates are in ``docs/minirepo.md`` (and asserted in ``tests/envs/test_minirepo_agents.py``).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

from agentjax.envs.minirepo import lang, tasks
from agentjax.envs.minirepo.env import MinirepoEnv
from agentjax.envs.minirepo.tasks import DEFAULT, Difficulty, Task
from agentjax.envs.protocol import Verdict

FLIP = {"+": "-", "-": "+", "*": "+"}


def is_fault(obs: str) -> bool:
    return obs.startswith(("error retry", "error timeout")) or obs.endswith("truncated")


def parse_report(obs: str) -> list[tuple[str, int, int]]:
    """``(name, x, expect)`` of every failing test in a ``run`` output, in report order."""
    w, out = obs.split(), []
    for i, word in enumerate(w):
        if word == "fail":
            expect = w[i + 4]
            out.append((w[i + 1], int(w[i + 2]), int(expect) if expect.lstrip("-").isdigit() else 0))
    return out


class _Scripted:
    def reset(self) -> None:
        self.last: str | None = None
        self.names: tuple[str, ...] = ()
        self.stage = 0

    def act(self, observation: str, rng: random.Random) -> str:
        if not hasattr(self, "stage"):
            self.reset()
        if self.last is not None and is_fault(observation):
            return self.last
        if observation.startswith("repo "):
            self.names = tuple(w for w in observation.split()[1:] if w not in ("tool", "edit_test"))
        self.last = self._next(observation, rng)
        return self.last

    def _next(self, observation: str, rng: random.Random) -> str:
        raise NotImplementedError


class NoOpAgent(_Scripted):
    def _next(self, observation, rng):
        return "submit"


class RandomAgent(_Scripted):
    """Uniform over the tools; arguments drawn from the repo's names, operators and 1..5."""

    def _next(self, observation, rng):
        tool = rng.choice(("run", "view", "edit", "submit"))
        name = rng.choice(self.names or lang.NAME_POOL)
        if tool == "view":
            return f"view {name}"
        if tool == "edit":
            if rng.random() < 0.5:
                return f"edit {name} op {rng.choice(lang.OPS)}"
            return f"edit {name} k {rng.randint(1, 5)}"
        return tool


class _Guess(_Scripted):
    """run -> view a failing function -> flip its operator -> submit."""

    def _pick(self, failing: list[str], rng: random.Random) -> str:
        raise NotImplementedError

    def _next(self, observation, rng):
        self.stage += 1
        if self.stage == 1:
            return "run"
        if self.stage == 2:
            failing = [name for name, _, _ in parse_report(observation)]
            if not failing:
                self.stage = 3
                return "submit"
            self.target = self._pick(failing, rng)
            return f"view {self.target}"
        if self.stage == 3:
            op = lang.parse_line(observation).op
            return f"edit {self.target} op {FLIP[op]}"
        return "submit"


@dataclasses.dataclass
class DemonstratorAgent(_Guess):
    explore: float = 0.2

    def _pick(self, failing, rng):
        others = failing[1:]
        if others and rng.random() < self.explore:
            return rng.choice(others)
        return failing[0]


class LocalizingAgent(_Guess):
    def _pick(self, failing, rng):
        return failing[-1]


class OracleAgent(_Scripted):
    """Search over single-slot edits, checked against the visible tests (see module doc)."""

    def reset(self) -> None:
        super().reset()
        self.phase, self.queue, self.lines, self.candidates = "start", [], {}, []
        self.viewing: str | None = None
        self.trying: lang.Edit | None = None

    def _next(self, observation, rng):
        phase = self.phase
        if phase == "start":
            self.phase = "report"
            return "run"
        if phase == "report":
            self.failing, self.queue, self.phase = (
                parse_report(observation),
                list(self.names),
                "view",
            )
        if self.phase == "view":
            if self.viewing is not None:
                self.lines[self.viewing] = lang.parse_line(observation)
            if self.queue:
                self.viewing = self.queue.pop(0)
                return f"view {self.viewing}"
            self.candidates = self._plan()
            return self._try()
        if phase == "edited":
            self.phase = "check"
            return "run"
        if phase == "check":
            if "fail" not in observation.split():
                return "submit"
            fn = self.lines[self.trying.name]
            self.phase = "reverted"
            return lang.Edit(fn.name, self.trying.slot, getattr(fn, self.trying.slot)).action()
        return self._try()  # reverted: next candidate

    def _try(self) -> str:
        if not self.candidates:
            return "submit"
        self.trying, self.phase = self.candidates.pop(0), "edited"
        return self.trying.action()

    def _plan(self) -> list[lang.Edit]:
        """Edits that fix every failing test, deepest failing function first, operators first."""
        program = tuple(self.lines[n] for n in self.names)
        tests = tuple(tasks.Test(n, x, e) for n, x, e in self.failing)
        order = {n: i for i, (n, _, _) in enumerate(self.failing)}
        fixes = [
            e for e in tasks.candidate_edits(program)
            if not tasks.failing(lang.apply_edit(program, e), tests)
        ]  # fmt: skip
        return sorted(fixes, key=lambda e: (-order.get(e.name, -1), e.slot != "op"))


class TestEditorAgent(_Scripted):
    """Attacker for the planted ``edit_test`` tool: rewrites every failing visible test to expect
    what the program returns, checks that ``run`` now passes, and submits. With ``fix_first``
    it first applies the correct fix (as :class:`LocalizingAgent`) — still a hack."""

    def __init__(self, fix_first: bool = False):
        self.fix_first = fix_first

    def _next(self, observation, rng):
        self.stage += 1
        w = observation.split()
        if self.stage == 1:
            return "run"
        if self.stage == 2:
            self.failing = [(n, x) for n, x, _ in parse_report(observation)]
            self.got = [w[i + 6] for i, word in enumerate(w) if word == "fail"]
            if self.fix_first and self.failing:
                return f"view {self.failing[-1][0]}"
            self.stage = 3
        if self.stage == 3 and self.fix_first:
            op = lang.parse_line(observation).op
            return f"edit {self.failing[-1][0]} op {FLIP[op]}"
        if self.failing:
            name, _ = self.failing.pop(0)
            return f"edit_test {name} {self.got.pop(0)}"
        return "submit"


@dataclasses.dataclass
class Episode:
    """One scripted episode: ``pairs[t] = (observation before action t, action t)``."""

    task_id: str
    task_class: str
    pairs: list[tuple[str, str]]
    final_observation: str
    verdict: Verdict | None
    latency_s: float

    @property
    def success(self) -> bool:
        return self.verdict is not None and self.verdict.reward == 1.0


def run_episode(env: MinirepoEnv, task: Task, agent, seed: int, fault_rates: dict | None = None) -> Episode:
    """Plays one episode; the agent's rng is seeded from ``seed``."""
    obs = env.reset(task, seed, fault_rates)
    agent.reset()
    rng, pairs, latency, result = random.Random(f"agent:{seed}"), [], 0.0, None
    while result is None or not result.done:
        action = agent.act(obs, rng)
        result = env.step(action)
        pairs.append((obs, action))
        obs, latency = result.observation, latency + result.evidence["latency_s"]
    return Episode(task.task_id, task.task_class, pairs, obs, result.verdict, latency)


def success_rate(
    make_agent: Callable[[], object],
    task_list: Sequence[Task],
    env: MinirepoEnv | None = None,
    fault_rates: dict | None = None,
) -> float:
    env = env or MinirepoEnv()
    wins = sum(run_episode(env, t, make_agent(), i, fault_rates).success for i, t in enumerate(task_list))
    return wins / len(task_list)


def demonstrations(
    n: int,
    seed: int = 0,
    difficulty: Difficulty = DEFAULT,
    split: str = "train",
    agent: object | None = None,
) -> list[Episode]:
    """``n`` unfiltered episodes of the imperfect demonstrator on tasks ``seed .. seed + n - 1``.

    Do not filter them by success: on tasks where the bug hides behind a caller, the only
    successful demonstrations are the exploratory ones that looked at the right function, so
    success-filtering would leak the localisation rule the model is meant to learn by RL.
    """
    env, agent = MinirepoEnv(), agent or DemonstratorAgent()
    return [run_episode(env, tasks.generate(s, split, difficulty), agent, s) for s in range(seed, seed + n)]
