# ruff: noqa: E501 - chat templates are data, kept line for line
"""Llama-3 JSON, pythonic and Mistral tool calls, round-tripped through a chat template.

For each format a tiny byte-level BPE tokenizer is built here with the format's special tokens and
a chat template whose assistant ``tool_calls`` and tool messages are written as the real
templates write them (Llama 3.1 for llama3_json, vLLM's Llama 3.2 pythonic template for pythonic,
Mistral v0.3's with its 9-character call ids for mistral, Mistral Small 3.2's for mistral_args). Checked: the template's rendering of
a tool call is exactly the prompt + ``toolcalls.render`` + end-of-turn (so demonstrations are in
the template's own format); transformers' response parser reads it back to the same plain
action; the chat codec's generated-token round trip (``action_ids`` -> ``action_text``) too.
"""

import json

import pytest

from agentjax.envs.protocol import ToolCallError, parse_tool_call
from agentjax.policy.chat import load_chat_tokenizer
from agentjax.policy.chat_codec import ChatCodec
from agentjax.tasks.codefix import TOOLS
from agentjax.toolcall import calls as toolcalls
from agentjax.toolcall import formats as toolformats

pytest.importorskip("transformers.utils.chat_parsing", reason="transformers >= 5 parses these formats")
tokenizers = pytest.importorskip("tokenizers")

LLAMA_HEAD = """{{- bos_token }}
{%- if tools %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\nEnvironment: ipython\\n' }}{%- for t in tools %}{{- t | tojson(indent=4) + '\\n\\n' }}{%- endfor %}{{- '<|eot_id|>' }}{%- endif %}
{%- for message in messages %}
{%- if message.role == 'tool' or message.role == 'ipython' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
{%- elif message.tool_calls %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
"""
LLAMA_TAIL = """{{- '<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""
LLAMA3_JSON = (  # Llama 3.1's own tool-call rendering
    LLAMA_HEAD
    + """{%- set tool_call = message.tool_calls[0].function %}
{{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}{{- tool_call.arguments | tojson }}{{- "}" }}
"""
    + LLAMA_TAIL
)
PYTHONIC = (  # vLLM's tool_chat_template_llama3.2_pythonic.jinja (tojson values)
    LLAMA_HEAD
    + """{{- '[' }}
{%- for tool_call in message.tool_calls %}{%- set tool_call = tool_call.function %}
{{- tool_call.name + '(' -}}
{%- for param in tool_call.arguments %}{{- param + '=' -}}{{- tool_call.arguments[param] | tojson -}}{% if not loop.last %}, {% endif %}{%- endfor %}
{{- ')' -}}{% if not loop.last %}, {% endif %}
{%- endfor %}
{{- ']' }}
"""
    + LLAMA_TAIL
)
MISTRAL = """{%- set loop_messages = messages %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {{- "[INST] " + message["content"] + "[/INST]" }}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""  # Mistral-7B-Instruct-v0.3's template (its system-message and alternation checks left out)
MISTRAL_ARGS = """{{- bos_token }}
{%- if tools is defined and tools is not none and tools|length > 0 %}{{- '[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}
{%- elif message['role'] == 'assistant' %}
{%- if message['content'] %}{{- message['content'] }}{%- endif %}
{%- if message['tool_calls'] is defined and message['tool_calls'] is not none %}
{%- for tool in message['tool_calls'] %}
{%- set arguments = tool['function']['arguments'] %}
{%- if arguments is not string %}{%- set arguments = arguments|tojson %}{%- endif %}
{{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}
{%- endfor %}
{%- endif %}
{{- eos_token }}
{%- elif message['role'] == 'tool' %}{{- '[TOOL_RESULTS]' + message['content']|string + '[/TOOL_RESULTS]' }}
{%- endif %}
{%- endfor %}
"""  # the tool parts of Mistral-Small-3.2's template
LLAMA_SPECIALS = (
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
)
MISTRAL_SPECIALS = (
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[ARGS]",
    "[CALL_ID]",
)
FORMATS = {
    "llama3_json": (LLAMA3_JSON, LLAMA_SPECIALS, "<|begin_of_text|>", "<|eot_id|>"),
    "pythonic": (PYTHONIC, LLAMA_SPECIALS, "<|begin_of_text|>", "<|eot_id|>"),
    "mistral": (MISTRAL, MISTRAL_SPECIALS, "<s>", "</s>"),
    "mistral_args": (MISTRAL_ARGS, MISTRAL_SPECIALS, "<s>", "</s>"),
}
ACTIONS = (
    "ls",
    "read m/core.py",
    'write m/core.py\ndef f(x):\n    return "é" + x  # {braces}, [brackets]\n',
    "test",
)


def _tiny_dir(path, fmt):
    template, specials, bos, eos = FORMATS[fmt]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(specials),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([json.dumps(TOOLS), *ACTIONS], trainer)
    tok.save(str(path / "tokenizer.json"))
    cfg = {"bos_token": bos, "eos_token": eos, "pad_token": eos, "chat_template": template}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return path


def _openai_call(plain: str, reply: str = "") -> dict:
    call = parse_tool_call(plain)
    props = [
        k
        for k in {t["function"]["name"]: t for t in TOOLS}[call.name]["function"]["parameters"]["properties"]
        if k != "body"
    ]
    args = dict(zip(props, call.args, strict=False)) | ({"body": call.body} if call.body else {})
    # the id a template writes is the one the rendered reply holds (Mistral v0.3's: 9 characters)
    return {
        "type": "function",
        "id": toolformats.call_id(reply),
        "function": {"name": call.name, "arguments": args},
    }


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_round_trip_through_the_chat_template(fmt, tmp_path):
    tok, chat = load_chat_tokenizer(_tiny_dir(tmp_path, fmt))
    assert chat.end_of_turn == FORMATS[fmt][3]
    codec = ChatCodec(tok, chat, tools=TOOLS, tool_format=fmt)
    user = [{"role": "user", "content": "fix clamp"}]
    prompt = chat.render(user, tools=list(TOOLS), add_generation_prompt=True)
    for plain in ACTIONS:
        reply = toolcalls.render(plain, fmt, TOOLS)
        msgs = [*user, {"role": "assistant", "content": "", "tool_calls": [_openai_call(plain, reply)]}]
        rendered = chat.render(msgs, tools=list(TOOLS))
        assert rendered == prompt + reply + chat.end_of_turn  # demonstrations = the template's format
        assert toolcalls.parse(rendered[len(prompt) : -len(chat.end_of_turn)], fmt, TOOLS) == plain.strip(
            "\n"
        )
        ids = codec.action_ids(plain)  # generated tokens, end-of-turn included
        assert ids[-1] == codec.stop and codec.action_text(ids) == plain.strip("\n")


@pytest.mark.parametrize(
    "fmt, reply, match",
    [
        ("llama3_json", "I will list the files.", "no llama3_json tool call"),
        ("llama3_json", '{"name": "ls", "parameters": {}};{"name": "test", "parameters": {}}', "text beside"),
        ("llama3_json", '{"name": "ls", "parameters": {', "does not parse"),
        ("llama3_json", '<|python_tag|>{"name": "rm", "parameters": {}}', "unknown tool 'rm'"),
        ("pythonic", '[read(path="a"), test()]', "2 tool calls"),
        ("pythonic", "[read(path=a)]", "does not parse"),
        ("pythonic", '[read(path="a", mode="r")]', "unknown arguments"),
        ("mistral", "just text", "no mistral tool call"),
        ("mistral", '[TOOL_CALLS] [{"name": "write", "arguments": {"body": "x"}}]', "missing required"),
    ],
)
def test_malformed_calls_are_tool_call_errors(fmt, reply, match):
    with pytest.raises(ToolCallError, match=match):
        toolcalls.parse(reply, fmt, TOOLS)


def test_accepted_variants():
    assert (
        toolcalls.parse('<|python_tag|>{"name": "read", "parameters": {"path": "a"}}', "llama3_json", TOOLS)
        == "read a"
    )
    assert toolcalls.parse("<think>x</think>[read(path='a')]", "pythonic", TOOLS) == "read a"
    mistral = 'Let me look. [TOOL_CALLS] [{"name": "read", "arguments": {"path": "a"}, "id": "a1b2c3d4e"}]'
    assert toolcalls.parse(mistral, "mistral", TOOLS) == "read a"
