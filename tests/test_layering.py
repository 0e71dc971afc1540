"""The import graph follows the table in docs/architecture.md: allowed edges only, no cycles."""

import ast
import pathlib

import agentjax

PKG = pathlib.Path(agentjax.__file__).parent

# unit -> the units it may import (a unit is a subpackage or a top-level module of agentjax).
# Kept in sync with the table in docs/architecture.md ("Import direction").
ALLOWED = {
    "choice": set(),  # the Choice enum base: a leaf every unit may import (see LEAVES)
    "importpath": set(),  # 'package.module:attribute' names of user code: a leaf as well
    "rundefaults": set(),  # the default run's values as plain data (configs/default.py): a leaf
    "trajectory": set(),
    "tagjson": set(),
    "toolcall": set(),  # tool calls as text (plain, model formats): a leaf policy, envs and tasks import
    "objectives": {"trajectory"},
    "policy": set(),
    "envs": {"trajectory"},
    "sharding": {"policy"},  # below sampling and learner: the pod check's programs are in podcheck
    "sampling": {"policy", "envs", "trajectory", "tagjson"},
    "learner": {"policy", "objectives", "trajectory", "tagjson"},
    "diagnostics": {"policy", "sampling", "envs", "objectives", "trajectory"},
    "podcheck": {"policy", "learner", "sampling", "sharding"},  # the programs a pod check compiles
    "tasks": {"policy", "sampling", "envs", "trajectory", "tagjson"},
    "report": {"diagnostics", "trajectory"},
    # one training run: config, build, learner, loop, clock, files, summary (agentjax/run/)
    "run": {"policy", "sampling", "learner", "envs", "objectives", "sharding", "diagnostics", "trajectory",
            "tasks"},
    "evaluation": {"run", "policy", "sampling", "learner", "envs", "diagnostics", "tasks"},
    "testing": {"trajectory", "tagjson", "objectives", "policy", "envs", "sharding", "sampling", "learner",
                "diagnostics", "run", "evaluation", "tasks"},
}  # fmt: skip
LEAVES = {
    "choice",
    "importpath",
    "rundefaults",
    "toolcall",
}  # import nothing from agentjax; allowed from every unit


def _unit(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _module(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every agentjax module ``path`` imports (absolute or relative, at any depth)."""
    mod = _module(path).split(".")
    pkg = mod if path.name == "__init__.py" else mod[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[: len(pkg) - node.level + 1]) if node.level else ""
            name = ".".join(x for x in (base, node.module) if x)
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}  # `from pkg import module`
    return {n for n in out if n.split(".")[0] == "agentjax"}


def _files():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_unit_is_in_the_table():
    assert {_unit(p) for p in _files() if p.parent != PKG or p.stem != "__init__"} <= set(ALLOWED)


def test_imports_follow_the_allowed_edges():
    bad = []
    for path in _files():
        src = _unit(path)
        if src == "__init__":
            continue
        for name in _imports(path):
            parts = name.split(".")
            if len(parts) < 2:
                continue
            dst = parts[1]
            if dst != src and dst in ALLOWED and dst not in ALLOWED[src] | LEAVES:
                bad.append(f"{path.relative_to(PKG.parent)} imports {name} ({src} -> {dst})")
    assert not bad, "\n".join(bad)


def test_sharding_imports_neither_sampling_nor_learner():
    """The pod check's programs (the sampler's prefill and decode, the learner's step) are built
    in ``podcheck`` above ``sharding``, so meshes, rules and compile reports never depend on them
    (issue #32 item 4: the table must not grow such an edge back)."""
    assert not ALLOWED["sharding"] & {"sampling", "learner", "podcheck"}
    bad = [
        f"{p.relative_to(PKG.parent)} imports {n}"
        for p in _files()
        if _unit(p) == "sharding"
        for n in _imports(p)
        if n.split(".")[1:2] and n.split(".")[1] in {"sampling", "learner", "podcheck"}
    ]
    assert not bad, "\n".join(bad)


def test_product_code_never_imports_testing():
    for path in _files():
        if _unit(path) != "testing":
            assert not any(n.startswith("agentjax.testing") for n in _imports(path)), path


def test_no_import_cycles_between_modules():
    modules = {_module(p): p for p in _files()}
    graph = {m: {n for n in _imports(p) if n in modules and n != m} for m, p in modules.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of the code's layering
    for m in graph:
        graph[m] = {n for n in graph[m] if not (modules[n].name == "__init__.py" and m.startswith(n + "."))}
    state: dict = {}

    def visit(m, stack):
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(n) :], n]))
            if n not in state:
                visit(n, [*stack, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
