"""The train/inference consistency report: delta = log pi_train - log mu_infer per mode.

    python -m launch.consistency --config=configs/consistency.py \
        --config.out=benchmarks/results/consistency_cpu.json

Samples one batch per mode (exact, fast, bf16 sampler, bf16 head, int8 fake-quantised sampler;
for MoE also without routing replay), rescores it with the learner, prints the table and
writes the full report (slices by position, probability and expert; exact-vs-fast learner
cost) as JSON.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/consistency.py")


def run(cfg) -> dict:
    import jax
    import numpy as np

    from agentjax.diagnostics import consistency as C
    from agentjax.policy.config import ModelConfig
    from agentjax.policy.model import init_params
    from agentjax.sampling.transforms import Temperature, TopK, TopP, compose

    parts = [Temperature(cfg.temperature)] if cfg.temperature != 1.0 else []
    parts += [TopK(cfg.top_k)] if cfg.top_k else []
    parts += [TopP(cfg.top_p)] if cfg.top_p < 1.0 else []
    transform = compose(*parts) if parts else None
    models = {"dense": ModelConfig(**cfg.model, exact_tile=cfg.exact_tile)}
    if cfg.moe:
        models["moe"] = models["dense"].replace(**cfg.moe)
    rng = np.random.default_rng(cfg.seed)
    lo, hi = cfg.prompt_len
    prompts = rng.integers(0, cfg.model["vocab_size"], (cfg.batch, hi))
    lens = rng.integers(lo, hi + 1, cfg.batch)
    out = {
        "device": str(jax.devices()[0].platform),
        "jax": jax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "config": cfg.to_dict(),
        "models": {},
    }
    for name, model in models.items():
        params = init_params(model, jax.random.key(cfg.seed))
        results = [
            C.measure(
                mode,
                model,
                params,
                prompts,
                lens,
                jax.random.key(cfg.seed + 1),
                max_new_tokens=cfg.max_new_tokens,
                transform=transform,
            )
            for mode in C.standard_modes(cfg.exact_tile, moe=model.is_moe)
        ]
        entry = {"modes": results}
        print(f"\n## {name} ({out['device']}, batch {cfg.batch}, {cfg.max_new_tokens} new tokens)")
        print(C.format_table(results), flush=True)
        if cfg.timing_repeats:
            sampler = C.Sampler(model)
            st = sampler.extend(params, sampler.init(cfg.batch), prompts, lens, version=0)
            st, _ = sampler.generate(
                params, st, jax.random.key(0), max_new_tokens=cfg.max_new_tokens, version=0
            )
            cost = C.scoring_cost(params, C.learner_inputs(st), config=model, repeats=cfg.timing_repeats)
            entry["learner_cost_s"] = cost
            print(
                "learner exact/fast time: log-probs "
                f"{cost['exact_over_fast']['logprobs_s']:.2f}x, gradient "
                f"{cost['exact_over_fast']['grad_s']:.2f}x",
                flush=True,
            )
        out["models"][name] = entry
    return out


def main(argv):
    del argv
    cfg = _CONFIG.value
    if cfg.deterministic_ops and "xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true"
        ).strip()
    report = run(cfg)
    os.makedirs(os.path.dirname(cfg.out) or ".", exist_ok=True)
    with open(cfg.out, "w") as f:
        json.dump(report, f, indent=2, default=float)
    print(f"\nwrote {cfg.out}")
    broken = [
        f"{m}/{r['mode']}"
        for m, e in report["models"].items()
        for r in e["modes"]
        if r["bitwise_claimed"] and r["logp"]["all"]["frac_zero"] != 1.0
    ]
    if broken:
        print(f"consistency: bitwise contract broken for {broken}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
