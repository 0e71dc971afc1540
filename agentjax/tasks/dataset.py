"""A dataset task: prompts from a JSONL file or a grain source, a user's verifier by import path.

    python -m launch.train --config.task.name=dataset --config.task.kwargs.path=data.jsonl \\
        --config.task.kwargs.verifier=my_pkg.checks:exact_answer

The records come from ``path`` (JSONL, or ``*.array_record``: an ArrayRecord file read through
``grain.sources.ArrayRecordDataSource``) or ``source=package.module:factory`` (any grain
``RandomAccessDataSource``, or a factory of one; :mod:`agentjax.tasks.records`). Each record is a
JSON object with at least ``prompt`` (a string); its other fields reach the verifier untouched
(``answer``, test cases, ...). The prompt is the first observation; the model's final reply is
judged by ``verifier(record, reply) -> float | bool`` (reward in [0, 1]; 1 or True is ``pass``,
anything lower ``fail`` with that partial credit). A reply that is empty is ``agent_error``; a
verifier that raises is ``infra_fault`` (masked and retried, never a zero the agent did not
earn), as the built-ins attribute faults. The held-out split is the last ``task.eval_tasks``
records (or every record of ``heldout_path`` / ``heldout_source``), never trained on. With an
``answer`` field, the warm start imitates it (``prompt -> answer``); without one, set
``warm_start.steps=0``. With the built-in model the word vocabulary is every word of the records'
string and number fields, and the tools' names.

**Multi-turn, with tool calls.** A record may declare ``tools``: import paths of Python functions
(``"my_pkg.tools:lookup"``, their schemas read from their signatures) or tool schemas served by
one handler, ``task.kwargs.tools=my_pkg.tools:handler`` (:mod:`agentjax.tasks.datasettools`).
A reply that opens a tool call in the run's tool-call format (``model.tool_format`` with a HF
model, :func:`agentjax.toolcall.calls.has_call`; the plain format with the built-in model, where a
call is a reply whose first word names one of the record's tools) is parsed by
:mod:`agentjax.toolcall.calls`, the tool runs, and its result is the next observation; the first
reply that calls no tool is the answer the verifier judges. ``task.kwargs.max_turns`` bounds the
replies of an episode (default ``caps.max_tool_calls`` when a record has tools, else 1): a call
in the last one is a ``fail`` ending ``task_cap``. A malformed call, a tool the record does not
declare, arguments its schema refuses, or a tool raising ``ValueError``/``TypeError``/
``LookupError``/``ArithmeticError`` are the agent's (``agent_error``); any other exception is the
tool's crash (``infra_fault``). The verdict's evidence lists the calls made (``tool_calls``). A
record's ``calls`` (plain-format calls, e.g. ``"lookup apple"``) are imitated by the warm start
before its ``answer``: they run here, their results are the demonstration's observations, and they
are written in the run's tool-call format. ``examples/dataset_verifiers.py`` has a worked example.
"""

from __future__ import annotations

import dataclasses
import random

from agentjax.envs.protocol import Label, StepResult, ToolCallError, Verdict
from agentjax.policy.config import ConfigError
from agentjax.sampling.worker import GroupTask
from agentjax.tasks import datasettools, records
from agentjax.tasks.protocol import Demo
from agentjax.toolcall import calls as toolcalls

VERIFIER_VERSION = "dataset-1"


@dataclasses.dataclass(frozen=True)
class Item:
    """One record of the dataset: its split and line (the record itself stays with the suite)."""

    split: str
    index: int
    task_id: str
    task_class: str = "dataset"


class DatasetEnv:
    """One episode per record: tool calls (results as the next observations) until a reply that
    calls no tool, the answer the verifier judges; at most ``max_turns`` replies."""

    def __init__(self, records: dict, verifier, *, tools=None, names=None, fmt="plain", max_turns=1):
        self.records, self.verifier, self.fmt, self.max_turns = records, verifier, fmt, max_turns
        self.tools, self.names = tools or {}, names or {}

    def reset(self, item: Item, seed: int) -> str:
        self.item, self.record = item, self.records[item.split][item.index]
        allowed = self.names.get(item.split, [()] * (item.index + 1))[item.index]
        self.schemas = [self.tools[n].schema for n in allowed]
        self.turn, self.calls = 0, []
        return self.record["prompt"]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        reply = toolcalls.strip_think(action)
        if self.schemas and toolcalls.has_call(reply, self.fmt, self.schemas):
            return self._call(reply)
        reply = " ".join(reply.split())
        if not reply:
            return self._end(Label.AGENT_ERROR, 0.0, {"error": "empty reply"})
        try:
            score = float(self.verifier(self.record, reply))
        except Exception as e:  # noqa: BLE001 - the verifier's failure, not the agent's
            return self._end(Label.INFRA_FAULT, 0.0, {"verifier_error": repr(e)})
        label = Label.PASS if score >= 1.0 else Label.FAIL
        return self._end(label, min(max(score, 0.0), 1.0), {"reply": reply}, verified=True)

    def _call(self, reply: str) -> StepResult:
        if self.turn >= self.max_turns:  # its result could never be read: no answer, a failure
            return self._end(Label.FAIL, 0.0, {"max_turns": self.max_turns}, stop="task_cap")
        try:
            plain = toolcalls.parse(reply, self.fmt, self.schemas)
            name, args = toolcalls.arguments(plain, self.schemas)
        except ToolCallError as e:
            return self._end(Label.AGENT_ERROR, 0.0, {"tool_call_error": str(e)})
        try:
            out = self.tools[name].call(self.record, args)
        except Exception as e:  # noqa: BLE001 - charged by datasettools.attribute_tool_error
            label, evidence = datasettools.attribute_tool_error(e)
            return self._end(label, 0.0, {**evidence, "tool": name})
        self.calls.append(plain)
        return StepResult(datasettools.result_text(out), 0.0, False, None, {"tool": name})

    def _end(self, label: Label, reward: float, evidence: dict, *, verified=False, stop=None) -> StepResult:
        if self.schemas:
            evidence = {**evidence, "tool_calls": list(self.calls)}
        passed = int(label is Label.PASS)
        verdict = Verdict(reward, label, 1, int(verified), passed, 0, evidence, VERIFIER_VERSION, "")
        if stop is None:
            stop = {Label.AGENT_ERROR: "agent_error", Label.INFRA_FAULT: "infra_fault"}.get(label, "finished")
        return StepResult("done", reward, True, stop, evidence, verdict)


class DatasetSuite:
    name = "dataset"
    record_types = (Item,)
    parses_replies = True  # the env parses a reply itself: a tool call, or the answer

    def __init__(
        self,
        run,
        *,
        path: str = "",
        verifier: str = "",
        heldout_path: str = "",
        tools: str = "",
        max_turns: int | None = None,
        source: str = "",
        heldout_source: str = "",
    ):
        if not (path or source) or not verifier:
            raise ConfigError(
                "task.name='dataset' needs task.kwargs.path (a JSONL or ArrayRecord file) or "
                "task.kwargs.source (a grain data source, 'package.module:factory'), and "
                "task.kwargs.verifier ('package.module:function', verifier(record, reply) -> reward)"
            )
        self.verifier = datasettools.load_function(verifier, "task.kwargs.verifier")
        handler = datasettools.load_function(tools, "task.kwargs.tools") if tools else None
        train = records.read(path, source, "task.kwargs.path")
        if heldout_path or heldout_source:
            held = records.read(heldout_path, heldout_source, "task.kwargs.heldout_path")
        else:
            k = run.task.eval_tasks
            if not 1 <= k < len(train):
                raise ConfigError(
                    f"task.eval_tasks={k} is invalid for {path or source}: 1..{len(train) - 1} "
                    f"(held out from its {len(train)} records)"
                )
            train, held = train[:-k], train[-k:]
        self.records = {"train": train, "heldout": held}
        self.toolbox: dict = {}
        self.names = {
            "train": datasettools.load_tools(train, handler, _held_field("", "", path), self.toolbox),
            "heldout": datasettools.load_tools(
                held,
                handler,
                _held_field(heldout_path, heldout_source, path),
                self.toolbox,
                first=1 if heldout_path or heldout_source else len(train) + 1,
            ),
        }
        self.tools = tuple(t.schema for t in self.toolbox.values())
        self.max_turns = _max_turns(max_turns, bool(self.tools), run.caps.max_tool_calls)
        self.fmt = str(getattr(run.model, "tool_format", "plain"))  # a HF model's; else plain
        self.heldout = [Item("heldout", i, f"heldout-{i}") for i in range(len(held))]
        self.group_size, self.base = run.rl.group_size, run.seed * 1_000_003

    def train_item(self, i: int) -> GroupTask:
        n = (self.base + i // self.group_size) % len(self.records["train"])
        return GroupTask(
            Item("train", n, f"train-{n}"), seed=int(i), task_id=f"train-{n}", task_class="dataset"
        )

    def make_env(self) -> DatasetEnv:
        return DatasetEnv(
            self.records,
            self.verifier,
            tools=self.toolbox,
            names=self.names,
            fmt=self.fmt,
            max_turns=self.max_turns,
        )

    def vocabulary(self) -> list[str]:
        words = {"done"}
        for recs in self.records.values():
            for r in recs:
                words.update(w for text in _strings(r) for w in text.split())
        for t in self.tools:
            words.add(t["function"]["name"])
        return sorted(words)

    def demonstrations(self, n: int, seed: int) -> list[Demo]:
        idx = [i for i, r in enumerate(self.records["train"]) if "answer" in r]
        if not idx:
            raise ConfigError(
                "task.name='dataset': no line has an 'answer' to imitate; set warm_start.steps=0"
            )
        rng = random.Random(seed)
        return [Demo(self._demo(i), True) for i in (rng.choice(idx) for _ in range(n))]

    def _demo(self, i: int) -> list[tuple[str, str]]:
        """Record ``i``'s ``calls`` (plain-format tool calls, run here for their results) rendered
        in the tool-call format, then its ``answer``."""
        rec = self.records["train"][i]
        schemas = [self.toolbox[k].schema for k in self.names["train"][i]]
        obs, pairs = rec["prompt"], []
        calls = rec.get("calls", [])
        if len(calls) >= self.max_turns:
            raise ConfigError(
                f"task.kwargs.path: record {i + 1} has {len(calls)} calls, but task.kwargs.max_turns="
                f"{self.max_turns} leaves room for {self.max_turns - 1} before the answer"
            )
        for plain in calls:
            try:
                name, args = toolcalls.arguments(plain, schemas)
            except ToolCallError as e:
                raise ConfigError(f"task.kwargs.path: record {i + 1} calls {plain!r}: {e}") from None
            pairs.append((obs, toolcalls.render(plain, self.fmt, schemas)))
            obs = datasettools.result_text(self.toolbox[name].call(rec, args))
        return [*pairs, (obs, str(rec["answer"]))]


def _held_field(heldout_path: str, heldout_source: str, path: str) -> str:
    if heldout_path or heldout_source:
        return "task.kwargs.heldout_path" if heldout_path else "task.kwargs.heldout_source"
    return "task.kwargs.path" if path else "task.kwargs.source"


def _max_turns(value, has_tools: bool, cap: int) -> int:
    """``task.kwargs.max_turns``: replies per episode (default: ``caps.max_tool_calls`` with
    tools, else 1); within the rollout's cap, and room for one tool result where there are tools."""
    if value is None:
        return cap if has_tools else 1
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
        raise ConfigError(
            f"task.kwargs.max_turns={value!r} is invalid; an integer in 1..caps.max_tool_calls={cap}"
        )
    if has_tools and value < 2:
        raise ConfigError(
            f"task.kwargs.max_turns={value} leaves no turn to read a tool's result; the records "
            "declare tools: set it >= 2"
        )
    if not has_tools and value > 1:
        raise ConfigError(f"task.kwargs.max_turns={value} needs records that declare 'tools'")
    return value


def _strings(obj):
    if isinstance(obj, str | int | float):
        yield str(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _strings(v)
