"""The dataset task's tool calls: records declaring tools (Python functions by import path, or
schemas served by ``task.kwargs.tools``), replies parsed in the configured tool-call format, tool
results as observations, the answer verified; faults charged to the agent or the tool."""

import dataclasses
import json
import types

import pytest

from agentjax import tasks
from agentjax.envs.protocol import InfraError, Label, ToolCallError
from agentjax.policy.config import ConfigError
from agentjax.run import config as runconfig
from agentjax.tasks import datasettools
from agentjax.tasks.dataset import Item
from agentjax.toolcall import calls as toolcalls
from configs import smoke
from examples.dataset_verifiers import write_lookup_dataset

VERIFIER = "examples.dataset_verifiers:first_word"
LOOKUP = "examples.dataset_verifiers:lookup"


def crash(key: str) -> str:
    """A tool whose backend is down."""
    raise RuntimeError("the lookup service is down")


def infra(key: str) -> str:
    """A tool that reports its own infrastructure failure."""
    raise InfraError("sandbox gone", {"host": "h1"})


def _suite(tmp_path, rows=None, tool_format=None, **kwargs):
    path = tmp_path / "d.jsonl"
    if rows is None:
        write_lookup_dataset(path, repeats=2)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = smoke.get_config()
    c.task.name, c.task.eval_tasks = "dataset", 2
    c.task.kwargs = {"path": str(path), "verifier": VERIFIER, **kwargs}
    run = runconfig.parse(c)
    if tool_format:  # a HF model's section (model.hf_path's checkpoint is not needed here)
        run = dataclasses.replace(run, model=types.SimpleNamespace(tool_format=tool_format))
    return tasks.make(run)


def _episode(suite, replies, item=None):
    env = suite.make_env()
    obs = [env.reset(item or suite.heldout[0], 0)]
    for r in replies:
        res = env.step(r)
        obs.append(res.observation)
        if res.done:
            return obs, res
    return obs, res


def test_a_tool_result_is_the_next_observation_and_the_answer_is_verified(tmp_path):
    suite = _suite(tmp_path, max_turns=3)
    assert [t["function"]["name"] for t in suite.tools] == ["lookup"] and suite.parses_replies
    prompt = suite.records["heldout"][0]["prompt"]  # "colour of <thing>"
    thing = prompt.split()[-1]
    obs, res = _episode(suite, [f"lookup {thing}", "it is"])
    colour = suite.records["heldout"][0]["answer"]
    assert obs[:2] == [prompt, colour]
    assert res.verdict.label is Label.FAIL and res.verdict.evidence["tool_calls"] == [f"lookup {thing}"]
    obs, res = _episode(suite, [f"lookup {thing}", colour])
    assert res.verdict.label is Label.PASS and res.verdict.reward == 1.0
    _, res = _episode(suite, [colour])  # answering without a call is allowed
    assert res.verdict.label is Label.PASS and res.verdict.evidence["tool_calls"] == []


def test_replies_are_parsed_in_the_configured_tool_call_format(tmp_path):
    suite = _suite(tmp_path, max_turns=3, tool_format="hermes")
    thing, colour = suite.records["heldout"][0]["prompt"].split()[-1], suite.records["heldout"][0]["answer"]
    call = '<think>look it up</think><tool_call>{"name": "lookup", "arguments": {"key": "%s"}}</tool_call>'
    obs, res = _episode(suite, [call % thing, f"<think>so</think> {colour}"])
    assert obs[1] == colour and res.verdict.label is Label.PASS
    # in hermes, "lookup <thing>" is an answer (no <tool_call>), not a call
    _, res = _episode(suite, [f"lookup {thing}"])
    assert res.verdict.label is Label.FAIL and res.verdict.evidence["tool_calls"] == []
    _, res = _episode(suite, ["<tool_call>{not json</tool_call>"])
    assert (
        res.verdict.label is Label.AGENT_ERROR and "not valid JSON" in res.verdict.evidence["tool_call_error"]
    )
    demo = suite.demonstrations(1, 0)[0].pairs  # the warm start writes its call in the format
    assert json.loads(demo[0][1].split("\n")[1])["name"] == "lookup" and demo[1][0] == demo[1][1]


def test_tool_faults_are_charged_to_the_agent_or_to_the_tool(tmp_path):
    rows = [
        {
            "prompt": "colour of apple",
            "answer": "red",
            "tools": [LOOKUP, f"{__name__}:crash", f"{__name__}:infra"],
        },
        {"prompt": "colour of sky", "answer": "blue", "tools": [LOOKUP]},
        {"prompt": "colour of snow", "answer": "white", "tools": [LOOKUP]},
    ]
    suite = _suite(tmp_path, rows, max_turns=3)  # train: the apple line; held out: the others
    apple, sky = Item("train", 0, "t0"), Item("heldout", 0, "h0")
    for reply, label, key in (
        ("lookup moon", Label.AGENT_ERROR, "tool_error"),  # the tool refused the argument
        ("lookup", Label.AGENT_ERROR, "tool_call_error"),  # a required argument left out
        ("crash apple", Label.INFRA_FAULT, "tool_crash"),  # the tool itself crashed
        ("infra apple", Label.INFRA_FAULT, "tool_crash"),
    ):
        _, res = _episode(suite, [reply], apple)
        assert (res.verdict.label, res.stop_reason) == (label, label.value), reply
        assert key in res.verdict.evidence, res.verdict.evidence
        assert (res.verdict.trained_reward is None) == (label is Label.INFRA_FAULT)  # masked, retried
    # a tool of another record is not this record's: "crash" is then an answer (plain format)
    _, res = _episode(suite, ["crash apple"], sky)
    assert res.verdict.label is Label.FAIL and res.verdict.evidence["reply"] == "crash apple"
    _, res = _episode(suite, ["lookup apple", "lookup apple", "red"], apple)  # two calls, then the answer
    assert res.verdict.label is Label.PASS and len(res.verdict.evidence["tool_calls"]) == 2
    _, res = _episode(suite, ["lookup apple", "lookup apple", "lookup apple"], apple)
    assert (res.verdict.label, res.stop_reason) == (Label.FAIL, "task_cap")  # no answer in 3 turns
    assert res.verdict.evidence["max_turns"] == 3


def test_tool_schemas_are_served_by_the_handler_named_in_task_kwargs_tools(tmp_path):
    spec = toolcalls.schema("table", "Look a key up in the record's table.", key="the key")
    rows = [
        {"prompt": f"value of {k}", "answer": v, "table": {k: v}, "tools": [spec], "calls": [f"table {k}"]}
        for k, v in (("a", "one"), ("b", "two"), ("c", "three"))
    ]
    with pytest.raises(
        ConfigError, match=r"record 1 tools\[0\]: tool schema 'table' needs task.kwargs.tools"
    ):
        _suite(tmp_path, rows)
    suite = _suite(tmp_path, rows, tools="examples.dataset_verifiers:table_tool", max_turns=2)
    obs, res = _episode(suite, ["table b", "two"])  # held out: the b and c lines
    assert obs[1] == "two" and res.verdict.label is Label.PASS
    assert suite.demonstrations(1, 0)[0].pairs == [("value of a", "table a"), ("one", "one")]
    assert {"value", "one", "table"} <= set(suite.vocabulary())


def test_bad_tool_settings_are_named(tmp_path):
    rows = [{"prompt": "p q", "answer": "q", "tools": [LOOKUP]}] * 3
    for kwargs, match in (
        ({"max_turns": 1}, r"task.kwargs.max_turns=1 leaves no turn to read a tool's result"),
        ({"max_turns": 99}, r"task.kwargs.max_turns=99 is invalid; an integer in 1..caps.max_tool_calls=6"),
        ({"tools": "examples.dataset_verifiers:nope"}, r"task.kwargs.tools=.* no attribute"),
    ):
        with pytest.raises(ConfigError, match=match):
            _suite(tmp_path, rows, **kwargs)
    assert _suite(tmp_path, rows).max_turns == 6  # default: caps.max_tool_calls
    with pytest.raises(ConfigError, match=r"max_turns=2 needs records that declare 'tools'"):
        _suite(tmp_path, [{"prompt": "p", "answer": "p"}] * 3, max_turns=2)
    with pytest.raises(ConfigError, match=r"record 2 tools\[0\]=.*cannot import"):
        _suite(tmp_path, [rows[0], {"prompt": "p", "tools": ["nowhere.mod:fn"]}, rows[0]])
    bad = [{**rows[0], "calls": ["lookup"]}] * 3
    with pytest.raises(ConfigError, match=r"record 1 calls 'lookup': .*missing required"):
        _suite(tmp_path, bad).demonstrations(1, 0)


def test_has_call_and_arguments_follow_each_format():
    tools = [toolcalls.schema("lookup", "d", key="k"), toolcalls.schema("write", "d", path="p", body="b")]
    for fmt, call, answer in (
        ("plain", "lookup apple", "red apple"),
        ("hermes", '<tool_call>{"name": "lookup"}</tool_call>', "lookup apple"),
        ("llama3_json", '<|python_tag|>{"name": "lookup"}', "the {x}"),
        ("pythonic", '[lookup(key="a")]', "a [b]"),
        ("mistral", 'ok [TOOL_CALLS] [{"name": "lookup"}]', "ok"),
    ):
        assert toolcalls.has_call(call, fmt, tools) and not toolcalls.has_call(answer, fmt, tools), fmt
    assert not toolcalls.has_call("<think>lookup x</think>red", "plain", tools)
    assert toolcalls.arguments("write a/b.py\nx = 1", tools) == ("write", {"path": "a/b.py", "body": "x = 1"})
    assert toolcalls.arguments("lookup two words", tools) == ("lookup", {"key": "two words"})
    with pytest.raises(ToolCallError, match="missing required arguments"):
        toolcalls.arguments("write", tools)


def test_function_schema_and_fault_attribution():
    s = datasettools.function_schema(crash, "f")["function"]
    assert s["name"] == "crash" and s["description"] == "A tool whose backend is down."
    assert s["parameters"]["required"] == ["key"]
    assert datasettools.attribute_tool_error(ValueError("x"))[0] is Label.AGENT_ERROR
    assert datasettools.attribute_tool_error(TypeError("x"))[0] is Label.AGENT_ERROR
    assert datasettools.attribute_tool_error(KeyError("x"))[0] is Label.AGENT_ERROR
    assert datasettools.attribute_tool_error(RuntimeError("x"))[0] is Label.INFRA_FAULT
    assert datasettools.attribute_tool_error(OSError("x"))[0] is Label.INFRA_FAULT
    assert datasettools.result_text({"a": 1}) == '{"a": 1}' and datasettools.result_text("s") == "s"


def test_a_hf_policy_hands_the_dataset_env_its_reply_as_written(tmp_path, tiny_hf_dir):
    """With a HF checkpoint the chat codec does not parse the reply (a reply without a call is the
    dataset's answer, not a malformed call): the env parses it in model.tool_format (hermes)."""
    from agentjax.tasks import model as task_model
    from agentjax.tasks.model import HFModel

    suite = _suite(tmp_path, max_turns=3, tool_format="hermes")
    codec = task_model.build(HFModel(hf_path=str(tiny_hf_dir)), suite).codec
    assert codec.raw_replies and "lookup" in codec.tokenizer.decode(codec.prompt("x"), skip_specials=False)
    thing, colour = suite.records["heldout"][0]["prompt"].split()[-1], suite.records["heldout"][0]["answer"]
    call = toolcalls.render(f"lookup {thing}", "hermes", suite.tools)
    env = suite.make_env()
    env.reset(suite.heldout[0], 0)
    for reply, want in ((call, colour), (colour, "done")):
        ids = codec.action_ids(reply)  # a demonstration's reply, as generated tokens
        assert ids[-1] == codec.stop and codec.action_text(ids) == reply
        res = env.step(codec.action_text(ids))
        assert res.observation == want
    assert res.verdict.label is Label.PASS
    parsing = dataclasses.replace(codec, raw_replies=False)  # what a parsing codec would make of it
    with pytest.raises(ToolCallError, match="no <tool_call>"):
        parsing.action_text(codec.action_ids(colour))
