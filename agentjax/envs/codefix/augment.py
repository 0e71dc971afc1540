"""Consistent renaming of a demonstration's identifiers: more distinct episodes from few templates.

The generated tasks come from a few dozen (family, template) pairs, so a small model can memorise
each training template's package name and buggy line instead of learning to copy them from what it
read, and then fails on every held-out template (docs/codefix.md, "Learning run"). :func:`rename`
rewrites a demonstration's observations and actions together, mapping the package name and the
identifiers of its edited line to fresh random names with one substitution per name, so the
episode stays self-consistent (the action copies what the observation shows) while its surface
changes. The text is never replayed in the sandbox: it is a warm-start row only.
"""

from __future__ import annotations

import builtins
import keyword
import random
import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# names the protocol, the tools, the repository layout or Python itself give a meaning to
KEEP = frozenset(
    {*keyword.kwlist, *dir(builtins), "read", "edit", "patch", "test", "submit", "write", "run", "ls"}
    | {"core", "helpers", "tests", "test_visible", "py", "self", "Task", "Editable", "Tools", "Files"}
)


def _fresh(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))
        if name not in taken and name not in KEEP and not keyword.iskeyword(name):
            taken.add(name)
            return name


def rename(pairs: list[tuple[str, str]], rng: random.Random) -> list[tuple[str, str]]:
    """``pairs`` (observation, action) with the package (the first path component of the first
    action's argument) and every identifier of the actions after it renamed consistently."""
    if not pairs:
        return pairs
    first = pairs[0][1].split()
    names = {first[1].split("/")[0]} if len(first) > 1 and "/" in first[1] else set()
    for _, act in pairs[1:]:
        names |= set(_IDENT.findall(act))
    names = {n for n in names if n not in KEEP}
    text = "\x00".join(t for pair in pairs for t in pair)
    taken = set(_IDENT.findall(text))
    mapping = {n: _fresh(rng, taken) for n in sorted(names)}
    if not mapping:
        return pairs
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(mapping, key=len, reverse=True))) + r")\b")
    out = pattern.sub(lambda m: mapping[m.group(0)], text).split("\x00")
    return list(zip(out[::2], out[1::2], strict=True))
