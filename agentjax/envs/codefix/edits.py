"""Tool calls that turn a codefix task's pristine files into given files (pure; no sandbox).

The scripted agents (:mod:`agentjax.envs.codefix.agents`) write their fixes with these: a unified
diff for ``patch`` (:func:`unified_diff`), or one compact ``edit`` (:func:`edit_call`: the
shortest unique span of words around the change, :func:`span`), checked to rewrite the file
exactly under the ``edit`` tool's rule (``old`` occurs once, then str-replace).
"""

from __future__ import annotations

import difflib
import re

from agentjax.envs.codefix.api import Task
from agentjax.envs.protocol import format_tool_call


def read_pristine(task: Task, rel: str) -> str:
    with open(f"{task.repo_dir}/{rel}") as f:
        return f.read()


def unified_diff(task: Task, files: dict[str, str]) -> str:
    """A unified diff (``git apply`` format) from the pristine repository to ``files``."""
    out = []
    for rel, new in sorted(files.items()):
        old = read_pristine(task, rel)
        out += difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}", n=1
        )
    return "".join(out)


def span(text: str, line: str, new: str) -> tuple[str, str] | None:
    """The shortest ``(old, new)`` str-replace pair that turns ``line`` (a line of ``text``) into
    ``new``: the changed characters widened to whole words (whitespace-separated), then by one word
    of context on each side where the line has one, then by further words until ``old`` occurs
    exactly once in ``text``. None where no such span exists (the whole line is not unique)."""
    p = 0
    while p < min(len(line), len(new)) and line[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(line), len(new)) - p and line[-1 - s] == new[-1 - s]:
        s += 1
    words = [m.span() for m in re.finditer(r"\S+", line)]
    if not words:
        return None
    end = len(line) - s  # the changed region is line[p:end] (empty for a pure insertion)
    lo = next((i for i, (_, b) in enumerate(words) if b >= p), len(words) - 1)
    hi = max(lo, next((i for i, (a, _) in reversed(list(enumerate(words))) if a <= end), lo))
    lo, hi = max(0, lo - 1), min(len(words) - 1, hi + 1)  # one word of context each side
    while True:
        a, b = words[lo][0], words[hi][1]
        old, rep = line[a:b], new[a : len(new) - (len(line) - b)]
        exact = line[:a] + rep + line[b:] == new
        if rep.strip() and exact and text.count(old) == 1 and " ".join(old.split()) == old:
            return old, rep
        if lo == 0 and hi == len(words) - 1:
            return None
        lo, hi = max(0, lo - 1), min(len(words) - 1, hi + 1)


def edit_call(task: Task, files: dict[str, str]) -> str | None:
    """``files`` as one ``edit <path> <old>`` + new text call: a line changed, or lines inserted
    after a line (the anchor), becomes the shortest unique span of whole words around the change
    (:func:`span`: ``x > lo`` -> ``x >= lo``; the anchor's last words -> the same + the new lines);
    None where the change is neither (several hunks or files, a line removed, no unique span), so
    the caller falls back to a patch. The call rewrites ``files`` exactly (checked)."""
    if len(files) != 1:
        return None
    ((rel, new),) = files.items()
    text = read_pristine(task, rel)
    a, b = text.splitlines(), new.splitlines()
    ops = [o for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if o[0] != "equal"]
    if len(ops) != 1:
        return None
    tag, i1, i2, j1, j2 = ops[0]
    if tag == "insert" and i1 > 0:  # anchor the insertion on the line before it
        i1, i2, j1 = i1 - 1, i1, j1 - 1
    if i2 - i1 != 1 or j2 <= j1:
        return None
    pair = span(text, a[i1], "\n".join(b[j1:j2]))
    if pair is None or text.replace(pair[0], pair[1], 1) != new:
        return None
    return format_tool_call("edit", rel, pair[0], body=pair[1])
