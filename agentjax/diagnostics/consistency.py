"""The train/inference consistency report: how far is the learner's policy from the sampler's?

For every sampled token ``y_t`` the sampler recorded ``log mu(y_t)``; the learner recomputes
``log pi(y_t)`` from the same parameters, tokens and contexts (``policy.scoring``). The report
summarises

    delta_t = log pi_train(y_t | y_<t) - log mu_infer(y_t | y_<t)

as mean |delta|, p50/p99/max |delta| and the fraction of tokens with delta exactly 0, overall
and sliced by position bucket, behaviour-probability bucket and (MoE) expert. A :class:`Mode`
names a sampler/learner pair (kernels, dtypes, fake-quantised weights, routing replay), so the
same report measures exact mode (delta == 0 bitwise), fast mode and each mismatch choice.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agentjax.policy.config import ModelConfig
from agentjax.policy.scoring import token_logprobs
from agentjax.sampling.precision import fake_quantize  # noqa: F401 - re-exported
from agentjax.sampling.sampler import Sampler, SamplerState

POSITION_BUCKETS = (0, 16, 32, 64, 128, 256, 512, 1024)
PROB_BUCKETS = (0.0, 0.01, 0.1, 0.5, 0.9, 1.0)

_token_logprobs = jax.jit(token_logprobs, static_argnames=("config", "transform"))


@dataclasses.dataclass(frozen=True)
class Mode:
    """A sampler/learner pair: config overrides for each side, sampler weight quantisation."""

    name: str
    sampler: dict = dataclasses.field(default_factory=dict)
    learner: dict = dataclasses.field(default_factory=dict)
    quantize_bits: int = 0  # > 0: symmetric per-output-channel fake quantisation of the sampler
    replay: bool = True  # MoE: the learner replays the sampler's routes
    bitwise: bool = False  # the contract claims delta == 0 for every token


def standard_modes(exact_tile: int = 8, moe: bool = False) -> list[Mode]:
    """The modes of the README table: exact, fast, and the mismatch choices on top of fast."""
    exact = {"exact_tile": exact_tile}
    fast = {"exact_tile": 0}
    modes = [
        Mode("exact f32", exact, exact, bitwise=True),
        Mode("fast f32", fast, fast),
        Mode("bf16 sampler / f32 learner", {**fast, "compute_dtype": "bfloat16"}, fast),
        Mode(
            "bf16 sampler+head / f32 learner",
            {**fast, "compute_dtype": "bfloat16", "head_dtype": "bfloat16"},
            fast,
        ),
        Mode("bf16 LM head sampler / f32 learner", {**fast, "head_dtype": "bfloat16"}, fast),
        Mode("int8 fake-quant sampler / f32 learner", fast, fast, quantize_bits=8),
    ]
    if moe:
        modes[2:2] = [
            Mode("exact f32, no replay", exact, exact, replay=False, bitwise=True),
            Mode("fast f32, no replay", fast, fast, replay=False),
        ]
    return modes


def learner_inputs(state: SamplerState) -> dict[str, Any]:
    """Host arrays the learner needs from a sampler state: tokens, positions (padding at
    ``max_seq_len``), routes, the mask of generated tokens and the behaviour record."""
    host = jax.device_get(state)
    b, l = host.tokens.shape
    j = np.arange(l)[None, :]
    positions = np.where(j < host.length[:, None], j, l).astype(np.int32)
    return {
        "tokens": host.tokens,
        "positions": positions,
        "routes": host.routes,
        "mask": host.version >= 0,
        "logp": host.logp,
        "logp_raw": host.logp_raw,
        "length": host.length,
    }


def _stats(absd: np.ndarray) -> dict[str, float]:
    if absd.size == 0:
        return {"n": 0}
    finite = absd[np.isfinite(absd)]
    out = {"n": int(absd.size), "frac_zero": float(np.mean(absd == 0)), "n_inf": int(absd.size - finite.size)}
    if finite.size:
        out.update(
            mean=float(finite.mean()),
            p50=float(np.percentile(finite, 50)),
            p99=float(np.percentile(finite, 99)),
            max=float(finite.max()),
        )
    return out


def _buckets(values, edges, fmt):
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    return idx, [fmt(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def delta_report(
    learner_logp,
    behaviour_logp,
    mask,
    *,
    routes=None,
    position_buckets=POSITION_BUCKETS,
    prob_buckets=PROB_BUCKETS,
) -> dict:
    """Statistics of ``delta = learner_logp - behaviour_logp`` over ``mask`` (all ``[B, T]``).

    Position is the token's index in its sequence; probability is ``exp(behaviour_logp)``; the
    expert of token t is the first choice at the last layer for the input that predicted it
    (``routes[b, t - 1, -1, 0]``).
    """
    mask = np.asarray(mask, bool)
    delta = np.asarray(learner_logp, np.float64) - np.asarray(behaviour_logp, np.float64)
    absd = np.abs(delta)[mask]
    report = {"all": _stats(absd), "by_position": {}, "by_prob": {}}
    pos = np.broadcast_to(np.arange(mask.shape[1])[None, :], mask.shape)[mask]
    idx, names = _buckets(pos, np.asarray(position_buckets), lambda a, b: f"[{a},{b})")
    for i, name in enumerate(names):
        if np.any(idx == i):
            report["by_position"][name] = _stats(absd[idx == i])
    prob = np.exp(np.asarray(behaviour_logp, np.float64))[mask]
    idx, names = _buckets(prob, np.asarray(prob_buckets), lambda a, b: f"[{a:g},{b:g})")
    for i, name in enumerate(names):
        if np.any(idx == i):
            report["by_prob"][name] = _stats(absd[idx == i])
    if routes is not None:
        prev = np.asarray(routes)[:, :-1, -1, 0]
        expert = np.concatenate([np.zeros_like(prev[:, :1]), prev], axis=1)[mask]
        report["by_expert"] = {f"e{e}": _stats(absd[expert == e]) for e in np.unique(expert)}
    return report


def rescore(params, inputs: dict, *, config: ModelConfig, transform=None, replay: bool = True):
    """The learner's ``(logp, logp_raw)`` for a batch from :func:`learner_inputs`."""
    routes = inputs["routes"] if (replay and config.is_moe) else None
    lp, raw = _token_logprobs(
        params,
        jnp.asarray(inputs["tokens"]),
        jnp.asarray(inputs["positions"]),
        config=config,
        transform=transform,
        routes=None if routes is None else jnp.asarray(routes),
    )
    return np.asarray(lp), np.asarray(raw)


def measure(
    mode: Mode,
    base: ModelConfig,
    params,
    prompts,
    lengths,
    rng,
    *,
    max_new_tokens: int,
    transform=None,
    stop_tokens=(),
) -> dict:
    """Samples with the mode's sampler, rescores with its learner and reports delta."""
    s_cfg, l_cfg = base.replace(**mode.sampler), base.replace(**mode.learner)
    s_params = fake_quantize(params, mode.quantize_bits) if mode.quantize_bits else params
    sampler = Sampler(s_cfg, transform=transform, stop_tokens=tuple(stop_tokens))
    state = sampler.extend(s_params, sampler.init(len(lengths)), prompts, lengths, version=0)
    state, _ = sampler.generate(s_params, state, rng, max_new_tokens=max_new_tokens, version=0)
    inputs = learner_inputs(state)
    lp, raw = rescore(params, inputs, config=l_cfg, transform=transform, replay=mode.replay)
    routes = inputs["routes"] if base.is_moe else None
    return {
        "mode": mode.name,
        "bitwise_claimed": mode.bitwise,
        "logp": delta_report(lp, inputs["logp"], inputs["mask"], routes=routes),
        "logp_raw": delta_report(raw, inputs["logp_raw"], inputs["mask"], routes=routes)["all"],
        "ratio_is_one": bool(np.all(np.exp(lp - inputs["logp"])[inputs["mask"]] == 1.0)),
    }


def _time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    t = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t) / repeats


def scoring_cost(params, inputs: dict, *, config: ModelConfig, repeats: int = 3) -> dict:
    """Seconds per learner call (log-probs, and log-probs + gradient) in exact vs fast mode."""
    tokens, positions = jnp.asarray(inputs["tokens"]), jnp.asarray(inputs["positions"])
    routes = None if inputs["routes"] is None else jnp.asarray(inputs["routes"])
    mask = jnp.asarray(inputs["mask"], jnp.float32)
    out = {}
    for name, cfg in (("fast", config.replace(exact_tile=0)), ("exact", config)):
        value = jax.jit(lambda p, c=cfg: token_logprobs(p, tokens, positions, config=c, routes=routes)[0])
        # value_and_grad, as a train step: with jax.grad alone XLA drops the exact forward
        # (this loss's cotangent does not depend on it) and times the standard path only.
        grad = jax.jit(
            jax.value_and_grad(
                lambda p, c=cfg: (
                    -jnp.sum(mask * token_logprobs(p, tokens, positions, config=c, routes=routes)[0])
                )
            )
        )
        out[name] = {
            "logprobs_s": _time(value, params, repeats=repeats),
            "grad_s": _time(grad, params, repeats=repeats),
        }
    out["exact_over_fast"] = {k: out["exact"][k] / out["fast"][k] for k in out["fast"]}
    return out


def format_table(results: list[dict]) -> str:
    """A markdown table of the overall statistics of each mode."""
    head = (
        "| mode | tokens | mean abs delta | p50 | p99 | max | frac == 0 | bitwise claimed |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in results:
        a = r["logp"]["all"]
        lines.append(
            f"| {r['mode']} | {a['n']} | {a.get('mean', 0):.3g} | {a.get('p50', 0):.3g} | "
            f"{a.get('p99', 0):.3g} | {a.get('max', 0):.3g} | {a['frac_zero']:.4f} | "
            f"{'yes' if r['bitwise_claimed'] else 'no'} |"
        )
    return "\n".join(lines)
