"""Generated-task templates: list / range utilities and arithmetic (see ``templates.py``)."""

from __future__ import annotations

import random

from agentjax.envs.codefix.generated.templates import Site, Template, ints


def _maybe(r: random.Random, hi: int) -> int | None:
    return None if r.random() < 0.2 else r.randint(-3, hi)


WINDOWS = Template(
    name="windows",
    domain="lists",
    packages=("listkit", "seqtools", "arrayx"),
    helpers='''def total(xs):
    """Sum of the items of xs."""
    s = 0
    for x in xs:
        s += x
    return s
''',
    core='''from .helpers import total


def window_sums(xs, k):
    """Sums of every run of k consecutive items, left to right."""
@@guard@@    out = []
    for i in range(len(xs) - k @@obo@@):
        out.append(total(xs[i : i @@op@@ k]))
    return out


def mean(xs):
    """Arithmetic mean of xs; 0.0 for an empty list."""
    if not xs:
        return 0.0
    return total(xs) / len(xs)
''',
    docs={
        "window_sums": "window_sums(xs, k) returns the sums of every run of k consecutive items "
        "of xs, left to right, and [] when k < 1 or k > len(xs).",
        "mean": "mean(xs) is the arithmetic mean, 0.0 for [].",
    },
    args={
        "window_sums": lambda r: [ints(r, r.randint(0, 7)), r.randint(0, 5)],
        "mean": lambda r: [ints(r, r.randint(0, 6))],
    },
    sites={
        "guard": Site(
            "missing_case",
            "window_sums",
            "    if k < 1:\n        return []\n",
            ("",),
            ("    if k < 1:\n        return [0]\n", "    if k < 0:\n        return []\n"),
        ),
        "obo": Site("off_by_one", "window_sums", "+ 1", ("", "+ 2"), ("- 1",)),
        "op": Site("arithmetic", "window_sums", "+", ("-", "*")),
    },
)

COUNT = Template(
    name="count_between",
    domain="lists",
    packages=("rangex", "bands", "tally"),
    helpers='''def above(xs, t):
    """The items of xs greater than t, in order."""
    return [x for x in xs if x > t]
''',
    core='''from .helpers import above


def count_in_range(xs, lo, hi):
    """How many items x of xs satisfy lo <= x <= hi."""
    n = @@init@@
    for x in xs:
        if x @@lo@@ lo and x @@hi@@ hi:
            n @@acc@@ 1
    return n


def count_above(xs, t):
    """How many items of xs are greater than t."""
    return len(above(xs, t))
''',
    docs={
        "count_in_range": "count_in_range(xs, lo, hi) counts the items x with lo <= x <= hi "
        "(both ends inclusive).",
        "count_above": "count_above(xs, t) counts the items greater than t.",
    },
    args={
        "count_in_range": lambda r: [ints(r, r.randint(0, 8), 0, 9), r.randint(0, 4), r.randint(4, 8)],
        "count_above": lambda r: [ints(r, r.randint(0, 6)), r.randint(-2, 6)],
    },
    sites={
        "init": Site("constant", "count_in_range", "0", ("1",), ("-1",)),
        "lo": Site("boundary", "count_in_range", ">=", (">",), ("==",)),
        "hi": Site("comparison", "count_in_range", "<=", (">=",), ("<",)),
        "acc": Site("arithmetic", "count_in_range", "+=", ("-=",), ("*=",)),
    },
)

BEST = Template(
    name="best",
    domain="lists",
    packages=("leader", "ranking", "podium"),
    helpers='''def names(pairs):
    """The names of [name, score] pairs, in order."""
    return [p[0] for p in pairs]
''',
    core='''from .helpers import names


def best(pairs):
    """Name of the highest score among [name, score] pairs; the first on ties; None for []."""
@@empty@@    if not pairs:
        return None
    name, top = pairs[0]
    for n, s in pairs[1:]:
        if s @@cmp@@ top:
            name, top = n, s
    return name


def roster(pairs):
    """The names, sorted alphabetically."""
    return sorted(names(pairs))
''',
    docs={
        "best": "best(pairs) returns the name with the highest score among [name, score] pairs, "
        "the first such name on ties, and None when no pair is left; pairs whose score is None "
        "are skipped.",
        "roster": "roster(pairs) returns the names sorted alphabetically.",
    },
    args={
        "best": lambda r: [[[r.choice("abcdefgh"), _maybe(r, 6)] for _ in range(r.randint(0, 5))]],
        "roster": lambda r: [[[r.choice("abcdefgh"), r.randint(0, 9)] for _ in range(r.randint(0, 4))]],
    },
    sites={
        "empty": Site(
            "missing_case",
            "best",
            "    pairs = [p for p in pairs if p[1] is not None]\n",
            ("",),
            ("    pairs = [p for p in pairs if p[1]]\n",),
        ),
        "cmp": Site("comparison", "best", ">", ("<",), (">=", "<=")),
    },
)

MEDIAN = Template(
    name="median",
    domain="arithmetic",
    packages=("statz", "midpoint", "numkit"),
    helpers='''def spread(xs):
    """Largest minus smallest item; 0 for []."""
    return max(xs) - min(xs) if xs else 0
''',
    core='''from .helpers import spread


def median(xs):
    """Median of the items of xs that are not None (mean of the two middle ones); None for []."""
@@empty@@    if not xs:
        return None
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2 @@parity@@ 1:
        return s[mid]
    return (s[mid @@obo@@] @@op@@ s[mid]) / 2


def span(xs):
    """Largest minus smallest item; 0 for []."""
    return spread(xs)
''',
    docs={
        "median": "median(xs) ignores None items and returns the middle item of the sorted rest "
        "(the mean of the two middle items for an even length), or None when nothing is left.",
        "span": "span(xs) is the largest minus the smallest item, 0 for [].",
    },
    args={
        "median": lambda r: [[_maybe(r, 20) for _ in range(r.randint(0, 7))]],
        "span": lambda r: [ints(r, r.randint(0, 5))],
    },
    sites={
        "empty": Site(
            "missing_case",
            "median",
            "    xs = [x for x in xs if x is not None]\n",
            ("",),
            ("    xs = [x for x in xs if x]\n",),
        ),
        "parity": Site("inverted_condition", "median", "==", ("!=",), (">",)),
        "obo": Site("off_by_one", "median", "- 1", ("+ 1", ""), ("- 2",)),
        "op": Site("arithmetic", "median", "+", ("-",), ("*",)),
    },
)

PERCENT = Template(
    name="percent",
    domain="arithmetic",
    packages=("progress", "ratios", "gauge"),
    helpers='''def ratio(part, whole):
    """part / whole, or 0.0 when whole is 0."""
    if whole == 0:
        return 0.0
    return part / whole
''',
    core='''from .helpers import ratio


def percent_done(done, total):
    """Percentage of total that is done, rounded to 1 decimal, capped at 100.0."""
    p = round(@@swap@@ * 100, 1)
    return min(p, @@cap@@)


def remaining(done, total):
    """Items still to do, never below 0."""
    return max(total - done, 0)
''',
    docs={
        "percent_done": "percent_done(done, total) is done / total as a percentage rounded to 1 "
        "decimal and capped at 100.0 (0.0 when total is 0).",
        "remaining": "remaining(done, total) is total - done, never below 0.",
    },
    args={
        "percent_done": lambda r: [r.randint(0, 12), r.randint(0, 10)],
        "remaining": lambda r: [r.randint(0, 12), r.randint(0, 10)],
    },
    sites={
        "swap": Site(
            "swapped_args",
            "percent_done",
            "ratio(done, total)",
            ("ratio(total, done)",),
            ("ratio(done, done)", "ratio(total, total)"),
        ),
        "cap": Site("constant", "percent_done", "100.0", ("99.0", "10.0"), ("1.0",)),
    },
)

TEMPLATES = (WINDOWS, COUNT, BEST, MEDIAN, PERCENT)
