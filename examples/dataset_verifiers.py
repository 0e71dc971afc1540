"""Verifiers for the built-in dataset task (``task.name=dataset``, ``agentjax/tasks/dataset.py``):
``verifier(record, reply) -> reward``, named by ``task.kwargs.verifier=examples.dataset_verifiers:...``."""

from __future__ import annotations

import itertools
import json


def first_word(record: dict, reply: str) -> float:
    """1 when the reply's first word is the record's ``answer``, else 0."""
    return float(reply.split()[:1] == [str(record["answer"])])


def pick_rows(words=("red", "green", "blue", "amber", "teal", "plum")) -> list[dict]:
    """A tiny string-transform dataset: ``first a b`` -> ``a``, ``second a b`` -> ``b``, every
    ordered pair of distinct words, shuffled by a fixed permutation."""
    rows = [
        {"prompt": f"{which} {a} {b}", "answer": a if which == "first" else b}
        for a, b in itertools.permutations(words, 2)
        for which in ("first", "second")
    ]
    return [rows[(i * 37) % len(rows)] for i in range(len(rows))]  # 37 is coprime with 60


def write_pick_dataset(path, words=("red", "green", "blue", "amber", "teal", "plum")) -> int:
    """:func:`pick_rows` as a JSONL file; returns the line count."""
    rows = pick_rows(words)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)


class PickSource:
    """:func:`pick_rows` as a grain ``RandomAccessDataSource`` of JSON bytes (what an ArrayRecord
    file holds): ``task.kwargs.source=examples.dataset_verifiers:PickSource``."""

    def __init__(self):
        self._rows = [json.dumps(r).encode() for r in pick_rows()]

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> bytes:
        return self._rows[i]

    def __repr__(self) -> str:
        return f"PickSource(size={len(self)})"


COLOURS = {
    "apple": "red",
    "grass": "green",
    "sky": "blue",
    "plum": "purple",
    "snow": "white",
    "coal": "black",
    "lemon": "yellow",
    "carrot": "orange",
}


def lookup(key: str) -> str:
    """The colour of a thing (one word)."""
    if key not in COLOURS:
        raise ValueError(f"no colour for {key!r}; known: {sorted(COLOURS)}")
    return COLOURS[key]


def table_tool(record: dict, name: str, arguments: dict) -> str:
    """The handler of tool schemas (``task.kwargs.tools``): looks ``key`` up in the record's
    own ``table``."""
    table = record["table"]
    if arguments.get("key") not in table:
        raise ValueError(f"no entry {arguments.get('key')!r}")
    return table[arguments["key"]]


def write_lookup_dataset(path, repeats: int = 4) -> int:
    """A tool-use dataset: ``colour of <thing>`` is answered by calling ``lookup <thing>`` and
    repeating its result; the warm start imitates the call (``calls``) and the answer."""
    rows = [
        {
            "prompt": f"colour of {thing}",
            "tools": ["examples.dataset_verifiers:lookup"],
            "calls": [f"lookup {thing}"],
            "answer": colour,
        }
        for _ in range(repeats)
        for thing, colour in COLOURS.items()
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)
