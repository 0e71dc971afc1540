"""Tool calls in generated text: Hermes/Qwen, Llama-3 JSON, pythonic, Mistral and plain, both ways.

A model's reply may hold ``<think>...</think>`` blocks (never parsed) and then either

- **hermes** (Qwen2.5/Qwen3, Hermes, many tool-tuned models)::

      <tool_call>
      {"name": "write", "arguments": {"path": "pkg/core.py", "body": "..."}}
      </tool_call>

- **llama3_json** (Llama 3.1-3.3 custom tools; an optional ``<|python_tag|>`` first)::

      {"name": "write", "parameters": {"path": "pkg/core.py", "body": "..."}}

- **pythonic** (Llama 3.2 / Llama 4 style): ``[write(path="pkg/core.py", body="...")]``

- **mistral** (Mistral v0.3 / Nemo templates; text before it is allowed; the call's 9-character
  ``id`` is written in demonstrations and carried by the tool message)::

      [TOOL_CALLS] [{"name": "write", "arguments": {"path": "pkg/core.py", "body": "..."}, "id": "..."}]

- **mistral_args** (Mistral Small 3.x, Magistral, Devstral templates)::

      [TOOL_CALLS]write[ARGS]{"path": "pkg/core.py", "body": "..."}

- **plain** (the environment protocol's own format, :mod:`agentjax.envs.protocol`)::

      write pkg/core.py
      ...body...

:func:`parse` turns a reply into the plain text an environment steps on; a reply that holds no
call, malformed JSON, an unknown tool or wrong arguments raises :class:`ToolCallError` (the
rollout ends the episode as ``agent_error`` with that message as evidence). JSON arguments map to
the plain format through the tool's schema (OpenAI function format, as chat templates take it):
its properties in declared order are the positional arguments, except ``body``, which is the body.
:func:`render` is the inverse (demonstrations written by scripted agents in the plain format).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from agentjax.choice import Choice
from agentjax.toolcall import formats as toolformats
from agentjax.toolcall.text import ToolCallError, format_tool_call, parse_tool_call


class ToolFormat(Choice):
    PLAIN = "plain"  # the reply is the action text itself
    HERMES = "hermes"  # <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    LLAMA3_JSON = "llama3_json"  # {"name": ..., "parameters": {...}}
    PYTHONIC = "pythonic"  # [name(arg="...", ...)]
    MISTRAL = "mistral"  # [TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}] (v0.3)
    MISTRAL_ARGS = "mistral_args"  # [TOOL_CALLS]name[ARGS]{...} (Mistral Small 3.x, Magistral)


FORMATS = tuple(ToolFormat.values())
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
BODY = "body"


def schema(name: str, description: str, **params: str) -> dict:
    """An OpenAI-style function schema; ``params`` name -> description, all strings, in order.
    A trailing ``?`` on a description marks the parameter optional."""
    props = {k: {"type": "string", "description": v.rstrip("?")} for k, v in params.items()}
    required = [k for k, v in params.items() if not v.endswith("?")]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


def require(fmt: str) -> None:
    """Raises ImportError now if ``fmt``'s parser (transformers, for the library formats) is missing."""
    toolformats.require(fmt)


def strip_think(text: str) -> str:
    """The reply without its ``<think>`` blocks (an unclosed one runs to the end)."""
    return _THINK.sub("", text)


def _by_name(tools: Sequence[Mapping]) -> dict[str, Mapping]:
    return {t["function"]["name"]: t["function"] for t in tools}


def _to_plain(call, tools: dict[str, Mapping]) -> str:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ToolCallError(f"a tool call must be a JSON object with a string 'name'; got {call!r:.80}")
    name, args = call["name"], call.get("arguments", {})
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ToolCallError(f"tool {name!r}: 'arguments' is not valid JSON: {e}") from None
    if not isinstance(args, dict):
        raise ToolCallError(f"tool {name!r}: 'arguments' must be an object; got {args!r:.80}")
    if name not in tools:
        raise ToolCallError(f"unknown tool {name!r}; tools: {', '.join(tools)}")
    params = tools[name].get("parameters", {})
    props = list(params.get("properties", {}))
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolCallError(f"tool {name!r}: unknown arguments {unknown}; allowed: {props}")
    missing = [k for k in params.get("required", []) if k not in args]
    if missing:
        raise ToolCallError(f"tool {name!r}: missing required arguments {missing}")
    positional = []
    for k in props:
        if k == BODY or k not in args:
            continue
        v = str(args[k])
        if not v.strip() or "\n" in v:
            raise ToolCallError(f"tool {name!r}: argument {k!r} must be one non-empty line")
        positional.append(v)
    return format_tool_call(name, *positional, body=str(args.get(BODY, "")))


def parse(text: str, fmt: str, tools: Sequence[Mapping] = ()) -> str:
    """The plain-format action in a generated reply (see the module docstring)."""
    if fmt not in FORMATS:
        raise ValueError(f"tool-call format {fmt!r} is invalid; allowed values: {list(FORMATS)}")
    reply = strip_think(text)
    if fmt == "plain":
        if not reply.strip():
            raise ToolCallError("empty action: expected '<tool_name> [args...]'")
        return reply.strip("\n")
    if fmt in toolformats.TEMPLATES:
        return _to_plain(toolformats.parse_call(reply, fmt), _by_name(tools))
    calls = _CALL.findall(reply)
    if not calls:
        if "<tool_call>" in reply:
            raise ToolCallError("unterminated <tool_call>: no closing </tool_call>")
        raise ToolCallError("no <tool_call>...</tool_call> in the reply")
    if len(calls) > 1:
        raise ToolCallError(f"{len(calls)} tool calls in one reply; one call per turn")
    try:
        call = json.loads(calls[0])
    except json.JSONDecodeError as e:
        raise ToolCallError(f"<tool_call> is not valid JSON: {e}") from None
    return _to_plain(call, _by_name(tools))


_OPENS = {  # how a reply in each format starts a tool call (after its <think> blocks)
    "hermes": lambda r: "<tool_call>" in r,
    "llama3_json": lambda r: r.lstrip().startswith(("{", "<|python_tag|>")),
    "pythonic": lambda r: r.lstrip().startswith("["),
    "mistral": lambda r: "[TOOL_CALLS]" in r,
    "mistral_args": lambda r: "[TOOL_CALLS]" in r,
}


def has_call(text: str, fmt: str, tools: Sequence[Mapping] = ()) -> bool:
    """Whether a reply opens a tool call in ``fmt`` (well formed or not: :func:`parse` judges
    that); a reply that does not is a final answer. In the plain format, a call is a reply whose
    first word names one of ``tools``."""
    reply = strip_think(text)
    if fmt == "plain":
        words = reply.split()
        return bool(words) and words[0] in _by_name(tools)
    return _OPENS[fmt](reply)


def _named(plain: str, tools: Sequence[Mapping]) -> tuple[str, dict[str, str], Mapping]:
    call = parse_tool_call(plain)
    spec = _by_name(tools).get(call.name)
    if spec is None:
        raise ToolCallError(f"unknown tool {call.name!r}; tools: {', '.join(_by_name(tools))}")
    names = [k for k in spec.get("parameters", {}).get("properties", {}) if k != BODY]
    if call.args and not names:
        raise ToolCallError(f"tool {call.name!r} takes no arguments; got {list(call.args)}")
    words = call.args
    if len(words) > len(names):  # extra words belong to the last positional argument
        words = (*words[: len(names) - 1], " ".join(words[len(names) - 1 :]))
    args = dict(zip(names, words, strict=False))
    if call.body:
        args[BODY] = call.body
    return call.name, args, spec


def arguments(plain: str, tools: Sequence[Mapping]) -> tuple[str, dict[str, str]]:
    """A plain-format call as ``(name, {argument: value})`` through its tool's schema (the
    inverse of :func:`parse`'s mapping; extra words belong to the last positional argument).
    An unknown tool, or a required argument left out, raises :class:`ToolCallError`."""
    name, args, spec = _named(plain, tools)
    missing = [k for k in spec.get("parameters", {}).get("required", []) if k not in args]
    if missing:
        raise ToolCallError(f"tool {name!r}: missing required arguments {missing}")
    return name, args


def render(plain: str, fmt: str, tools: Sequence[Mapping] = ()) -> str:
    """A plain-format action as the reply a model would write in ``fmt`` (for demonstrations)."""
    if fmt == "plain":
        return plain
    name, args, _ = _named(plain, tools)
    if fmt in toolformats.TEMPLATES:
        return toolformats.render_call(name, args, fmt)
    obj = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{obj}\n</tool_call>"
