"""The loss registry holds each loss's paper values once (issue #28 item 5).

A loss function takes its hyper-parameters without defaults (the registry's config passes every
one), and no module of ``agentjax/objectives`` but the registry writes a number for a loss's own
field (a clip epsilon, a bound, a cap): the grep-style check below reads their syntax trees.
"""

import ast
import dataclasses
import inspect
import pathlib
import re

import pytest

from agentjax import objectives
from agentjax.objectives import registry

OBJ = pathlib.Path(objectives.__file__).parent
# the shared switches every loss may take (off by default; LossConfig passes them), not its own
SHARED = {"max_len", "ref_logp", "kl_coef", "kl_kind", "aggregation"}


def _functions(cls):
    """The objectives functions a registry entry's ``apply`` calls."""
    names = re.findall(r"\b(\w+_loss)\(", inspect.getsource(cls.apply))
    return [getattr(objectives, n) for n in names]


@pytest.mark.parametrize("name", sorted(registry.LOSSES))
def test_a_registered_loss_function_has_no_default_hyper_parameter(name):
    fns = _functions(registry.LOSSES[name])
    assert fns, f"{name}: its apply calls no objectives function"
    for fn in fns:
        own = {
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name not in SHARED
        }
        with_default = sorted(
            p for p in own if inspect.signature(fn).parameters[p].default is not inspect.Parameter.empty
        )
        assert not with_default, f"{fn.__name__} has defaults for {with_default}: the registry holds them"


def _own_fields() -> set[str]:
    fields = {f.name for cls in registry.LOSSES.values() for f in dataclasses.fields(cls)} - {"aggregation"}
    return fields | {"mismatch_token_bounds", "staleness_token_bounds", "token_bounds", "seq_bounds"}


def _numbers(node) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, int | float) for n in ast.walk(node))


def test_the_registry_is_the_only_place_of_the_losses_values_in_objectives():
    own, found = _own_fields(), []
    for path in sorted(OBJ.glob("*.py")):
        if path.name == "registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                pairs = [*zip(a.args[len(a.args) - len(a.defaults) :], a.defaults, strict=True)]
                pairs += [(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
                found += [
                    f"{path.name}:{node.lineno} {x.arg}=" for x, d in pairs if x.arg in own and _numbers(d)
                ]
            elif isinstance(node, ast.keyword) and node.arg in own and _numbers(node.value):
                found.append(f"{path.name}:{node.value.lineno} {node.arg}=")
    assert not found, f"a loss's value written outside the registry: {found}"
    # and the registry does write them: every numeric field of a built-in has its paper value
    for cls in registry.LOSSES.values():
        assert all(f.default is not dataclasses.MISSING for f in dataclasses.fields(cls))
