"""The mutation catalogue stays applicable: every patch's text occurs exactly once in its file,
changes it, and names loop tests that exist (runs in the suite; the mutations themselves run with
``python -m tests.mutations.run``)."""

import ast
import os

import pytest

from tests.mutations.catalogue import MUTATIONS
from tests.runs import ROOT


def test_names_are_unique():
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_once_and_names_existing_tests(m):
    text = open(os.path.join(ROOT, m.path)).read()
    assert text.count(m.find) == 1, f"{m.name}: {m.path} holds its find text {text.count(m.find)} times"
    assert m.find != m.replace and m.tests
    for node in m.tests:
        path, _, rest = node.partition("::")
        func = rest.split("[")[0]
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        assert func in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, node
