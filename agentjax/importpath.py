"""Import-path names (``package.module:attribute``): how a config names a user's own code.

    fn = load("my_pkg.losses:clipped", "loss.name")   # the object, or one line naming the field

``task.name``, ``loss.name`` and a dataset task's ``verifier`` take either a built-in's short name
or such a path; the built-ins are registered as paths too, so both go through :func:`load`. A
missing module, a missing attribute or a malformed path is a ``ValueError`` of one line naming the
field, the path and what went wrong (the caller turns it into a ``ConfigError``).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_path(name: Any) -> bool:
    """Whether ``name`` is written as ``package.module:attribute`` (not a registry short name)."""
    return isinstance(name, str) and ":" in name


def load(path: str, field: str) -> Any:
    """The object named by ``path`` (``package.module:attr.subattr``); ``field`` names the config
    field in every error."""
    if not isinstance(path, str) or not _PATH.match(path):
        raise ValueError(f"{field}={path!r} is invalid; an import path is written 'package.module:attribute'")
    module, _, attr = path.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:  # ModuleNotFoundError included; the module's own failing import too
        raise ValueError(f"{field}={path!r}: cannot import module {module!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{field}={path!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def lazy_exports(module: str, exports: dict[str, str], namespace: dict):
    """A package's ``__getattr__`` for its face: ``exports`` maps a name to
    ``"package.module:attribute"``, imported on first access (so importing the package stays
    light) and kept in ``namespace`` (the package's globals) from then on."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, attr = exports[name].split(":")
        value = getattr(importlib.import_module(where), attr)
        namespace[name] = value
        return value

    return __getattr__
