"""How the run config flows: the calls that carry it, where they land, and how often the flow
climbs back up the module layers (issue #28's measure).

    python -m benchmarks.config_flow [--steps=2]

Trains the smoke config (virtual clock, slot engine, checkpoints, evaluation) for a few steps
and then resumes it for one more, with a profiler on every thread. A *stop* is a call into an
agentjax function that receives the run config or one of its sections (an argument that is a
``RunConfig``, a section dataclass, or a value holding one as ``.run``). A *place* is a module
with at least one stop. A *climb* is a call from unit B into unit A where A is above B in
the architecture's import table (``tests/test_layering.py``: A may import B, directly or not; a
unit is a subpackage or top-level module of agentjax): the flow went down and is called back
up, through a callback or an object handed down (imports alone cannot do that). A stop's
argument carries the config if it is one, or holds one within three attribute hops. Values the
tagged-JSON decoder builds by their allow-listed names (a snapshot's restore) are not climbs.
Climbs are counted as distinct (caller function, callee function) edges, among the stops and
among all calls. Prints the figures and the climbs; writes
``benchmarks/results/config_flow.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import threading
import typing

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")


def units_above() -> dict[str, set[str]]:
    """unit -> every unit below it in the architecture's import table (``tests/test_layering.py``,
    the tree's own): a call from a unit into one that may import it, directly or not, climbs."""
    from tests.test_layering import ALLOWED, LEAVES  # noqa: PLC0415

    below: dict[str, set[str]] = {}

    def walk(u):
        if u not in below:
            below[u] = set()
            for v in ALLOWED.get(u, set()) | (set() if u in LEAVES else LEAVES):
                below[u] |= {v} | walk(v)
        return below[u]

    for u in ALLOWED:
        walk(u)
    return below


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _own(v) -> dict:
    """``v``'s instance attributes, read without running any of its code (no ``__getattr__``)."""
    try:
        d = object.__getattribute__(v, "__dict__")
    except (AttributeError, TypeError):
        return {}
    return d if isinstance(d, dict) else {}


def holds(v, kinds: set, depth: int = 3) -> bool:
    """``v`` is the run config (or a section), or holds one within ``depth`` attribute hops
    (a ``Parts`` holds ``.run``; a learner job holds ``.c.parts.run``)."""
    if type(v) in kinds:
        return True
    if depth == 0 or isinstance(v, type | str | bytes | int | float):
        return False
    return any(holds(x, kinds, depth - 1) for x in _own(v).values())


def section_types() -> set[type]:
    try:  # before issue #28's run package (to measure an older tree the same way)
        from agentjax.runconfig import RunConfig  # noqa: PLC0415
    except ImportError:
        from agentjax.run.config import RunConfig  # noqa: PLC0415

    hints = typing.get_type_hints(RunConfig)
    out = {RunConfig}
    for f in dataclasses.fields(RunConfig):
        for t in typing.get_args(hints[f.name]) or (hints[f.name],):
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                out.add(t)
    return out


def main(steps: int = 2) -> dict:
    try:  # before issue #28's run package
        from agentjax import system as loop  # noqa: PLC0415
    except ImportError:
        from agentjax.run import loop  # noqa: PLC0415
    from configs import smoke  # noqa: PLC0415

    kinds = section_types()
    below = units_above()
    stops: list[tuple[str, str]] = []
    climbs: dict[tuple[str, str], bool] = {}  # (caller fn, callee fn) -> carried the config
    lock = threading.Lock()

    def carries(frame) -> bool:
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            if holds(frame.f_locals.get(name), kinds):
                return True
        return False

    def prof(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        back = frame.f_back
        if not callee.startswith("agentjax") or back is None:
            return
        caller = back.f_globals.get("__name__", "")
        with_config = carries(frame)
        fn = f"{callee}.{frame.f_code.co_qualname}"
        with lock:
            if with_config:
                stops.append((callee, fn))
            up, down = _unit(callee), _unit(caller)
            built = frame.f_code.co_name == "__init__" and down == "tagjson"  # a decoder builds a value
            if caller.startswith("agentjax") and up != down and down in below.get(up, ()) and not built:
                key = (f"{caller}.{back.f_code.co_qualname}", fn)
                climbs[key] = climbs.get(key, False) or with_config

    cfg = smoke.get_config()
    cfg.rl.update(steps=steps, eval_every=steps)
    cfg.scheduler.update(engine_slots=16)
    cfg.checkpoint_every = steps
    cfg.report = False
    with tempfile.TemporaryDirectory() as wd:
        threading.setprofile(prof)
        sys.setprofile(prof)
        try:
            loop.train(cfg, wd, log=lambda s: None)
            cfg.rl.steps = steps + 1
            loop.train(cfg, wd, resume=True, log=lambda s: None)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    config_climbs = sorted(k for k, v in climbs.items() if v)
    out = {
        "stops": len(stops),
        "distinct_stops": len({fn for _, fn in stops}),
        "places": len({m for m, _ in stops}),
        "climbs_carrying_config": len(config_climbs),
        "climbs_all_calls": len(climbs),
        "config_climbs": [f"{a} -> {b}" for a, b in config_climbs],
        "all_climbs": [f"{a} -> {b}" for a, b in sorted(climbs)],
    }
    print(
        f"run config: {out['stops']} stops ({out['distinct_stops']} distinct functions) in "
        f"{out['places']} modules; climbs back up: {out['climbs_carrying_config']} carrying the "
        f"config, {out['climbs_all_calls']} among all calls"
    )
    for c in out["all_climbs"]:
        print("  climb:", c, "(config)" if c in out["config_climbs"] else "")
    res = pathlib.Path(__file__).parent / "results" / "config_flow.json"
    res.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main(int(next((a.split("=")[1] for a in sys.argv[1:] if a.startswith("--steps=")), 2)))
