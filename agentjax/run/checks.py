"""Type and range checks of run-config values, before any work starts.

Every check raises :class:`~agentjax.policy.config.ConfigError` naming the field (``section.name``),
the value given and what is allowed, e.g. ``optim.learning_rate=nan is invalid; must be a finite
number > 0``. :func:`check_types` compares each value with its dataclass annotation (a string where
a number is expected, a bool where an int is expected, NaN or infinity anywhere); :func:`check_ranges`
applies the table :data:`RANGES`. ``tests/test_runconfig.py`` proves each rule and fuzzes the parser.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from typing import Any

from agentjax.policy.config import ConfigError

# Every integer fits int32: counts and sizes reach numpy/JAX int32 arrays, and a huge one is a typo.
MAX_INT = 2**31 - 1
# field: (lowest, highest, whether the bounds are inclusive); None: unbounded on that side. The
# upper bounds of sizes and counts are far above any real run: a value past one is a typo that
# would otherwise fail as a MemoryError after the warm start (the model's size is bounded by the
# free disk its checkpoints need, checked at start).
RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "seed": (0, None, True),
    "checkpoint_every": (0, None, True),  # 0: never
    "log_every": (1, None, True),
    "task.max_steps": (1, 4096, True),
    "task.eval_tasks": (1, 2**20, True),
    "caps.max_tool_calls": (1, 4096, True),
    "caps.max_action_tokens": (1, 2**20, True),
    "caps.max_obs_tokens": (1, 2**20, True),
    "caps.max_tokens": (1, 2**30, True),  # None: no episode cap
    "warm_start.episodes": (1, 2**24, True),
    "warm_start.steps": (0, 2**24, True),  # 0: no warm start
    "warm_start.batch_size": (1, 2**16, True),
    "rl.steps": (1, 2**24, True),
    "rl.group_size": (1, 2**12, True),
    "rl.batch_size": (1, 2**16, True),
    "rl.eval_every": (1, None, True),
    "scheduler.window": (1, 2**20, True),
    "scheduler.num_slots": (1, 2**16, True),
    "admission.max_version_gap": (0, None, True),
    "scheduler.gen_seconds_per_token": (0, None, True),
    "scheduler.learner_step_time": (0, None, True),
    "scheduler.engine_slots": (0, 2**16, True),  # 0: lock-step Rollout
    "scheduler.engine_chunk": (1, 2**16, True),
    "scheduler.env_workers": (1, 4096, True),
    "model.max_seq_len": (1, 2**20, True),
    "placement.sync_every": (1, None, True),
    "context.arg": (0, None, True),
    "optim.warmup_steps": (0, None, True),
    "optim.weight_decay": (0, None, True),
    "optim.grad_clip": (0, None, True),  # 0: no clipping
    "optim.grad_accum": (1, None, True),
}
# field: (lowest, highest) with both bounds exclusive.
OPEN_RANGES: dict[str, tuple[float, float]] = {
    "warm_start.learning_rate": (0.0, math.inf),
    "optim.learning_rate": (0.0, math.inf),
    "rl.temperature": (0.0, math.inf),
}
HALF_OPEN: dict[str, tuple[float, float]] = {  # [low, high)
    "optim.b1": (0.0, 1.0),
    "optim.b2": (0.0, 1.0),
}


def _describe(hint: Any) -> str:
    if hint is float:
        return "a finite number"
    if hint is int:
        return f"an integer of magnitude <= {MAX_INT}"
    if hint is bool:
        return "True or False"
    if hint is str:
        return "a string"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"one of {[m.value for m in hint]}"
    return f"a value of type {getattr(hint, '__name__', None) or str(hint).replace('typing.', '')}"


def type_ok(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the annotation ``hint`` (ints pass for floats; no NaN/inf)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, h) for h in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint) or (isinstance(value, str) and value in {m.value for m in hint})
    if hint is tuple or origin is tuple:
        if not isinstance(value, tuple | list):
            return False
        if not args or args == ((),):
            return True
        if len(args) == 2 and args[1] is Ellipsis:
            return all(type_ok(v, args[0]) for v in value)
        return len(value) == len(args) and all(type_ok(v, h) for v, h in zip(value, args, strict=True))
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


@functools.cache
def type_hints(cls) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class (it compiles every annotation each call)."""
    return typing.get_type_hints(cls)


def check_types(section: str, cls, values: dict) -> None:
    """Each of ``values`` (field -> value) against ``cls``'s annotation of that field."""
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        hint, v = hints[f.name], values[f.name]
        if not type_ok(v, hint):
            name = f"{section}.{f.name}" if section else f.name
            if isinstance(hint, type) and issubclass(hint, enum.Enum):
                raise ConfigError(f"{name}={v!r} is invalid; allowed values: {[m.value for m in hint]}")
            raise ConfigError(f"{name}={v!r} is invalid; must be {_describe(hint)}")


def check_value(field: str, value: Any) -> None:
    """``field``'s range from the tables above (fields without a rule, or left None, pass)."""
    if value is None:
        return
    if field in RANGES:
        lo, hi, _ = RANGES[field]
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            allowed = f">= {lo}" if hi is None else f">= {lo} and <= {hi}"
            raise ConfigError(f"{field}={value!r} is invalid; must be {allowed}")
    if field in OPEN_RANGES:
        lo, hi = OPEN_RANGES[field]
        if not lo < value < hi:
            raise ConfigError(f"{field}={value!r} is invalid; must be a finite number > {lo}")
    if field in HALF_OPEN:
        lo, hi = HALF_OPEN[field]
        if not lo <= value < hi:
            raise ConfigError(f"{field}={value!r} is invalid; must be in [{lo}, {hi})")


def check_mesh(field: str, mesh: Any, axes, *, lowest: int) -> None:
    """A mesh shape: a dict of known axes to integer sizes >= ``lowest`` (0: the axis is unset)."""
    if not isinstance(mesh, dict):
        raise ConfigError(f"{field}={mesh!r} is invalid; must be a dict of mesh axis sizes over {list(axes)}")
    for k, v in mesh.items():
        if k not in axes:
            raise ConfigError(f"{field}.{k} is not a mesh axis; allowed: {list(axes)}")
        if isinstance(v, bool) or not isinstance(v, int) or not lowest <= v <= MAX_INT:
            unset = " (0: unset)" if lowest == 0 else " (leave an axis out for size 1)"
            raise ConfigError(f"{field}.{k}={v!r} is invalid; must be an integer >= {lowest}{unset}")


def check_ranges(section: str, obj) -> None:
    """Every field of the dataclass ``obj`` that has a rule."""
    for f in dataclasses.fields(obj):
        check_value(f"{section}.{f.name}", getattr(obj, f.name))
