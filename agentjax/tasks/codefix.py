"""codefix as a :class:`~agentjax.tasks.TaskSuite`: real repositories, the sandbox, the verifier.

Every tool call runs in the sandbox (bubblewrap, uid 65534, no network, rlimits, cgroups); on
``submit`` (or at ``task.max_steps``) the isolated verifier judges the final tree, and its
verdict is the reward (``pass`` 1, ``fail`` partial credit, ``reward_hack`` -1, ``infra_fault``
masked and retried; :data:`agentjax.envs.protocol.REWARD_TREATMENT`). Held-out tasks are the last
``task.eval_tasks`` of ``codefix.tasks``; the others are trained on.

Generated tasks (``task.kwargs``, :mod:`agentjax.envs.codefix.generated`): ``generated=N`` trains on
N generated tasks of the training (family, template) pairs and evaluates on ``task.eval_tasks``
generated tasks of the held-out pairs (never trained on, under any seed); ``seed`` (default: the
run's seed) seeds the generator; the scripted agents play the first ``demo_tasks`` tasks of each
split (demonstrations, baseline). Every generated task is validated in the sandbox before use.
``eval_pairs='train'`` evaluates instead on the next ``task.eval_tasks`` draws of the TRAINING
pairs (not trained on, but their functions are: in-distribution success, not generalisation; the
run's log says which).
``rename=K`` renames K of every K+1 warm-start demonstrations (package and edited identifiers,
consistently: :func:`agentjax.envs.codefix.augment.rename`) so a small model copies, not memorises.

Observation budget, two recorded cuts: the environment keeps the head and the tail of a tool
output longer than ``codefix.max_obs_chars`` characters (the agent sees ``...[truncated]...``);
the rollout keeps the first ``caps.max_obs_tokens`` tokens of an observation and the template's
generation prompt, counting the cut tokens in the trajectory's ``observation_tokens_cut``.

The warm start imitates the scripted agents named in ``codefix.agents`` (the honest oracle, no_op,
wrong_fix, or the imperfect ``demonstrator``: read, test, patch with a diff, test, submit) played
once per training task in the real sandbox; a model writes their actions as Hermes/Qwen
``<tool_call>`` JSON (:mod:`agentjax.toolcall.calls`) through :data:`TOOLS`.
"""

from __future__ import annotations

import random

from agentjax.envs import codefix, sandbox
from agentjax.envs.codefix.audit import audit_verify
from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.policy.config import ConfigError
from agentjax.sampling.worker import GroupTask
from agentjax.tasks.protocol import Demo
from agentjax.toolcall import calls as toolcalls

TOOLS = (
    toolcalls.schema("ls", "List the repository's files.", dir="directory (default: the root)?"),
    toolcalls.schema("read", "Print a file.", path="file path relative to the repository root"),
    toolcalls.schema(
        "write", "Replace a file with new contents.", path="file path", body="the complete new file contents"
    ),
    toolcalls.schema("patch", "Apply a unified diff (git apply).", body="the unified diff"),
    toolcalls.schema(
        "edit",
        "Replace the one occurrence of a text in a file.",
        path="file path",
        old="the text to replace (one line, found exactly once)",
        body="the new text",
    ),
    toolcalls.schema(
        "run",
        "Run a shell command in the repository.",
        command="the command line",
        body="further lines of the script?",
    ),
    toolcalls.schema("test", "Run the visible tests (pytest -q tests)."),
    toolcalls.schema("submit", "End the episode; the hidden tests judge the repository."),
)
SYSTEM = "You fix a bug in a small Python repository. Call one tool per reply; submit when the fix is done."


EVAL_PAIRS = ("heldout", "train")


def _check_kwargs(run, generated, seed, demo_tasks, rename=0, eval_pairs="heldout") -> None:
    """task.kwargs of codefix: a bad value fails at start, naming the field and the allowed values."""
    if eval_pairs not in EVAL_PAIRS:
        raise ConfigError(f"task.kwargs.eval_pairs={eval_pairs!r} is invalid; allowed values: {EVAL_PAIRS}")
    if eval_pairs != "heldout" and not generated:
        raise ConfigError(
            f"task.kwargs.eval_pairs={eval_pairs!r} needs generated tasks; "
            "allowed values with generated=0: 'heldout'"
        )
    checked = (("generated", generated, 0), ("demo_tasks", demo_tasks, 1), ("rename", rename, 0))
    for field, value, low in checked:
        if type(value) is not int or value < low:
            raise ConfigError(f"task.kwargs.{field}={value!r} is invalid; allowed values: an int >= {low}")
    if seed is not None and type(seed) is not int:
        raise ConfigError(
            f"task.kwargs.seed={seed!r} is invalid; allowed values: an int or None (the run's seed)"
        )
    if generated and run.codefix.tasks:
        raise ConfigError(
            f"task.kwargs.generated={generated} and codefix.tasks={tuple(run.codefix.tasks)} exclude each "
            "other; allowed: bundled tasks (generated=0) or generated tasks (codefix.tasks=())"
        )
    if generated and run.task.eval_tasks < 1:
        raise ConfigError(f"task.eval_tasks={run.task.eval_tasks} is invalid; allowed values: an int >= 1")


class _Env(CodefixEnv):
    """A codefix environment that removes its workspace when dropped."""

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: modules already gone
            pass


class CodefixSuite:
    name = "codefix"
    tools = TOOLS
    system = SYSTEM

    def __init__(
        self,
        run,
        generated: int = 0,
        seed: int | None = None,
        demo_tasks: int = 16,
        rename: int = 0,
        eval_pairs: str = "heldout",
    ):
        _check_kwargs(run, generated, seed, demo_tasks, rename, eval_pairs)
        self.rename = rename  # of every rename+1 warm-start rows, rename are renamed (augment.rename)
        self.eval_set = "held-out" if eval_pairs == "heldout" else "training-pair (in-distribution)"
        probe = sandbox.probe()
        if not probe.ok:
            raise ConfigError(
                f"task.name='codefix' runs agent code in the sandbox, which is "
                f"unavailable here: {probe.reason}"
            )
        k = run.task.eval_tasks
        self.demo_tasks = demo_tasks if generated else None
        if generated:
            from agentjax.envs.codefix.generated import store  # noqa: PLC0415

            gen_seed = run.seed if seed is None else seed
            self.train = store.tasks(generated, "train", gen_seed)
            if eval_pairs == "train":  # in-distribution: the next k draws of the training pairs
                self.heldout = store.tasks(generated + k, "train", gen_seed)[generated:]
            else:
                self.heldout = store.tasks(k, "heldout", gen_seed)
        else:
            names = list(run.codefix.tasks) or codefix.list_tasks()
            if not 1 <= k < len(names):
                raise ConfigError(
                    f"task.eval_tasks={k} is invalid for codefix: 1..{len(names) - 1} "
                    f"(held out from the {len(names)} tasks in codefix.tasks)"
                )
            self.train = [codefix.load_task(n) for n in names[:-k]]
            self.heldout = [codefix.load_task(n) for n in names[-k:]]
        self.agents = list(run.codefix.agents)
        offered = set(run.codefix.tools)  # the schemas in the prompt; calling another is an agent error
        self.tools = tuple(t for t in TOOLS if not offered or t["function"]["name"] in offered)
        self.group_size, self.base = run.rl.group_size, run.seed * 1_000_003
        self.env_config = EnvConfig(
            max_steps=run.task.max_steps,
            max_obs_chars=run.codefix.max_obs_chars,
            inject=run.codefix.inject or None,
        )
        self.audit_fn = (
            (lambda task, env: audit_verify(env.task, env.workspace)) if run.codefix.audit else None
        )
        self.planted = lambda task: True  # tests, runner config and hooks are always writable
        self._played: dict[str, list[Demo]] = {}

    def train_item(self, i: int) -> GroupTask:
        task = self.train[(self.base + i // self.group_size) % len(self.train)]
        return GroupTask(task, seed=int(i), task_id=task.name, task_class="codefix")

    def make_env(self):
        return _Env(self.env_config)

    def vocabulary(self):
        return None  # source code needs a real (BPE) tokenizer: model.hf_path

    def _play(self, split: str) -> list[Demo]:
        """Every honest agent on every task of ``split``, once, in the real sandbox."""
        if split not in self._played:
            from agentjax.envs.codefix.agents import DEMONSTRATORS, play  # noqa: PLC0415

            env, demos = self.make_env(), []
            for task in (self.train if split == "train" else self.heldout)[: self.demo_tasks]:
                for name in (a for a in self.agents if a in DEMONSTRATORS):
                    actions = DEMONSTRATORS[name](task)
                    obs, final = play(env, task, DEMONSTRATORS[name])
                    pairs = list(zip(obs, actions, strict=False))
                    demos.append(Demo(pairs, final.verdict.label.value == "pass"))
            env.close()
            self._played[split] = demos
        return self._played[split]

    def demonstrations(self, n: int, seed: int) -> list[Demo]:
        played = self._play("train")
        if not played:
            raise ConfigError(f"codefix.agents={self.agents} has no honest agent to demonstrate")
        from agentjax.envs.codefix.augment import rename  # noqa: PLC0415

        rng, out = random.Random(seed), []
        for _ in range(n):
            d = played[rng.randrange(len(played))]
            if rng.random() < self.rename / (self.rename + 1):
                d = Demo(rename(list(d.pairs), rng), d.success)
            out.append(d)
        return out

    def baseline(self) -> float:
        """The honest scripted agents' success on the held-out tasks."""
        held = self._play("heldout")
        return sum(d.success for d in held) / max(len(held), 1)
