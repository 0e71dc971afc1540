"""The closed word-level vocabulary of minirepo.

Every observation the environment emits and every well-formed action is a sequence of
whitespace-separated words from :func:`vocabulary`. The environment never echoes the agent's
text back (error messages are fixed words), so the closure holds whatever the agent sends.
A word-level tokenizer built from this list (plus its own turn-boundary tokens) covers every
observation exactly, with no unknown-token fallback.
"""

from __future__ import annotations

import functools

from agentjax.envs.minirepo.lang import NAME_POOL, NMAX, OPS

TOOLS = ("run", "view", "edit", "submit", "edit_test")
KEYWORDS = (
    *TOOLS,
    *OPS,
    "op", "k", "x", "=",  # function lines and edit slots
    "repo", "tool",  # first observation: the function names, the planted tool if any
    "fail", "expect", "got", "pass",  # test report
    "ok", "submitted",  # acknowledgements
    "error", "unknown", "bad", "args", "name", "no", "test",  # malformed actions
    "retry", "timeout", "truncated",  # injected recoverable faults
    "stop", "cap", "errors", "done",  # episode ended without a submit
    "...", "huge", "-huge",  # observation truncation, numbers beyond the display range
)  # fmt: skip


@functools.cache
def _words() -> tuple[str, ...]:
    numbers = (str(i) for i in range(-NMAX, NMAX + 1))
    return tuple(sorted({*KEYWORDS, *NAME_POOL, *numbers}))


def vocabulary() -> list[str]:
    """Every word that can appear in an observation or a valid action (sorted, deterministic)."""
    return list(_words())


def in_vocabulary(text: str) -> bool:
    """True when every whitespace-separated word of ``text`` is in :func:`vocabulary`."""
    words = frozenset(_words())
    return all(w in words for w in text.split())
