"""Rubric rewards: named per-item checks, each with evidence and a version, combined by weights.

A rubric scores *how* an episode went (process, hygiene, minimality), next to the outcome
verdict. It never replaces the verdict: :func:`attach` adds the rubric under
``evidence["rubric"]`` and leaves the verdict's reward, label and every other evidence key as they
were (PROBLEMS.md s6: keep evidence, judge version and per-item scores).

Combination (declared weights ``w_i``, item scores ``s_i`` in [0, 1]):

    score = sum_i w_i * s_i / sum_i w_i        over the items that produced a score.

An item whose check raises (a crashed judge, say) is recorded with ``score=None`` and its error as
evidence, is left out of both sums, and marks the result ``complete=False``: a broken grader must
not read as a bad agent (PROBLEMS.md s8).

**Generative-judge hook.** :func:`judge_item` turns any callable ``judge(JudgeRequest) ->
(score, evidence)`` into an item: ``collect(subject)`` gathers the evidence the judge may look at
(a patch, a log), the request carries the item's question, and the judge's own evidence and
version are recorded. Scripted checks and model judges are therefore interchangeable items.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from agentjax.envs.protocol import Verdict

Check = Callable[[Any], tuple[float, Mapping[str, Any]]]


@dataclasses.dataclass(frozen=True)
class Item:
    """One named check: ``check(subject) -> (score in [0, 1], evidence)``."""

    name: str
    weight: float
    version: str
    check: Check


@dataclasses.dataclass(frozen=True)
class Rubric:
    name: str
    version: str
    items: tuple[Item, ...]

    def __post_init__(self):
        names = [i.name for i in self.items]
        if len(set(names)) != len(names):
            raise ValueError(f"rubric item names must be unique, got {names}")
        if any(not (i.weight >= 0 and math.isfinite(i.weight)) for i in self.items):
            raise ValueError("rubric weights must be finite and >= 0")
        if not sum(i.weight for i in self.items) > 0:
            raise ValueError("rubric weights must not all be zero")


@dataclasses.dataclass(frozen=True)
class ItemScore:
    name: str
    score: float | None  # None: the check failed to produce a score
    weight: float
    version: str
    evidence: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class RubricResult:
    rubric: str
    version: str
    score: float  # the weighted mean over scored items (nan when none scored)
    complete: bool  # every item produced a score
    items: tuple[ItemScore, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric,
            "version": self.version,
            "score": self.score,
            "complete": self.complete,
            "items": {
                i.name: {"score": i.score, "weight": i.weight, "version": i.version,
                         "evidence": dict(i.evidence)}
                for i in self.items
            },
        }  # fmt: skip


def combine(scores: Sequence[ItemScore]) -> float:
    """``sum w_i s_i / sum w_i`` over items with a score (nan when there are none)."""
    scored = [s for s in scores if s.score is not None and s.weight > 0]
    total = sum(s.weight for s in scored)
    return sum(s.weight * s.score for s in scored) / total if total > 0 else float("nan")


def evaluate(rubric: Rubric, subject: Any) -> RubricResult:
    """Runs every item on ``subject`` and combines the scores by the declared weights."""
    out = []
    for item in rubric.items:
        try:
            score, evidence = item.check(subject)
            score = float(score)
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"score {score} outside [0, 1]")
        except Exception as e:  # a crashed check is recorded, never raised
            score, evidence = None, {"error": f"{type(e).__name__}: {e}"}
        out.append(ItemScore(item.name, score, item.weight, item.version, dict(evidence)))
    return RubricResult(
        rubric=rubric.name,
        version=rubric.version,
        score=combine(out),
        complete=all(s.score is not None for s in out),
        items=tuple(out),
    )


def attach(verdict: Verdict, result: RubricResult) -> Verdict:
    """A copy of ``verdict`` with the rubric beside its evidence (nothing else changes)."""
    if "rubric" in verdict.evidence:
        raise ValueError("the verdict already carries a rubric")
    return dataclasses.replace(verdict, evidence={**verdict.evidence, "rubric": result.as_dict()})


class JudgeRequest(NamedTuple):
    """What a generative judge is asked: the item, its question, and the evidence it may use."""

    item: str
    question: str
    evidence: Mapping[str, Any]


Judge = Callable[[JudgeRequest], tuple[float, Mapping[str, Any]]]


def judge_item(
    name: str,
    weight: float,
    question: str,
    judge: Judge,
    collect: Callable[[Any], Mapping[str, Any]],
    judge_version: str,
) -> Item:
    """An item scored by ``judge`` (e.g. a model) on the evidence ``collect(subject)`` gathers."""

    def check(subject: Any) -> tuple[float, Mapping[str, Any]]:
        request = JudgeRequest(name, question, dict(collect(subject)))
        score, evidence = judge(request)
        return score, {"question": question, "judge": dict(evidence), "input": request.evidence}

    return Item(name, weight, judge_version, check)
