"""Runs a generated package in this process: modules built in memory, calls judged like the verifier.

Only the generator's own (trusted) code runs here, never an agent's: agent code runs in the sandbox.
Values are compared in the runner's type-exact encoding (:func:`agentjax.envs.codefix._runner.encode`),
the verifier's own rule, so an expected value computed here is the one the verifier compares against.
"""

from __future__ import annotations

import itertools
import sys
import types
from collections.abc import Mapping
from typing import Any

from agentjax.envs.codefix._runner import encode

_ids = itertools.count()


def load(files: Mapping[str, str], package: str) -> types.ModuleType:
    """The package ``package`` of ``files`` (``{'<package>/helpers.py': text, ...}``), fresh."""
    alias = f"_agentjax_gen_{next(_ids)}"
    root = types.ModuleType(alias)
    root.__path__, root.__package__ = [], alias
    sys.modules[alias] = root
    try:
        for sub in ("helpers", "core"):
            mod = types.ModuleType(f"{alias}.{sub}")
            mod.__package__ = alias
            sys.modules[mod.__name__] = mod
            exec(compile(files[f"{package}/{sub}.py"], f"<{package}/{sub}.py>", "exec"), mod.__dict__)  # noqa: S102
            setattr(root, sub, mod)
        exec(compile(files[f"{package}/__init__.py"], f"<{package}/__init__.py>", "exec"), root.__dict__)  # noqa: S102
    finally:
        for name in (alias, f"{alias}.helpers", f"{alias}.core"):
            sys.modules.pop(name, None)
    return root


def outcome(mod: types.ModuleType, fn: str, args: list) -> Any:
    """The encoded return value of ``fn(*args)``, or ``{'exc': name}`` when it raises."""
    try:
        return encode(getattr(mod, fn)(*[_copy(a) for a in args]))
    except Exception as e:  # noqa: BLE001 -- a raising call is an observation
        return {"exc": type(e).__name__}


def value(mod: types.ModuleType, fn: str, args: list) -> Any:
    """The plain return value (the reference's, for a visible test's literal)."""
    return getattr(mod, fn)(*[_copy(a) for a in args])


def _copy(v: Any) -> Any:
    if isinstance(v, list):
        return [_copy(x) for x in v]
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    return v
