"""Context management ``f_ctx``: what the model is given as input at each turn.

A context policy maps the episode's segments so far to the token ids of the next model input:

    f_ctx(segments) -> list[int]        segments: [(kind, token_ids)], kind in prompt|action|observation

``keep_all`` is the identity (the context grows by action + observation each turn). Anything else
rewrites the context; the rollout then re-prefills it, and the trajectory stores each turn's
actual input so the learner trains every action on exactly what the model saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentjax.choice import Choice

Segment = tuple[str, Sequence[int]]
ContextPolicy = Callable[[list[Segment]], list[int]]


def keep_all(segments: list[Segment]) -> list[int]:
    return [t for _, toks in segments for t in toks]


def drop_oldest_observations(keep_last: int) -> ContextPolicy:
    """Drops the tokens of all but the last ``keep_last`` observations (prompt and actions stay)."""
    if keep_last < 0:
        raise ValueError(f"context.keep_last={keep_last} is invalid; must be >= 0")

    def f(segments: list[Segment]) -> list[int]:
        obs = [i for i, (k, _) in enumerate(segments) if k == "observation"]
        dropped = set(obs[: max(len(obs) - keep_last, 0)])
        return [t for i, (_, toks) in enumerate(segments) if i not in dropped for t in toks]

    return f


def truncate_observations(max_tokens: int) -> ContextPolicy:
    """Keeps only the first ``max_tokens`` tokens of every observation."""
    if max_tokens < 1:
        raise ValueError(f"context.max_obs_tokens={max_tokens} is invalid; must be >= 1")

    def f(segments: list[Segment]) -> list[int]:
        out: list[int] = []
        for kind, toks in segments:
            out.extend(toks[:max_tokens] if kind == "observation" else toks)
        return out

    return f


class ContextKind(Choice):
    """The config's name of a context policy (``context.policy``)."""

    KEEP_ALL = "keep_all"
    DROP_OLDEST_OBSERVATIONS = "drop_oldest_observations"  # arg: observations kept
    TRUNCATE_OBSERVATIONS = "truncate_observations"  # arg: tokens kept per observation


def make_context_policy(name: ContextKind | str, arg: int = 0) -> ContextPolicy:
    """By config name: ``keep_all``, ``drop_oldest_observations`` (arg = keep_last) or
    ``truncate_observations`` (arg = max tokens)."""
    name = ContextKind.parse("context.policy", name)
    if name == ContextKind.KEEP_ALL:
        return keep_all
    if name == ContextKind.DROP_OLDEST_OBSERVATIONS:
        return drop_oldest_observations(arg)
    return truncate_observations(arg)
