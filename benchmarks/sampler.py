"""Sampler throughput: agentjax vs google-tunix's vanilla sampler vs transformers ``generate``.

Run in the anchors venv (``bash benchmarks/setup_anchors.sh``)::

    .venv-anchors/bin/python benchmarks/sampler.py [--out benchmarks/results/sampler_cpu.json]

Every engine runs the same Llama-layout decoder (RMSNorm, RoPE, SwiGLU, GQA, tied embeddings),
random weights, prompts of 16 tokens, pure sampling at temperature 1 with no stop token, and
generates exactly ``new`` tokens per row; time includes the prefill. After one warm-up
(compilation) run each, the engines of a case run in ``repeats`` interleaved rounds and each
reports its best time: the least noisy statistic on a shared machine, and a change of load hits
all engines alike. The load average is recorded. agentjax is measured in fast mode
(``exact_tile=0``) and exact mode (``exact_tile=8``); the ratios use fast mode, and
``exact/fast`` is the cost of the consistency contract on the sampler side.

Equal threads: ``--threads N`` (default: every core this process may use) pins the process to N
cores before jax or torch loads, so XLA's thread pool (which sizes itself from the affinity mask)
and torch (``set_num_threads(N)``) compute on the same N cores; both are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def _pin_threads() -> int:
    """Pins this process to ``--threads`` cores (default: all it may use) before jax/torch load."""
    cores = sorted(os.sched_getaffinity(0))
    n = len(cores)
    for i, a in enumerate(sys.argv):
        if a.startswith("--threads="):
            n = int(a.split("=", 1)[1])
        elif a == "--threads" and i + 1 < len(sys.argv):
            n = int(sys.argv[i + 1])
    os.sched_setaffinity(0, cores[: max(1, min(n, len(cores)))])
    return len(os.sched_getaffinity(0))


THREADS = _pin_threads()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from tunix_anchor import IntTokenizer, llama3_config, one_device_mesh  # noqa: E402 (the script's folder)

from agentjax.policy.config import ModelConfig  # noqa: E402
from agentjax.policy.model import init_params  # noqa: E402
from agentjax.sampling.sampler import Sampler  # noqa: E402

PROMPT = 16
CASES = {  # name: (model, batch, new tokens)
    "tiny_b32": (
        dict(d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=512, vocab_size=64),
        32,
        64,
    ),
    "tiny_b1": (
        dict(d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=512, vocab_size=64),
        1,
        64,
    ),
    "small_b32": (
        dict(d_model=512, n_layers=4, n_heads=8, n_kv_heads=8, head_dim=64, d_ff=2048, vocab_size=4096),
        32,
        128,
    ),
}


EXACT_CASES = ("tiny_b32", "tiny_b1")  # exact mode is measured where the contract is tested


def _best(fn, repeats):
    fn()  # warm-up / compile
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def interleaved(runners: dict, repeats: int) -> dict:
    """Best time of each runner over ``repeats`` rounds; each round runs every runner once, so
    a change of machine load hits all engines alike."""
    best = {k: float("inf") for k in runners}
    for _ in range(repeats):
        for k, fn in runners.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def bench_agentjax(m, batch, new, exact_tile):
    cfg = ModelConfig(**m, max_seq_len=PROMPT + new, exact_tile=exact_tile)
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg)
    prompts = np.random.default_rng(0).integers(0, m["vocab_size"], (batch, PROMPT))
    lens = np.full((batch,), PROMPT)

    def run():
        st = sampler.extend(params, sampler.init(batch), prompts, lens, version=0)
        st, _ = sampler.generate(params, st, jax.random.key(1), max_new_tokens=new, version=0)
        assert int(st.length.min()) == PROMPT + new
        jax.block_until_ready(st.tokens)

    run()  # compile
    return run


def bench_tunix(m, batch, new):
    from flax import nnx
    from tunix.generate import sampler as tsampler
    from tunix.models.llama3 import model as tl

    cfg = llama3_config(m)
    mesh = one_device_mesh()
    with jax.set_mesh(mesh):
        model = tl.Llama3(cfg, rngs=nnx.Rngs(0))
        s = tsampler.Sampler(
            model,
            IntTokenizer(),
            tsampler.CacheConfig(
                cache_size=PROMPT + new,
                num_layers=m["n_layers"],
                num_kv_heads=m["n_kv_heads"],
                head_dim=m["head_dim"],
            ),
        )
        rng = np.random.default_rng(0)
        prompts = [" ".join(map(str, rng.integers(1, m["vocab_size"], PROMPT))) for _ in range(batch)]

        def run():
            out = s(
                prompts,
                max_generation_steps=new,
                max_prompt_length=PROMPT,
                eos_tokens=[m["vocab_size"]],
                temperature=1.0,
                top_p=1.0,
                seed=1,
            )
            assert all(len(t) == new for t in out.tokens), [len(t) for t in out.tokens]

        run()  # compile

    def in_mesh():
        with jax.set_mesh(mesh):
            run()

    return in_mesh


def bench_transformers(m, batch, new):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(THREADS)  # the cores XLA computes on (see _pin_threads)
    cfg = LlamaConfig(
        vocab_size=m["vocab_size"],
        hidden_size=m["d_model"],
        intermediate_size=m["d_ff"],
        num_hidden_layers=m["n_layers"],
        num_attention_heads=m["n_heads"],
        num_key_value_heads=m["n_kv_heads"],
        head_dim=m["head_dim"],
        max_position_embeddings=PROMPT + new,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(1, m["vocab_size"], (batch, PROMPT))
    mask = torch.ones_like(ids)

    def run():
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                max_new_tokens=new,
                min_new_tokens=new,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=0,
            )
        assert out.shape == (batch, PROMPT + new)

    run()  # warm-up
    return run


def matmul_flops(n=1024, repeats=10):
    """The machine's float32 matmul FLOP/s through XLA (best of ``repeats``)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    t = _best(lambda: jax.block_until_ready(f(a)), repeats)
    return 2 * n**3 / t


def flops_per_token(m, ctx):
    """2 x matmul parameters (projections, MLP, LM head) + attention over ``ctx`` keys."""
    d, h, kv, hd, f = m["d_model"], m["n_heads"], m["n_kv_heads"], m["head_dim"], m["d_ff"]
    per_layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f
    attn = 2 * h * hd * ctx
    return m["n_layers"] * (2 * per_layer + 2 * attn) + 2 * d * m["vocab_size"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/sampler_cpu.json")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--engines", default="agentjax,agentjax_exact,tunix,transformers")
    ap.add_argument("--threads", type=int, default=THREADS, help="cores for every engine (read at import)")
    args = ap.parse_args()
    engines = args.engines.split(",")
    peak = matmul_flops()
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "jax": jax.__version__,
            "matmul_flops": peak,
            "threads": THREADS,  # torch.set_num_threads and the affinity XLA sizes its pool from
            "affinity": sorted(os.sched_getaffinity(0)),
            "repeats": args.repeats,
            "loadavg_start": os.getloadavg(),
        },
        "cases": {},
    }
    for name in args.cases.split(","):
        m, batch, new = CASES[name]
        row = {"batch": batch, "new_tokens": new, "prompt": PROMPT, "model": m}
        makers = {
            "agentjax": lambda *a: bench_agentjax(*a, exact_tile=0),
            "agentjax_exact": lambda *a: bench_agentjax(*a, exact_tile=8),
            "tunix": bench_tunix,
            "transformers": bench_transformers,
        }
        runners = {}
        for eng in engines:
            if eng == "agentjax_exact" and name not in EXACT_CASES:
                continue
            try:
                runners[eng] = makers[eng](m, batch, new)
            except Exception as e:  # an anchor that cannot run is reported, not fatal
                row[eng] = {"error": f"{type(e).__name__}: {e}"[:300]}
                print(name, eng, row[eng], flush=True)
        for eng, t in interleaved(runners, args.repeats).items():
            row[eng] = {"tok_s": batch * new / t}
            print(name, eng, row[eng], flush=True)
        ours = row.get("agentjax", {}).get("tok_s")
        if ours:
            for eng in ("agentjax_exact", "tunix", "transformers"):
                if "tok_s" in row.get(eng, {}):
                    row[f"agentjax_over_{eng}"] = ours / row[eng]["tok_s"]
            row["flop_fraction"] = ours * flops_per_token(m, PROMPT + new // 2) / peak
        results["cases"][name] = row
    results["machine"]["loadavg_end"] = os.getloadavg()
    print(format_table(results))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)


def format_table(results):
    lines = [
        "| case | agentjax tok/s | exact tok/s | tunix tok/s | transformers tok/s | "
        "x tunix | x transformers | exact/fast | FLOP fraction |",
        "|---" * 9 + "|",
    ]
    g = lambda r, k: r.get(k, {}).get("tok_s", float("nan"))
    for name, r in results["cases"].items():
        lines.append(
            f"| {name} | {g(r, 'agentjax'):.0f} | {g(r, 'agentjax_exact'):.0f} | "
            f"{g(r, 'tunix'):.0f} | {g(r, 'transformers'):.0f} | "
            f"{r.get('agentjax_over_tunix', float('nan')):.2f} | "
            f"{r.get('agentjax_over_transformers', float('nan')):.2f} | "
            f"{1 / r.get('agentjax_over_agentjax_exact', float('nan')):.2f} | "
            f"{r.get('flop_fraction', float('nan')):.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
