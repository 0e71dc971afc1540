"""Bug families, task templates and the train / held-out split rule of the generated codefix tasks.

A :class:`Template` is a tiny package in one domain: ``core.py`` (functions whose source carries
``@@site@@`` markers) and ``helpers.py`` (a working helper module ``core`` imports relatively).
Each :class:`Site` belongs to one bug family and lists the reference text, the bug texts that may be
planted there, and further known-wrong alternatives. A task is one (family, template) pair plus
seeded choices (package name, which bug of the site, inputs).

**Split rule** (:func:`split_of`): for each family, its templates are ordered by
``sha256("family/template")`` and the first ``ceil(len / 3)`` are held out. The rule depends on
neither the seed nor the number of tasks, so a held-out (family, template) pair never appears in
training under any seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Callable, Mapping

FAMILIES = (
    "off_by_one",
    "comparison",
    "boundary",
    "swapped_args",
    "missing_case",
    "arithmetic",
    "constant",
    "inverted_condition",
)
SPLITS = ("train", "heldout")
HELDOUT_FRACTION = 1 / 3

Args = Callable[[random.Random], list]


@dataclasses.dataclass(frozen=True)
class Site:
    family: str
    fn: str  # the function whose body holds the site (the task's buggy function)
    ref: str
    bugs: tuple[str, ...]  # planted bugs (one is drawn per task)
    others: tuple[str, ...] = ()  # further known-wrong fixes (the undrawn bugs are wrong fixes too)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"Site.family={self.family!r} is invalid; allowed values: {FAMILIES}")
        if self.ref in self.bugs or self.ref in self.others or not self.bugs:
            raise ValueError(f"Site {self.fn}: ref must differ from every bug and alternative")


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    domain: str
    packages: tuple[str, ...]  # package names (one drawn per task)
    core: str  # core.py with @@site@@ markers; imports helpers relatively
    helpers: str
    docs: Mapping[str, str]  # exported function -> its specification (first = description)
    args: Mapping[str, Args]  # exported function -> a seeded input generator
    sites: Mapping[str, Site]

    def __post_init__(self):
        for key, site in self.sites.items():
            if f"@@{key}@@" not in self.core:
                raise ValueError(f"template {self.name}: marker @@{key}@@ missing from core")
            if site.fn not in self.args or site.fn not in self.docs:
                raise ValueError(f"template {self.name}: site {key} names unknown function {site.fn}")

    def core_with(self, choice: Mapping[str, str]) -> str:
        """core.py with every site at its reference text except those in ``choice``."""
        text = self.core
        for key, site in self.sites.items():
            text = text.replace(f"@@{key}@@", choice.get(key, site.ref))
        return text


def pairs(templates: Mapping[str, Template]) -> list[tuple[str, str, str]]:
    """Every (family, template, site key), sorted."""
    return sorted((s.family, t.name, k) for t in templates.values() for k, s in t.sites.items())


def _rank(family: str, template: str) -> str:
    return hashlib.sha256(f"{family}/{template}".encode()).hexdigest()


def split_of(templates: Mapping[str, Template]) -> dict[tuple[str, str], str]:
    """(family, template) -> 'train' | 'heldout', by the rule in the module docstring."""
    by_family: dict[str, set[str]] = {}
    for fam, tmpl, _ in pairs(templates):
        by_family.setdefault(fam, set()).add(tmpl)
    out = {}
    for fam, names in by_family.items():
        ordered = sorted(names, key=lambda n: _rank(fam, n))
        k = math.ceil(len(ordered) * HELDOUT_FRACTION)
        out.update({(fam, n): ("heldout" if i < k else "train") for i, n in enumerate(ordered)})
    return out


def ints(rng: random.Random, n: int, lo: int = -5, hi: int = 12) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]
