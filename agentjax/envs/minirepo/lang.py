"""The minirepo toy language: one-line integer functions, their interpreter and their text.

A *program* is a tuple of :class:`Fn` in definition order (callers before callees). Every function
takes one integer ``x`` and computes ``arg op k`` where ``arg`` is ``x`` or a call of a function
defined later in the program, ``op`` is one of ``+ - *`` and ``k`` a small integer constant::

    g x = f x * 2        # g(x) = f(x) * 2
    f x = x + 3          # f(x) = x + 3

Every program is therefore an affine function of ``x`` per function (slope 1 or a product of
constants), which makes hidden tests decisive: two distinct inputs pin a function down.

Text is word-level and closed: function lines, numbers (clipped for display to ``[-NMAX, NMAX]``,
shown as ``huge`` / ``-huge`` beyond) and a few keywords; see :mod:`agentjax.envs.minirepo.vocab`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any

OPS = ("+", "-", "*")
SLOTS = ("op", "k")
NMAX = 40  # numbers shown in observations are clipped to [-NMAX, NMAX]
NAME_POOL = ("f", "g", "h", "m", "n", "p", "q", "r", "s", "t")


@dataclasses.dataclass(frozen=True)
class Fn:
    """One function ``name x = arg op k`` (``arg`` is ``"x"`` or a callee's name)."""

    name: str
    arg: str
    op: str
    k: int


Program = tuple[Fn, ...]


@dataclasses.dataclass(frozen=True)
class Edit:
    """Set one slot (``op`` or ``k``) of one function: the only change the agent can make."""

    name: str
    slot: str
    value: str | int

    def action(self) -> str:
        """The tool call that applies this edit (``edit g op +``)."""
        return f"edit {self.name} {self.slot} {self.value}"


def apply_op(op: str, a: int, k: int) -> int:
    if op == "+":
        return a + k
    if op == "-":
        return a - k
    if op == "*":
        return a * k
    raise ValueError(f"unknown operator {op!r}")


def as_dict(program: Program) -> dict[str, Fn]:
    return {fn.name: fn for fn in program}


def affine(program: Program) -> dict[str, tuple[int, int]]:
    """Every function as exact integer ``(a, b)`` with ``f(x) = a * x + b``.

    This *is* the interpreter: each op maps its argument's affine form to an affine form
    (``+ k``: b + k; ``- k``: b - k; ``* k``: a * k, b * k). Callees are defined after their
    callers, so one pass in reverse definition order sees every callee first.
    """
    out: dict[str, tuple[int, int]] = {"x": (1, 0)}
    for fn in reversed(program):
        if fn.arg not in out:
            raise ValueError(f"{fn.name} calls {fn.arg!r}, which is not defined after it")
        a, b = out[fn.arg]
        if fn.op == "+":
            out[fn.name] = (a, b + fn.k)
        elif fn.op == "-":
            out[fn.name] = (a, b - fn.k)
        elif fn.op == "*":
            out[fn.name] = (a * fn.k, b * fn.k)
        else:
            raise ValueError(f"unknown operator {fn.op!r}")
    return out


def evaluate(program: Program, name: str, x: int) -> int:
    """Value of ``name(x)``."""
    a, b = affine(program)[name]
    return a * x + b


def outputs(program: Program, tests: Iterable[Any]) -> list[int]:
    """Values of ``t.name(t.x)`` for every test-like ``t`` (one compile for all)."""
    forms = affine(program)
    return [forms[t.name][0] * t.x + forms[t.name][1] for t in tests]


def chain_length(program: Program, name: str) -> int:
    """Number of functions evaluated by a call of ``name`` (1 for a leaf)."""
    fns, n = as_dict(program), 0
    while name != "x":
        n, name = n + 1, fns[name].arg
    return n


def ancestors(program: Program, name: str) -> set[str]:
    """Every function whose value depends on ``name`` (its transitive callers)."""
    out, frontier = set(), {name}
    while frontier:
        frontier = {fn.name for fn in program if fn.arg in frontier} - out
        out |= frontier
    return out


def apply_edit(program: Program, edit: Edit) -> Program:
    """The program with one slot replaced (a new tuple; the input is never mutated)."""
    if edit.slot not in SLOTS:
        raise ValueError(f"unknown slot {edit.slot!r}")
    if edit.slot == "op":
        new = lambda fn: Fn(fn.name, fn.arg, str(edit.value), fn.k)
    else:
        new = lambda fn: Fn(fn.name, fn.arg, fn.op, int(edit.value))
    return tuple(new(fn) if fn.name == edit.name else fn for fn in program)


def num_word(v: int) -> str:
    """A number as an observation word (clipped to the closed vocabulary)."""
    if v > NMAX:
        return "huge"
    if v < -NMAX:
        return "-huge"
    return str(v)


def line(fn: Fn) -> str:
    """The source line of one function, e.g. ``g x = f x * 2``."""
    arg = "x" if fn.arg == "x" else f"{fn.arg} x"
    return f"{fn.name} x = {arg} {fn.op} {num_word(fn.k)}"


def parse_line(text: str) -> Fn:
    """Inverse of :func:`line` (used by scripted agents reading ``view`` output)."""
    w = text.split()
    if len(w) == 6 and w[1:4] == ["x", "=", "x"]:
        return Fn(w[0], "x", w[4], int(w[5]))
    if len(w) == 7 and w[1:3] == ["x", "="] and w[4] == "x":
        return Fn(w[0], w[3], w[5], int(w[6]))
    raise ValueError(f"not a function line: {text!r}")


def source(program: Program) -> str:
    return " ; ".join(line(fn) for fn in program)


def canonical(program: Program) -> str:
    """Program text with names replaced by definition index: equal up to renaming = equal text."""
    rename = {fn.name: f"f{i}" for i, fn in enumerate(program)}
    rename["x"] = "x"
    return " ; ".join(f"{rename[fn.name]} x = {rename[fn.arg]} {fn.op} {fn.k}" for fn in program)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
