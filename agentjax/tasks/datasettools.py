"""The tools a dataset record may declare, and who a failing tool call is charged to.

A record's ``tools`` is a list whose items are either

- an import path ``"package.module:function"``: a Python function, called with the call's
  arguments as keywords (strings); its schema is read from its signature (every parameter a
  string, required unless it has a default) and the first line of its docstring; or
- a tool schema (OpenAI function format ``{"type": "function", "function": {...}}``, or the bare
  ``{"name", "description", "parameters"}``), called through the task's one tool handler
  ``task.kwargs.tools=package.module:handler``: ``handler(record, name, arguments) -> result``.

A result that is not a string is written as JSON. Faults (:func:`attribute_tool_error`), as
``agentjax.envs.protocol`` attributes a raising step: arguments the schema or the signature
refuse, or a tool raising what Python raises on bad input values (``ValueError``, ``TypeError``,
``LookupError``, ``ArithmeticError``: a tool refuses bad arguments this way) are the agent's
(``agent_error``, reward 0); any other exception (``RuntimeError``, ``OSError``, an
``InfraError``, ...) is the tool's own crash (``infra_fault``: masked and retried, never a zero
the agent did not earn).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentjax import importpath
from agentjax.envs.protocol import MAX_ERROR_CHARS, Label
from agentjax.policy.config import ConfigError
from agentjax.toolcall import calls as toolcalls

# what a tool raises to refuse its arguments: the agent's error (anything else: the tool's crash)
AGENT_ERRORS = (ValueError, TypeError, LookupError, ArithmeticError)


@dataclasses.dataclass(frozen=True)
class Tool:
    schema: Mapping  # OpenAI function schema, as chat templates take it
    call: Callable[[dict, dict], Any]  # (record, arguments) -> result

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]


def function_schema(fn: Callable, field: str) -> dict:
    """``fn``'s schema from its signature (string parameters) and its docstring's first line."""
    params = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ConfigError(f"{field}: tool {fn.__name__}'s parameter {p.name!r} must be a keyword")
        params[p.name] = p.name + ("?" if p.default is not p.empty else "")
    doc = (inspect.getdoc(fn) or fn.__name__).splitlines()[0]
    return toolcalls.schema(fn.__name__, doc, **params)


def load_function(path: str, field: str) -> Callable:
    """The function ``path`` names (a verifier, a tool, a handler); a ``ConfigError`` naming
    ``field`` otherwise."""
    try:
        fn = importpath.load(path, field)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not callable(fn):
        raise ConfigError(f"{field}={path!r} is not a function")
    return fn


def _from_function(path: str, field: str) -> Tool:
    fn = load_function(path, field)
    sig = inspect.signature(fn)

    def call(record: dict, args: dict):
        try:
            sig.bind(**args)
        except TypeError as e:  # arguments the function does not take: the agent's
            raise ValueError(f"tool {fn.__name__!r}: {e}") from None
        return fn(**args)

    return Tool(function_schema(fn, field), call)


def _from_spec(spec: Mapping, handler: Callable | None, field: str) -> Tool:
    fn = spec.get("function", spec) if isinstance(spec, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ConfigError(f"{field}: a tool is an import path or a schema with a string 'name'")
    if handler is None:
        raise ConfigError(
            f"{field}: tool schema {fn['name']!r} needs task.kwargs.tools='package.module:handler' "
            "(handler(record, name, arguments) -> result)"
        )
    schema = {"type": "function", "function": {"parameters": {"type": "object", "properties": {}}, **fn}}
    name = fn["name"]
    return Tool(schema, lambda record, args: handler(record, name, args))


def load_tools(
    records: Sequence[dict], handler: Callable | None, where: str, out: dict[str, Tool], first: int = 1
) -> list[tuple[str, ...]]:
    """Adds every tool the records declare to ``out`` (by name: one schema per name across the
    dataset); returns each record's tool names, in order. Errors name ``where`` and the record's
    number in its source (``first``: the number of ``records[0]``)."""
    loaded: dict[str, Tool] = {}  # by import path
    names = []
    for n, rec in enumerate(records, first):
        items = rec.get("tools", [])
        if not isinstance(items, list):
            raise ConfigError(f"{where}: record {n}'s 'tools' must be a list")
        mine = []
        for k, item in enumerate(items):
            field = f"{where}: record {n} tools[{k}]"
            if isinstance(item, str):
                tool = loaded.get(item) or _from_function(item, field)
                loaded[item] = tool
            else:
                tool = _from_spec(item, handler, field)
            if tool.name in out and out[tool.name].schema != tool.schema:
                raise ConfigError(f"{field}: tool {tool.name!r} is declared with two different schemas")
            out.setdefault(tool.name, tool)
            mine.append(tool.name)
        names.append(tuple(mine))
    return names


def result_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)


def attribute_tool_error(err: BaseException) -> tuple[Label, dict]:
    """Who a raising tool call is charged to, and the evidence (see the module docstring)."""
    text = repr(err)[:MAX_ERROR_CHARS]
    if isinstance(err, AGENT_ERRORS):
        return Label.AGENT_ERROR, {"tool_error": text, "attribution": "agent_input: the tool refused"}
    return Label.INFRA_FAULT, {"tool_crash": text, "attribution": "infra: the tool itself crashed"}
