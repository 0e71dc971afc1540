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

from agentjax.envs.audit import audit_metrics, hack_rate, wilson_interval
from agentjax.envs.protocol import Label
from agentjax.policy.codec import Codec
from agentjax.sampling.rollout import Caps, EpisodeSpec, Rollout
from agentjax.sampling.sampler import Sampler


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
) -> dict[str, float]:
    """Success rate (label ``pass``) of ``params`` on ``tasks`` with its Wilson 95% interval."""
    envs = [make_env() for _ in tasks]
    specs = [
        EpisodeSpec(e, t, seed + i, str(getattr(t, "task_id", i)), str(getattr(t, "task_class", "default")))
        for i, (e, t) in enumerate(zip(envs, tasks, strict=True))
    ]
    ro = Rollout(sampler, codec, caps, specs)
    ro.start(params, version)
    ro.advance(params, version, jax.random.key(seed))
    trajs = [r.result for r in ro.rows]
    verdicts = [r.final.verdict if r.final is not None and r.final.done else None for r in ro.rows]
    passed = sum(t.label == Label.PASS.value for t in trajs)
    lo, hi = wilson_interval(passed, len(trajs))
    out = {
        "eval/success": passed / max(len(trajs), 1),
        "eval/success_lo": lo,
        "eval/success_hi": hi,
        "eval/n": float(len(trajs)),
        "eval/mean_turns": sum(len(t.turns) for t in trajs) / max(len(trajs), 1),
    }
    for label, n in Counter(t.label for t in trajs).items():
        out[f"eval/label/{label}"] = n / len(trajs)
    for reason, n in Counter(t.stop_reason.value for t in trajs).items():
        out[f"eval/stop/{reason}"] = n / len(trajs)
    judged = [(v, e, t) for v, e, t in zip(verdicts, envs, tasks, strict=True) if v is not None]
    if audit_fn is not None and judged:
        audits = [audit_fn(t, e) for _, e, t in judged]
        out.update({"eval/" + k: v for k, v in audit_metrics([v for v, _, _ in judged], audits).items()})
    if planted is not None and judged:
        out.update(
            {
                "eval/" + k: v
                for k, v in hack_rate([v for v, _, _ in judged], [planted(t) for _, _, t in judged]).items()
            }
        )
    return out
