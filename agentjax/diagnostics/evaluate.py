"""Held-out evaluation: greedy success with a confidence interval, verdict labels, hack rate, H.

Runs one batched greedy rollout over the given tasks. Environments that expose an audit (minirepo:
``verifier.audit`` on the final submission) are judged a second time by the independent audit,
which gives ``H = P(audit fails | training verifier passes)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import jax

from agentjax.diagnostics import episodes as sample_episodes
from agentjax.envs.audit import audit_metrics, hack_rate, undefined_metrics, wilson_interval
from agentjax.envs.protocol import Label
from agentjax.policy.codec import Codec
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.queue import Caps
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler
from agentjax.trajectory import meta_of


def evaluate(
    sampler: Sampler,
    codec: Codec,
    caps: Caps,
    params,
    version: int,
    tasks: Sequence[Any],
    make_env: Callable[[], Any],
    *,
    audit_fn: Callable | None = None,
    planted: Callable[[Any], bool] | None = None,
    seed: int = 0,
    exchange=None,
) -> dict[str, Any]:
    """Success rate (label ``pass``) of ``params`` on ``tasks`` with its Wilson 95% interval, and
    the other ``eval/*`` figures (floats), and ``eval/samples``: a few of the episodes rendered as
    text with their verdicts (:func:`agentjax.diagnostics.episodes.samples`).

    ``exchange`` (a :class:`~agentjax.sharding.exchange.Exchange`, several processes): each
    process runs its share of the tasks and every process gets every episode's result; task ``i``
    samples from seed ``seed + i`` wherever it runs, so the metrics equal one process's."""

    def run(idx: list[int]) -> list[tuple]:
        return _episodes(sampler, codec, caps, params, version, tasks, idx, make_env, audit_fn, planted, seed)

    idx = list(range(len(tasks)))
    if exchange is None:
        played = run(idx)
        return {
            **_metrics(played),
            sample_episodes.KEY: sample_episodes.samples([t for t, *_ in played], codec),
        }
    held: dict[int, Any] = {}  # this process's episodes, whole (by task index)

    def run_share(share: list[int]) -> list[tuple]:
        got = run(share)
        held.update((i, t) for i, (t, *_) in zip(share, got, strict=True))
        return [(meta_of(t), *rest) for t, *rest in got]

    played = exchange.split(idx, run_share)  # only each episode's metadata crosses processes
    chosen = sample_episodes.pick([t for t, *_ in played])
    shown: dict[int, dict] = {}
    for part in exchange.allgather({i: sample_episodes.sample(held[i], codec) for i in chosen if i in held}):
        shown.update(part)  # the rendered episodes, from the processes that hold them
    return {**_metrics(played), sample_episodes.KEY: [shown[i] for i in chosen]}


def _episodes(sampler, codec, caps, params, version, tasks, idx, make_env, audit_fn, planted, seed):
    """(trajectory, verdict or None, audit or None, planted or None) per task in ``idx``."""
    envs = [make_env() for _ in idx]
    specs = [
        EpisodeSpec(
            e,
            tasks[i],
            seed + i,
            str(getattr(tasks[i], "task_id", i)),
            str(getattr(tasks[i], "task_class", "default")),
        )
        for i, e in zip(idx, envs, strict=True)
    ]
    ro = Rollout(sampler, codec, caps, specs)
    ro.start(params, version)
    ro.advance(params, version, jax.random.key(seed))
    out = []
    for i, e, r in zip(idx, envs, ro.rows, strict=True):
        v = r.final.verdict if r.final is not None and r.final.done else None
        judged = v is not None
        out.append(
            (
                r.result,
                v,
                audit_fn(tasks[i], e) if judged and audit_fn is not None else None,
                planted(tasks[i]) if judged and planted is not None else None,
            )
        )
    return out


__all__ = ["evaluate", "undefined_metrics"]  # undefined_metrics: the summary's reasons (runsummary)


def _metrics(episodes: list[tuple]) -> dict[str, float]:
    trajs = [t for t, _, _, _ in episodes]
    passed = sum(t.label == Label.PASS.value for t in trajs)
    lo, hi = wilson_interval(passed, len(trajs))
    out = {
        "eval/success": passed / max(len(trajs), 1),
        "eval/success_lo": lo,
        "eval/success_hi": hi,
        "eval/n": float(len(trajs)),
        "eval/mean_turns": sum(t.num_turns for t in trajs) / max(len(trajs), 1),
    }
    for label, n in Counter(t.label for t in trajs).items():
        out[f"eval/label/{label}"] = n / len(trajs)
    for reason, n in Counter(t.stop_reason.value for t in trajs).items():
        out[f"eval/stop/{reason}"] = n / len(trajs)
    judged = [(v, a, p) for _, v, a, p in episodes if v is not None]
    if judged and judged[0][1] is not None:
        out.update(
            {
                "eval/" + k: v
                for k, v in audit_metrics([v for v, _, _ in judged], [a for _, a, _ in judged]).items()
            }
        )
    if judged and judged[0][2] is not None:
        out.update(
            {
                "eval/" + k: v
                for k, v in hack_rate([v for v, _, _ in judged], [p for _, _, p in judged]).items()
            }
        )
    return out
