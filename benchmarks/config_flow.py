"""How the run config flows: the calls that carry it, where they land, and how often the flow
climbs back up the module layers (issue #28's measure).

    python -m benchmarks.config_flow [--steps=2]

Trains the smoke config (virtual clock, slot engine, checkpoints, evaluation) for a few steps
and then resumes it for one more, with a profiler on every thread. A *stop* is a call into an
agentjax function that receives the run config or one of its sections (an argument that is a
``RunConfig``, a section dataclass, or a value holding one as ``.run``). A *place* is a module
with at least one stop. A *climb* is a call from module B into module A where A is above B in
the import graph (A imports B, directly or through other modules): the flow went down and is
called back up, through a callback or an object handed down (imports alone cannot do that).
Climbs are counted as distinct (caller function, callee function) edges, among the stops and
among all calls. Prints the figures and the climbs; writes
``benchmarks/results/config_flow.json``.
"""

from __future__ import annotations

import ast
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

import agentjax  # noqa: E402

PKG = pathlib.Path(agentjax.__file__).parent


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    mod = _module(path).split(".")
    pkg = mod if path.name == "__init__.py" else mod[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[: len(pkg) - node.level + 1]) if node.level else ""
            name = ".".join(x for x in (base, node.module) if x)
            out |= {name} | {f"{name}.{a.name}" for a in node.names}
    return {n for n in out if n in modules}


def below() -> dict[str, set[str]]:
    """module -> every module it imports, directly or transitively."""
    files = {_module(p): p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}
    faces = {m for m, p in files.items() if p.name == "__init__.py"}  # re-exports, not a layer
    direct = {m: _imports(p, set(files)) - {m} - faces for m, p in files.items()}
    out: dict[str, set[str]] = {}

    def walk(m, seen):
        if m in out:
            return out[m]
        acc = set()
        for n in direct[m]:
            if n not in seen:
                acc |= {n} | walk(n, seen | {n})
        out[m] = acc
        return acc

    for m in direct:
        walk(m, {m})
    return out


def _own(v) -> dict:
    """``v``'s instance attributes, read without running any of its code (no ``__getattr__``)."""
    try:
        return object.__getattribute__(v, "__dict__")
    except (AttributeError, TypeError):
        return {}


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
    layers = below()
    stops: list[tuple[str, str]] = []
    climbs: dict[tuple[str, str], bool] = {}  # (caller fn, callee fn) -> carried the config
    lock = threading.Lock()

    def carries(frame) -> bool:
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            v = frame.f_locals.get(name)
            if type(v) in kinds or type(_own(v).get("run")) in kinds:
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
            if caller.startswith("agentjax") and caller in layers.get(callee, ()):  # callee above caller
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
