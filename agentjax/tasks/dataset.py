"""A dataset task: prompts from a JSONL file, a user's verifier named by import path.

    python -m launch.train --config.task.name=dataset --config.task.kwargs.path=data.jsonl \\
        --config.task.kwargs.verifier=my_pkg.checks:exact_answer

Each line of ``path`` is a JSON object with at least ``prompt`` (a string); its other fields reach
the verifier untouched (``answer``, test cases, ...). One episode is one reply: the prompt is the
first observation, the model's reply is judged by ``verifier(record, reply) -> float | bool``
(reward in [0, 1]; 1 or True is ``pass``, anything lower ``fail`` with that partial credit). A reply
that is empty is ``agent_error``; a verifier that raises is ``infra_fault`` (masked and retried,
never a zero the agent did not earn), as the built-ins attribute faults. The held-out split is the
last ``task.eval_tasks`` lines (or every line of ``heldout_path``), never trained on. With an
``answer`` field, the warm start imitates it (``prompt -> answer``); without one, set
``warm_start.steps=0``. With the built-in model the word vocabulary is every word of the file(s).
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

from agentjax import importpath
from agentjax.envs.protocol import Label, StepResult, Verdict
from agentjax.policy.config import ConfigError
from agentjax.sampling.worker import GroupTask
from agentjax.tasks.protocol import Demo

VERIFIER_VERSION = "dataset-1"


@dataclasses.dataclass(frozen=True)
class Item:
    """One record of the dataset: its split and line (the record itself stays with the suite)."""

    split: str
    index: int
    task_id: str
    task_class: str = "dataset"


def read_jsonl(path: str, field: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{field}={path!r} is not a file (a JSONL dataset: one JSON object a line)")
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ConfigError(f"{field}={path!r}: line {n} is not JSON ({e})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str):
            raise ConfigError(f"{field}={path!r}: line {n} has no string 'prompt'")
        out.append(rec)
    return out


class DatasetEnv:
    """One reply per episode, judged by the verifier."""

    def __init__(self, records: dict, verifier):
        self.records, self.verifier = records, verifier

    def reset(self, item: Item, seed: int) -> str:
        self.item, self.record = item, self.records[item.split][item.index]
        return self.record["prompt"]

    def step(self, action: str) -> StepResult:
        reply = " ".join(action.split())
        if not reply:
            label, reward, evidence = Label.AGENT_ERROR, 0.0, {"error": "empty reply"}
        else:
            try:
                score = float(self.verifier(self.record, reply))
                label = Label.PASS if score >= 1.0 else Label.FAIL
                reward, evidence = min(max(score, 0.0), 1.0), {"reply": reply}
            except Exception as e:  # noqa: BLE001 - the verifier's failure, not the agent's
                label, reward, evidence = Label.INFRA_FAULT, 0.0, {"verifier_error": repr(e)}
        verdict = Verdict(reward, label, 1, 1, int(label is Label.PASS), 0, evidence, VERIFIER_VERSION, "")
        stop = {Label.AGENT_ERROR: "agent_error", Label.INFRA_FAULT: "infra_fault"}.get(label, "finished")
        return StepResult("done", reward, True, stop, evidence, verdict)


class DatasetSuite:
    name = "dataset"
    record_types = (Item,)

    def __init__(self, run, *, path: str = "", verifier: str = "", heldout_path: str = ""):
        if not path or not verifier:
            raise ConfigError(
                "task.name='dataset' needs task.kwargs.path (a JSONL file) and task.kwargs.verifier "
                "('package.module:function', verifier(record, reply) -> reward)"
            )
        try:
            self.verifier = importpath.load(verifier, "task.kwargs.verifier")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not callable(self.verifier):
            raise ConfigError(f"task.kwargs.verifier={verifier!r} is not a function")
        train = read_jsonl(path, "task.kwargs.path")
        if heldout_path:
            held = read_jsonl(heldout_path, "task.kwargs.heldout_path")
        else:
            k = run.task.eval_tasks
            if not 1 <= k < len(train):
                raise ConfigError(
                    f"task.eval_tasks={k} is invalid for {path}: 1..{len(train) - 1} "
                    f"(held out from its {len(train)} lines)"
                )
            train, held = train[:-k], train[-k:]
        self.records = {"train": train, "heldout": held}
        self.heldout = [Item("heldout", i, f"heldout-{i}") for i in range(len(held))]
        self.group_size, self.base = run.rl.group_size, run.seed * 1_000_003

    def train_item(self, i: int) -> GroupTask:
        n = (self.base + i // self.group_size) % len(self.records["train"])
        return GroupTask(
            Item("train", n, f"train-{n}"), seed=int(i), task_id=f"train-{n}", task_class="dataset"
        )

    def make_env(self) -> DatasetEnv:
        return DatasetEnv(self.records, self.verifier)

    def vocabulary(self) -> list[str]:
        words = {"done"}
        for recs in self.records.values():
            for r in recs:
                words.update(r["prompt"].split())
                words.update(str(r.get("answer", "")).split())
        return sorted(words)

    def demonstrations(self, n: int, seed: int) -> list[Demo]:
        recs = [r for r in self.records["train"] if "answer" in r]
        if not recs:
            raise ConfigError(
                "task.name='dataset': no line has an 'answer' to imitate; set warm_start.steps=0"
            )
        rng = random.Random(seed)
        return [Demo([(r["prompt"], str(r["answer"]))], True) for r in (rng.choice(recs) for _ in range(n))]
