"""The plain tool-call text every environment reads: ``<tool_name> [args...]``, then an optional
body on the following lines (``agentjax.envs.protocol``'s module docstring documents it)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    args: tuple[str, ...]
    body: str


class ToolCallError(ValueError):
    """The action text is not a tool call (an agent error)."""


def parse_tool_call(text: str) -> ToolCall:
    """Parses the documented tool-call format (see the module docstring)."""
    head, _, body = text.strip("\n").partition("\n")
    words = head.split()
    if not words:
        raise ToolCallError("empty action: expected '<tool_name> [args...]'")
    return ToolCall(name=words[0], args=tuple(words[1:]), body=body)


def format_tool_call(name: str, *args: str, body: str = "") -> str:
    head = " ".join((name, *args))
    return f"{head}\n{body}" if body else head
