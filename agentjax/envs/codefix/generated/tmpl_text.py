"""Generated-task templates: string utilities and parsing (see ``templates.py``)."""

from __future__ import annotations

import random

from agentjax.envs.codefix.generated.templates import Site, Template

_WORDS = ("alpha", "Beta", "go", "x", "Data2", "to", "RUN", "api", "v9", "hello", "ok")
_PUNCT = (" ", "  ", ", ", "-", "_", "! ", "/")


def _text(r: random.Random, max_words: int = 5) -> str:
    words = [r.choice(_WORDS) for _ in range(r.randint(0, max_words))]
    return "".join(w + r.choice(_PUNCT) for w in words).strip(" ") if words else r.choice(("", " ", "!"))


SLUG = Template(
    name="slug",
    domain="strings",
    packages=("slugs", "urlname", "textkit"),
    helpers='''def split_words(text):
    """Runs of letters and digits in text, in order."""
    words, cur = [], ""
    for ch in text:
        if ch.isalnum():
            cur += ch
        elif cur:
            words.append(cur)
            cur = ""
    if cur:
        words.append(cur)
    return words
''',
    core='''from .helpers import split_words


def slugify(text, sep=@@sep@@, min_len=1):
    """Lower-cased words of text with at least min_len characters, joined by sep."""
    words = [w.lower() for w in split_words(text) if len(w) @@len@@ min_len]
    return sep.join(words)


def word_count(text):
    """Number of words (runs of letters and digits) in text."""
    return len(split_words(text))
''',
    docs={
        "slugify": "slugify(text, sep='-', min_len=1) lower-cases the words of text (runs of "
        "letters and digits) that have at least min_len characters and joins them with sep.",
        "word_count": "word_count(text) counts the runs of letters and digits.",
    },
    args={
        "slugify": lambda r: [_text(r)] + ([] if r.random() < 0.5 else [r.choice("-_."), r.randint(1, 4)]),
        "word_count": lambda r: [_text(r)],
    },
    sites={
        "sep": Site("constant", "slugify", '"-"', ('"_"', '" "'), ('""',)),
        "len": Site("boundary", "slugify", ">=", (">",), ("==", "<=")),
    },
)

TRUNCATE = Template(
    name="truncate",
    domain="strings",
    packages=("shorten", "clipper", "strutil"),
    helpers='''def visible_len(text):
    """Length of text without trailing spaces."""
    return len(text.rstrip(" "))
''',
    core='''from .helpers import visible_len


def truncate(text, width, ellipsis=@@ell@@):
    """text if it fits in width characters, else a prefix followed by ellipsis, width long."""
@@narrow@@    if len(text) @@fits@@ width:
        return text
    keep = width @@op@@ len(ellipsis)
    return text[:keep] + ellipsis


def fits(text, width):
    """True when text without trailing spaces has at most width characters."""
    return visible_len(text) <= width
''',
    docs={
        "truncate": "truncate(text, width, ellipsis='...') returns text when len(text) <= width, "
        "else its first width - len(ellipsis) characters followed by ellipsis (text[:width] "
        "when width < len(ellipsis)).",
        "fits": "fits(text, width) is True when text without trailing spaces has at most width characters.",
    },
    args={
        "truncate": lambda r: _trunc_args(r),
        "fits": lambda r: [_text(r, 3) + r.choice(("", "  ")), r.randint(0, 12)],
    },
    sites={
        "ell": Site("constant", "truncate", '"..."', ('".."', '"--"'), ('"."',)),
        "narrow": Site(
            "missing_case",
            "truncate",
            "    if width < len(ellipsis):\n        return text[:width]\n",
            ("",),
            ("    if width < len(ellipsis):\n        return ellipsis[:width]\n",),
        ),
        "fits": Site("boundary", "truncate", "<=", ("<",), (">=",)),
        "op": Site("arithmetic", "truncate", "-", ("+",), ("//",)),
    },
)


def _trunc_args(r: random.Random) -> list:
    text = _text(r, 4)
    width = max(0, len(text) + r.choice((-4, -2, -1, 0, 0, 1, 3))) if r.random() < 0.8 else r.randint(0, 2)
    return [text, width] + ([] if r.random() < 0.6 else [r.choice(("~", ".."))])


PAIRS = Template(
    name="parse_pairs",
    domain="parsing",
    packages=("kvparse", "settings", "confkit"),
    helpers='''def to_int(value):
    """int(value) after stripping spaces; 0 for an empty value."""
    value = value.strip()
    return int(value) if value else 0
''',
    core='''from .helpers import to_int


def parse_pairs(text, sep=@@sep@@):
    """'a=1;b=2' -> {'a': 1, 'b': 2}: blank items are skipped, values are ints."""
    out = {}
    for item in text.split(sep):
        item = item.strip()
        if @@blank@@item:
            continue
        key, _, value = item.partition("=")
        out[key.strip()] = to_int(value)
    return out


def count_items(text, sep=";"):
    """Number of non-blank items of text split at sep."""
    return len([i for i in text.split(sep) if i.strip()])
''',
    docs={
        "parse_pairs": "parse_pairs(text, sep=';') parses 'a=1;b=2' into {'a': 1, 'b': 2}; blank "
        "items are skipped and an empty value is 0.",
        "count_items": "count_items(text, sep=';') counts the non-blank items.",
    },
    args={
        "parse_pairs": lambda r: _kv(r),
        "count_items": lambda r: _kv(r),
    },
    sites={
        "sep": Site("constant", "parse_pairs", '";"', ('","',), ('"&"',)),
        "blank": Site("inverted_condition", "parse_pairs", "not ", ("",), ('"=" not in ',)),
    },
)


def _kv(r: random.Random) -> list:
    sep = r.choice((";", ";", ","))
    items = [
        f"{r.choice('abcxyz')}{r.choice(('=', ' = '))}{r.randint(0, 99)}" for _ in range(r.randint(0, 4))
    ]
    if r.random() < 0.3:
        items.append(r.choice("pq"))  # a bare key: value 0
    if r.random() < 0.4:
        items.insert(r.randint(0, len(items)), r.choice(("", " ")))
    text = sep.join(items)
    return [text] if sep == ";" else [text, sep]


def _grade_args(r: random.Random) -> list:
    curve = r.choice((0, 0, 1, 2, 5, -3))
    edge = r.choice((90, 80, 70, 100, 0)) - curve + r.choice((0, 0, -1, 1))
    return [r.choice((r.randint(55, 105), edge, edge)), curve]


GRADES = Template(
    name="grades",
    domain="parsing",
    packages=("grading", "marks", "scorecard"),
    helpers='''def clamp_score(score):
    """score limited to 0..100."""
    return max(0, min(100, score))
''',
    core='''from .helpers import clamp_score


def letter(score, curve=0):
    """Grade of score + curve: 'A' from 90, 'B' from 80, 'C' from 70, else 'F'; '-' outside 0..100."""
    s = score + curve
@@range@@    if s @@top@@ 90:
        return "A"
    if s @@mid@@ @@b@@:
        return "B"
    if s >= 70:
        return "C"
    return "F"


def normalise(score):
    """score limited to 0..100."""
    return clamp_score(score)
''',
    docs={
        "letter": "letter(score, curve=0) grades s = score + curve: 'A' for 90 and above, 'B' for "
        "80 and above, 'C' for 70 and above, else 'F', and '-' when s lies outside 0..100.",
        "normalise": "normalise(score) limits score to 0..100.",
    },
    args={
        "letter": lambda r: _grade_args(r),
        "normalise": lambda r: [r.randint(-20, 130)],
    },
    sites={
        "range": Site(
            "missing_case",
            "letter",
            '    if s < 0 or s > 100:\n        return "-"\n',
            ("",),
            ('    if s < 0:\n        return "-"\n',),
        ),
        "top": Site("boundary", "letter", ">=", (">",), ("==",)),
        "mid": Site("comparison", "letter", ">=", ("<=",), ("<",)),
        "b": Site("constant", "letter", "80", ("85", "75"), ("70",)),
    },
)

TEMPLATES = (SLUG, TRUNCATE, PAIRS, GRADES)
