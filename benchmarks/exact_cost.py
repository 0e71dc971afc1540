"""What exact mode costs: exact / fast time for the sampler and the learner, f32 and bf16.

    python benchmarks/exact_cost.py [--out benchmarks/results/exact_cost_cpu.json] [--rounds 5]

One process, one table. The model is the consistency benchmark's (``configs/consistency.py``:
Llama layout, d_model 128, 2 layers, vocab 64, random weights). Kernels compared:

* ``fast``: XLA's kernels (``exact_tile=0``);
* ``ordered``: the fixed-order float32 kernels (``policy/ordered.cc``), exact mode's default on
  CPU (listed on CPU only);
* ``exact_sum``: the exact-summation kernels (``policy/kernels.py``), the default on GPU;
* ``pallas``: the Pallas kernels (``policy/pallas_kernels.py``, ``pallas_attention.py``),
  exact mode's default on TPU and GPU (listed off the CPU only: there they are interpreted);
* ``tiled M``: the reference construction, rows in ``lax.map`` tiles of M (the tile sweep).

Rows: learner log-probs (``token_logprobs``, batch 32 x 64 tokens), learner log-probs +
gradient (``value_and_grad`` of a masked sum, as a train step), sampler decode (``generate``
of 48 tokens after a 16-token prefill, batch 32, time per token). Every case is compiled
first; the rounds then interleave the cases and the best round counts, both in wall time and
in process CPU time (all of XLA's threads; steadier than wall time on a shared, loaded machine).
The machine's load average is recorded with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from agentjax.policy.config import ModelConfig
from agentjax.policy.model import init_params
from agentjax.policy.scoring import token_logprobs
from agentjax.sampling.sampler import Sampler

MODEL = dict(
    vocab_size=64, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=512, max_seq_len=64
)
BATCH, PROMPT, NEW = 32, 16, 48


def kernels(dtype: str) -> dict[str, dict]:
    d = {"param_dtype": dtype, "compute_dtype": dtype}
    out = {"fast": {**d, "exact_tile": 0}}
    if jax.default_backend() == "cpu":  # the fixed-order kernels are CPU code
        out["ordered"] = {**d, "exact_tile": 1, "exact_kernels": "ordered"}
    out["exact_sum"] = {**d, "exact_tile": 1, "exact_kernels": "exact_sum"}
    if jax.default_backend() != "cpu":  # on CPU they run in Pallas interpret mode: not a cost
        out["pallas"] = {**d, "exact_tile": 1, "exact_kernels": "pallas"}
    if dtype == "float32":  # the tile sweep of the reference construction
        out.update({f"tiled {m}": {**d, "exact_tile": m, "exact_kernels": "tiled"} for m in (8, 32)})
    return out


def cases(cfg: ModelConfig, params, data):
    tokens, positions, mask = data
    logp = jax.jit(lambda p: token_logprobs(p, tokens, positions, config=cfg)[0])
    grad = jax.jit(
        jax.value_and_grad(lambda p: -jnp.sum(mask * token_logprobs(p, tokens, positions, config=cfg)[0]))
    )
    sampler = Sampler(cfg)
    prompts = np.asarray(tokens[:, :PROMPT])
    lens = np.full(BATCH, PROMPT)

    def decode(p):
        st = sampler.extend(p, sampler.init(BATCH), prompts, lens, version=0)
        return sampler.generate(p, st, jax.random.key(0), max_new_tokens=NEW, version=0)[0]

    return {
        "learner_logprobs_s": lambda: logp(params),
        "learner_grad_s": lambda: grad(params),
        "sampler_s_per_token": lambda: decode(params),
    }


def timed(fn) -> tuple[float, float]:
    t, c = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - t, time.process_time() - c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/exact_cost_cpu.json")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, MODEL["vocab_size"], (BATCH, MODEL["max_seq_len"])), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(MODEL["max_seq_len"], dtype=jnp.int32), tokens.shape)
    mask = jnp.ones(tokens.shape, jnp.float32)
    load0 = os.getloadavg()
    all_cases, best = {}, {}
    for dtype in ("float32", "bfloat16"):
        for name, kw in kernels(dtype).items():
            cfg = ModelConfig(**MODEL, **kw)
            params = init_params(cfg, jax.random.key(0))
            for row, fn in cases(cfg, params, (tokens, positions, mask)).items():
                key = (dtype, name, row)
                timed(fn)  # compile
                all_cases[key], best[key] = fn, (float("inf"), float("inf"))
    for _ in range(args.rounds):
        for key, fn in all_cases.items():
            best[key] = tuple(map(min, best[key], timed(fn)))
    results = {}
    for (dtype, name, row), (wall, cpu) in best.items():
        per = NEW if row == "sampler_s_per_token" else 1
        rows = results.setdefault(dtype, {}).setdefault(name, {})
        rows[row], rows[row.replace("_s", "_cpu_s", 1)] = wall / per, cpu / per
    timed_rows = (
        "learner_logprobs_s",
        "learner_grad_s",
        "sampler_s_per_token",
        "learner_logprobs_cpu_s",
        "learner_grad_cpu_s",
        "sampler_cpu_s_per_token",
    )
    for by_kernel in results.values():
        fast = dict(by_kernel["fast"])
        for rows in by_kernel.values():
            rows.update({f"{r}_over_fast": rows[r] / fast[r] for r in timed_rows})
    out = {
        "model": MODEL,
        "batch": BATCH,
        "prompt": PROMPT,
        "new_tokens": NEW,
        "rounds": args.rounds,
        "jax": jax.__version__,
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_before_after": [load0[0], os.getloadavg()[0]],
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(
        "| dtype | kernels | log-probs | x fast | + gradient | x fast | sampler / token | x fast |"
        "\n|---|---|---|---|---|---|---|---|"
    )
    for clock in ("", "_cpu"):
        names = (f"learner_logprobs{clock}_s", f"learner_grad{clock}_s", f"sampler{clock}_s_per_token")
        print(f"({'process CPU' if clock else 'wall'} time)")
        for dtype, by_kernel in results.items():
            for name, r in by_kernel.items():
                print(
                    f"| {dtype} | {name} | "
                    + " | ".join(f"{r[k] * 1e3:.2f} ms | {r[k + '_over_fast']:.2f}x" for k in names)
                    + " |"
                )
    print("load average before/after:", out["load_avg_before_after"])


if __name__ == "__main__":
    main()
