"""Llama-3 JSON, pythonic and Mistral tool calls, parsed by transformers' response parser.

transformers (>= 5) parses a model's reply with a declarative *response template*
(``transformers.utils.chat_parsing.parse_response``: anchors, content parsers ``json`` and
``python-call-list``, named captures of an anchor pattern put together by a ``transform``; the
grammar of ``docs/source/en/chat_response_parsing.md``). This module holds one template per
format and renders calls the way the formats' chat templates write an assistant's
``tool_calls``: ``{"name": ..., "parameters": ...}`` in Llama 3.1's, ``[name(k="v")]`` in the
pythonic ones, ``[TOOL_CALLS] [{"name": ..., "arguments": ..., "id": "<9 chars>"}]`` in Mistral
v0.3's (``mistral``), ``[TOOL_CALLS]name[ARGS]{...}`` in the newer Mistral templates (Mistral
Small 3.x, Magistral, Devstral: ``mistral_args``; an optional ``[CALL_ID]id`` before ``[ARGS]``
is read too). Mistral v0.3's template refuses a tool message without the 9-character
alphanumeric id of the call it answers: :func:`call_id` is the id of a reply's call (its own, or
one derived from the reply when it wrote none), which the chat codec gives the tool message.
Only the import of transformers is deferred: it is the optional ``hf`` extra, needed by these
formats only.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Mapping

from agentjax.toolcall.text import ToolCallError

_TEXT = {"content": "text"}
TEMPLATES = {
    # The whole reply is one JSON object (vLLM's llama3_json accepts the same).
    "llama3_json": {
        "start_anchor": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "fields": {
            "tool_calls": {
                "open_pattern": r"^\s*(?:<\|python_tag\|>)?\s*(?=\{)",
                "close_pattern": r"\s*(?:;|$)",
                "content": "json",
                "repeats": True,
            },
            "content": _TEXT,
        },
    },
    "pythonic": {
        "start_anchor": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "fields": {
            "tool_calls": {"open_pattern": r"^\s*(?=\[)", "content": "python-call-list"},
            "content": _TEXT,
        },
    },
    "mistral": {
        "start_anchor": "[/INST]",
        "fields": {"tool_calls": {"open": "[TOOL_CALLS]", "content": "json"}, "content": _TEXT},
    },
    "mistral_args": {
        "start_anchor": "[/INST]",
        "fields": {
            "tool_calls": {
                "open_pattern": r"\[TOOL_CALLS\](?P<name>[^\[\]]+?)(?:\[CALL_ID\][A-Za-z0-9]+)?\[ARGS\]",
                "content": "json",
                "repeats": True,
                "transform": {"name": "{name}", "arguments": "{content}"},
            },
            "content": _TEXT,
        },
    },
}
CALL_IDS = ("mistral", "mistral_args")  # formats whose tool messages carry the call's id
_ID = re.compile(r'"id"\s*:\s*"([A-Za-z0-9]{9})"|\[CALL_ID\]([A-Za-z0-9]{9})')
_ALNUM = string.ascii_letters + string.digits
EXPECTED = {
    "llama3_json": '{"name": ..., "parameters": {...}}',
    "pythonic": '[name(arg="...")]',
    "mistral": '[TOOL_CALLS] [{"name": ..., "arguments": {...}}]',
    "mistral_args": "[TOOL_CALLS]name[ARGS]{...}",
}


def _parser():
    try:
        from transformers.utils.chat_parsing import parse_response  # noqa: PLC0415
    except ImportError as e:
        raise ImportError(
            f"tool formats {sorted(TEMPLATES)} use transformers' response parser "
            f"(transformers >= 5, the 'hf' extra): {e}"
        ) from None
    return parse_response


def require(fmt: str) -> None:
    """Raises ImportError at start when ``fmt`` needs a parser that is not installed."""
    if fmt in TEMPLATES:
        _parser()


def parse_call(reply: str, fmt: str) -> dict:
    """The one call ``{"name", "arguments"}`` in ``reply`` (``ToolCallError`` otherwise)."""
    try:
        msg = _parser()(reply, TEMPLATES[fmt], prefix="")
    except ValueError as e:
        raise ToolCallError(f"{fmt} tool call does not parse: {str(e).splitlines()[0]}") from None
    calls = msg.get("tool_calls")
    calls = [] if calls is None else calls
    calls = [c for group in calls for c in (group if isinstance(group, list) else [group])]
    if not calls:
        raise ToolCallError(f"no {fmt} tool call in the reply; expected {EXPECTED[fmt]}")
    if len(calls) > 1:
        raise ToolCallError(f"{len(calls)} tool calls in one reply; one call per turn")
    if fmt not in CALL_IDS and str(msg.get("content") or "").strip():
        raise ToolCallError(f"text beside the {fmt} tool call: {str(msg['content']).strip()!r:.80}")
    call = calls[0]
    if not isinstance(call, dict):
        raise ToolCallError(f"a tool call must be an object with a string 'name'; got {call!r:.80}")
    if fmt == "llama3_json" and "arguments" not in call:
        call = {"name": call.get("name"), "arguments": call.get("parameters", {})}
    return call


def render_call(name: str, args: Mapping[str, str], fmt: str) -> str:
    """One call as the format's chat template writes it (``tojson``: ``json.dumps``, no ASCII escaping)."""
    dumps = lambda x: json.dumps(x, ensure_ascii=False)
    if fmt == "llama3_json":
        return dumps({"name": name, "parameters": dict(args)})
    if fmt == "pythonic":
        return "[" + name + "(" + ", ".join(f"{k}={dumps(v)}" for k, v in args.items()) + ")]"
    if fmt == "mistral_args":
        return "[TOOL_CALLS]" + name + "[ARGS]" + dumps(dict(args))
    call = {"name": name, "arguments": dict(args)}
    return "[TOOL_CALLS] " + dumps([{**call, "id": _derived_id(dumps(call))}])


def _derived_id(text: str) -> str:
    """9 alphanumeric characters from ``text`` (deterministic: a run is a function of its seed)."""
    n = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return "".join(_ALNUM[(n // len(_ALNUM) ** k) % len(_ALNUM)] for k in range(9))


def call_id(reply: str) -> str:
    """The id of the call in ``reply``, as a Mistral tool message carries it: the 9-character id
    the reply wrote (``"id": "..."`` or ``[CALL_ID]...``), else one derived from the reply."""
    m = _ID.search(reply)
    return (m.group(1) or m.group(2)) if m else _derived_id(reply)
