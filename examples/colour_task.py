"""A task and a loss written outside ``agentjax/``, trained by ``launch.train`` naming both by path.

    python -m launch.train --config=configs/smoke.py --workdir=/tmp/colour \
        --config.task.name=examples.colour_task:make_suite \
        --config.loss.name=examples.colour_task:clipped_pg_with_entropy --config.loss.kwargs.beta=0.01
    python -m launch.eval --workdir=/tmp/colour          # its checkpoint on the held-out split

The task: each episode hides one colour. The agent may ``look`` (the environment answers ``the
colour is <c>``) and must then ``guess <c>``; a separate verifier judges the guess (reward 1 for
the hidden colour, 0 otherwise, ``agent_error`` for a malformed action). The warm start imitates a
scripted agent that looks and then guesses right 60% of the time. Tasks are a pure function of
their index, so the held-out split (indices from 10**6) never meets a training task.

The loss: PPO's clipped surrogate from :mod:`agentjax.objectives`, minus ``beta`` times the
sampled tokens' entropy estimate ``-mean(logp)``; it adds one metric of its own
(``loss/entropy_estimate``), which shows up in the run's ``metrics.jsonl``.
"""

from __future__ import annotations

import dataclasses
import random

import jax.numpy as jnp

from agentjax import objectives as obj
from agentjax.envs.protocol import Label, StepResult, Verdict
from agentjax.tasks import Demo, GroupTask

COLOURS = ("red", "green", "blue", "amber")
WORDS = ("which", "colour", "?", "tools", ":", "look", "guess", "the", "is", "error", "done", *COLOURS)
HELDOUT_BASE = 10**6


@dataclasses.dataclass(frozen=True)
class ColourTask:
    task_id: str
    colour: str
    task_class: str = "colour"


def task(i: int) -> ColourTask:
    return ColourTask(f"colour-{i}", random.Random(f"colour:{i}").choice(COLOURS))


class Verifier:
    """Judges the final guess; the agent never sees the hidden colour except through ``look``."""

    version = "colour-verifier-1"

    def judge(self, t: ColourTask, guess: str | None) -> Verdict:
        label = Label.AGENT_ERROR if guess is None else Label.PASS if guess == t.colour else Label.FAIL
        return Verdict(
            reward=1.0 if label is Label.PASS else 0.0,
            label=label,
            tests_expected=1,
            tests_run=1,
            tests_passed=int(label is Label.PASS),
            tests_skipped=0,
            evidence={"guess": guess},
            verifier_version=self.version,
            env_fingerprint="colour-env-1",
        )


class ColourEnv:
    """``reset(task, seed)`` then ``step(action)``: ``look`` or ``guess <colour>`` (the end)."""

    def __init__(self, max_steps: int):
        self.max_steps, self.verifier = max_steps, Verifier()

    def reset(self, t: ColourTask, seed: int) -> str:
        self.task, self.steps = t, 0
        return "which colour ? tools : look guess"

    def step(self, action: str) -> StepResult:
        self.steps += 1
        words = action.split()
        if words[:1] == ["look"] and len(words) == 1 and self.steps < self.max_steps:
            return StepResult(f"the colour is {self.task.colour}", 0.0, False)
        guess = words[1] if len(words) == 2 and words[0] == "guess" and words[1] in COLOURS else None
        verdict = self.verifier.judge(self.task, guess)
        stop = "agent_error" if guess is None else "finished"
        return StepResult("done", verdict.reward, True, stop, {"guess": guess}, verdict)


class ColourSuite:
    """The task protocol (agentjax/tasks/protocol.py): train items, held-out tasks, env, verifier."""

    name = "colour"
    record_types = (ColourTask,)  # its tasks sit in the journal and the checkpoint's snapshot

    def __init__(self, run, accuracy: float = 0.6):
        self.group_size, self.max_steps, self.accuracy = run.rl.group_size, run.task.max_steps, accuracy
        self.base = run.seed * 1_000_003
        self.heldout = [task(HELDOUT_BASE + i) for i in range(run.task.eval_tasks)]

    def train_item(self, i: int) -> GroupTask:
        t = task((self.base + i // self.group_size) % HELDOUT_BASE)
        return GroupTask(t, seed=int(i), task_id=t.task_id, task_class=t.task_class)

    def make_env(self) -> ColourEnv:
        return ColourEnv(self.max_steps)

    def vocabulary(self) -> list[str]:
        return list(WORDS)

    def demonstrations(self, n: int, seed: int) -> list[Demo]:
        rng, out = random.Random(seed), []
        for i in range(n):
            t = task(i % HELDOUT_BASE)
            right = rng.random() < self.accuracy
            guess = t.colour if right else rng.choice([c for c in COLOURS if c != t.colour])
            pairs = [
                ("which colour ? tools : look guess", "look"),
                (f"the colour is {t.colour}", f"guess {guess}"),
            ]
            out.append(Demo(pairs, right))
        return out

    def baseline(self) -> float:
        """The scripted agent's held-out success: it guesses right ``accuracy`` of the time."""
        rng, env, passed = random.Random(0), self.make_env(), 0
        for i, t in enumerate(self.heldout):
            env.reset(t, i)
            seen = env.step("look").observation.split()[-1]
            guess = seen if rng.random() < self.accuracy else rng.choice([c for c in COLOURS if c != seen])
            passed += env.step(f"guess {guess}").verdict.label is Label.PASS
        return passed / len(self.heldout)


def make_suite(run, **kwargs) -> ColourSuite:
    """The factory ``task.name=examples.colour_task:make_suite`` names (``task.kwargs`` here)."""
    return ColourSuite(run, **kwargs)


def clipped_pg_with_entropy(logp, behav_logp, advantages, mask, *, beta=0.0, clip=0.2, max_len=None):
    """PPO clip (``agentjax.objectives.ppo_loss``) minus ``beta * H``, ``H ~ -mean(logp)``."""
    loss, metrics = obj.ppo_loss(
        logp,
        behav_logp,
        advantages,
        mask,
        clip_low=clip,
        clip_high=clip,
        max_len=max_len,
        aggregation="token_mean",
    )
    entropy = -obj.masked_mean(logp, mask)
    return loss - beta * entropy, {**metrics, "entropy_estimate": entropy, "beta": jnp.asarray(beta)}
