"""Chat templates (rendered as transformers renders them), tool-call parsing and the chat codec."""

import json
import shutil

import numpy as np
import pytest

from agentjax.learner.sft import demo_rows
from agentjax.policy.chat import load_chat_tokenizer
from agentjax.policy.chat_codec import ChatCodec
from agentjax.policy.hf import HFImportError
from agentjax.tasks.codefix import SYSTEM, TOOLS
from agentjax.toolcall import calls as toolcalls
from agentjax.toolcall.text import ToolCallError

CALL = (
    '<tool_call>\n{"name": "write", "arguments": {"path": "m/core.py", "body": "x = 1\\ny = 2"}}'
    "\n</tool_call>"
)


def test_hermes_call_parses_to_the_plain_protocol_format():
    assert toolcalls.parse(CALL, "hermes", TOOLS) == "write m/core.py\nx = 1\ny = 2"
    thought = "<think>maybe <tool_call>{bad}</tool_call></think>\n" + CALL
    assert toolcalls.parse(thought, "hermes", TOOLS) == "write m/core.py\nx = 1\ny = 2"
    run = '<tool_call>{"name": "run", "arguments": "{\\"command\\": \\"ls -la\\"}"}</tool_call>'
    assert toolcalls.parse(run, "hermes", TOOLS) == "run ls -la"
    assert toolcalls.parse("<think>plan</think>test\n", "plain") == "test"


@pytest.mark.parametrize(
    "reply, match",
    [
        ("just text", "no <tool_call>"),
        ('<tool_call>{"name": "ls"', "unterminated"),
        ("<tool_call>{name: ls}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        (
            '<tool_call>{"name": "write", "arguments": {"body": "x"}}</tool_call>',
            r"missing required arguments \['path'\]",
        ),
        (
            '<tool_call>{"name": "read", "arguments": {"path": "a", "mode": "r"}}</tool_call>',
            "unknown arguments",
        ),
        ('<tool_call>["read"]</tool_call>', "JSON object with a string 'name'"),
        ('<think><tool_call>{"name": "test", "arguments": {}}</tool_call>', "no <tool_call>"),
        ('<tool_call>{"name": "test"}</tool_call><tool_call>{"name": "test"}</tool_call>', "2 tool calls"),
    ],
)
def test_malformed_hermes_call_is_a_tool_call_error(reply, match):
    with pytest.raises(ToolCallError, match=match):
        toolcalls.parse(reply, "hermes", TOOLS)


def test_render_is_the_inverse_of_parse_for_every_honest_action():
    from agentjax.envs import codefix
    from agentjax.envs.codefix.agents import HONEST

    for name in codefix.list_tasks()[:4]:
        task = codefix.load_task(name)
        for agent, _ in HONEST.values():
            for action in agent(task):
                reply = toolcalls.render(action, "hermes", TOOLS)
                assert json.loads(reply.split("\n", 1)[1].rsplit("\n", 1)[0])["name"] == action.split()[0]
                assert toolcalls.parse(reply, "hermes", TOOLS) == action.strip("\n")


def test_template_renders_as_transformers_does(tiny_hf_dir):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(tiny_hf_dir)
    tok, chat = load_chat_tokenizer(tiny_hf_dir)
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "fix clamp"},
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": "wrote m/core.py"},
        {"role": "tool", "content": "second"},
    ]
    for tools in (None, list(TOOLS)):
        want = hf.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
        assert chat.render(msgs, tools=tools, add_generation_prompt=True) == want
        assert tok.encode(want) == hf(want, add_special_tokens=False)["input_ids"]
    assert chat.end_of_turn == "<|im_end|>"
    assert (
        chat.observation("out")
        == "\n<|im_start|>user\n<tool_response>\nout\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_loss_mask_covers_exactly_the_generated_assistant_tokens(tiny_hf_dir):
    tok, chat = load_chat_tokenizer(tiny_hf_dir)
    codec = ChatCodec(tok, chat, tools=TOOLS, system=SYSTEM)
    pairs = [("Task clamp", "ls"), ("./m/core.py", "write m/core.py\nx = 1"), ("wrote m/core.py", "submit")]
    rows = demo_rows([pairs], codec, 2048)
    ids, mask = rows["tokens"][0], rows["loss_mask"][0]
    n = int((rows["positions"][0] < 2048).sum())
    # The whole row is the template's rendering of the conversation (incremental == full render).
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Task clamp"}]
    for i, (_, act) in enumerate(pairs):
        msgs.append({"role": "assistant", "content": toolcalls.render(act, "hermes", TOOLS)})
        if i + 1 < len(pairs):
            msgs.append({"role": "tool", "content": pairs[i + 1][0]})
    full = chat.render(msgs, tools=list(TOOLS))
    assert tok.decode(ids[:n].tolist()) == full.rstrip("\n")
    # Masked tokens, decoded, are exactly the three replies, each ending at <|im_end|>.
    spans, cur = [], []
    for t, m in zip(ids[:n].tolist(), mask[:n].tolist(), strict=True):
        if m:
            cur.append(t)
        elif cur:
            spans.append(cur)
            cur = []
    spans.append(cur)
    assert [s[-1] for s in spans] == [codec.stop] * 3
    assert [codec.action_text(s) for s in spans] == ["ls", "write m/core.py\nx = 1", "submit"]
    assert codec.keep_tail >= 3  # <|im_end|> \n <|im_start|> assistant \n survive an observation cut


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_tokenizer_dir_errors_name_the_file(tiny_hf_dir, tmp_path):
    d = _copy(tiny_hf_dir, tmp_path / "no_template")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(
        json.dumps({k: v for k, v in cfg.items() if k != "chat_template"})
    )
    with pytest.raises(HFImportError, match=r"no_template/tokenizer_config.json: no chat template"):
        load_chat_tokenizer(d)
    no_tool = (
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('Unsupported role') }}{% endif %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    )
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": no_tool}))
    with pytest.raises(
        HFImportError,
        match=r"tokenizer_config.json: the chat template cannot render tool "
        r"messages .*Unsupported role",
    ):
        load_chat_tokenizer(d)
    drops = (
        "{% for m in messages %}{% if m.role != 'tool' %}<|im_start|>{{ m.content }}<|im_end|>"
        "{% endif %}{% endfor %}"
    )
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": drops}))
    with pytest.raises(HFImportError, match="content does not appear"):
        load_chat_tokenizer(d)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": 7}}')
    with pytest.raises(HFImportError, match=r"no_template/tokenizer.json: malformed tokenizer.json"):
        load_chat_tokenizer(d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(HFImportError, match=r"tokenizer.json not found"):
        load_chat_tokenizer(d)


def test_observation_cut_keeps_the_generation_prompt(tiny_hf_dir):
    tok, chat = load_chat_tokenizer(tiny_hf_dir)
    codec = ChatCodec(tok, chat, tools=TOOLS)
    obs = codec.observation("word " * 400)
    tail = obs[-codec.keep_tail :]
    assert tok.decode(tail).endswith("<|im_start|>assistant\n")
    assert np.all(np.asarray(tail) == np.asarray(codec.observation("x")[-codec.keep_tail :]))
