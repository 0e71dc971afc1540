"""minirepo as a :class:`~agentjax.tasks.TaskSuite`: generated toy repositories, word tokenizer."""

from __future__ import annotations

import dataclasses

from agentjax.envs import minirepo
from agentjax.sampling.worker import GroupTask
from agentjax.tasks.protocol import Demo


class MinirepoSuite:
    name = "minirepo"
    tools: tuple = ()
    system = ""

    def __init__(self, run):
        t = run.task
        diff = minirepo.PRESETS[t.difficulty]
        if not t.hack_tool:
            diff = dataclasses.replace(diff, hack_prob=0.0)
        latency = minirepo.LONG_TAILED if t.latency == "long_tailed" else minirepo.FIXED
        self.difficulty = diff
        self.env_config = minirepo.EnvConfig(max_steps=t.max_steps, latency=latency)
        self.heldout = [minirepo.generate(i, "heldout", diff) for i in range(t.eval_tasks)]
        self.group_size, self.base = run.rl.group_size, run.seed * 1_000_003
        self.audit_fn = lambda task, env: env.audit()
        self.planted = lambda task: bool(task.hack_tool)

    def train_item(self, i: int) -> GroupTask:
        """Each training task ``group_size`` times in a row, each member with its own seed."""
        task = minirepo.generate(self.base + i // self.group_size, "train", self.difficulty)
        return GroupTask(task, seed=int(i), task_id=task.task_id, task_class=task.task_class)

    def make_env(self):
        return minirepo.MinirepoEnv(self.env_config)

    def vocabulary(self):
        return minirepo.vocabulary()

    def demonstrations(self, n: int, seed: int) -> list[Demo]:
        from agentjax.envs.minirepo.agents import demonstrations  # noqa: PLC0415

        return [Demo(e.pairs, e.success) for e in demonstrations(n, seed=seed, difficulty=self.difficulty)]

    def baseline(self) -> float:
        """The imperfect scripted demonstrator's held-out success (the bar RL has to beat)."""
        from agentjax.envs.minirepo.agents import DemonstratorAgent, success_rate  # noqa: PLC0415

        return success_rate(DemonstratorAgent, self.heldout, self.make_env())
