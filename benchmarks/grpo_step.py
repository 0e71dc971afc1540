"""One GRPO iteration (sample a group, score, update): agentjax vs google-tunix's GRPO learner.

Run in the anchors venv (``bash benchmarks/setup_anchors.sh``)::

    .venv-anchors/bin/python benchmarks/grpo_step.py [--repeats 8] [--out benchmarks/results/grpo_step.json]

Both sides train the same Llama-layout decoder (d_model 128, 2 layers, 4 heads / 2 KV heads of 32,
SwiGLU d_ff 512, vocab 64, tied embeddings, float32, random weights) on one CPU device with the
same work per iteration: 8 prompts of 16 tokens x 4 generations = 32 rows, 64 new tokens each
(temperature 1, no stop token), the same deterministic reward (fraction of even token ids in the
completion), group-relative advantages ``(R - mean_g) / (std_g + eps)``, optionally reference
log-probs from a frozen copy of the initial weights with a k3 KL term (beta 0.04), and one AdamW
step (lr 1e-3, no clipping) on the PPO-clip GRPO loss (eps 0.2, sequence-mean-token-mean).

tunix runs its own ``GRPOLearner.train`` loop (vanilla rollout engine, actor and rollout sharing
the model). The runs are interleaved: tunix pulls each batch from a generator, and the generator
first waits for tunix's previous update to finish, then runs one timed agentjax iteration of
each mode, then hands tunix its batch. A tunix iteration is the wall time from handing over one
batch to the next pull (rollout, rewards, reference, update, bookkeeping); its
``actor_train_step_time`` metric times only the launch of the step, so it is not used. The
breakdown wraps tunix's ``generate``, ``get_ref_per_token_logps`` and ``update_actor`` and waits
on their results. Warm-up iterations (compilation) are dropped; the median over ``--repeats``
iterations is reported, with the load average (the machine is shared), and the ratio
``tunix / agentjax`` both as a ratio of medians (the PASS/FAIL figure, target >= 1.5) and as the
median of per-round ratios.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agentjax.learner.objective import LossConfig
from agentjax.learner.step import OptimConfig, init_train_state, make_optimizer, make_train_step
from agentjax.objectives import group_advantages
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import init_params
from agentjax.policy.scoring import token_logprobs
from agentjax.sampling.sampler import Sampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tunix_anchor import IntTokenizer, llama3_config, one_device_mesh  # noqa: E402  (shared with sampler.py)

MODEL = dict(d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=512, vocab_size=64)
PROMPTS, GROUP, PROMPT_LEN, NEW = 8, 4, 16, 64
BETA, EPS, LR = 0.04, 0.2, 1e-3
TARGET = 1.5  # agentjax must be >= 1.5x faster than tunix
PHASES = ("rollout", "reference", "update")


def prompt_tokens() -> np.ndarray:
    """The 8 prompts, ids 1..63 (0 is tunix's pad id)."""
    return np.random.default_rng(0).integers(1, MODEL["vocab_size"], (PROMPTS, PROMPT_LEN))


def reward_of_tokens(completion: np.ndarray) -> float:
    """Fraction of even token ids: the reward on both sides."""
    return float(np.mean(completion % 2 == 0)) if completion.size else 0.0


# ---------------------------------------------------------------------------------------------
# agentjax


class AgentjaxGRPO:
    """One GRPO iteration with agentjax's sampler, scorer and train step; each phase timed."""

    def __init__(self, exact_tile: int, beta: float, fused_reference: bool = True):
        # layer_unroll: the learner's layer scan fully unrolled, as tunix's Python layer loop is.
        self.cfg = ModelConfig(
            **MODEL, max_seq_len=PROMPT_LEN + NEW, exact_tile=exact_tile, layer_unroll=MODEL["n_layers"]
        )
        params = init_params(self.cfg, jax.random.key(0))
        # A frozen copy of the initial weights (the train step donates the live ones).
        self.ref_params = jax.tree.map(jnp.copy, params)
        self.beta = beta
        # As agentjax's trainer runs it: the reference log-probs inside the train-step jit
        # (train_step(state, batch, ref_params)); False = a separate jitted pass, timed apart.
        self.fused_reference = fused_reference
        self.sampler = Sampler(self.cfg)
        tx = make_optimizer(OptimConfig(learning_rate=LR, b2=0.999, grad_clip=0.0))
        loss = LossConfig(
            name="grpo",
            grpo=dict(clip_low=EPS, clip_high=EPS, aggregation="seq_mean_token_mean"),
            kl_coef=beta,
            kl_kind="k3",
            filter="none",
        )
        self.train_step = make_train_step(self.cfg, loss, tx, donate=True)
        self.state = init_train_state(params, tx, seed=0)
        self.empty = self.sampler.init(PROMPTS * GROUP)
        self.prompts = jnp.asarray(np.repeat(prompt_tokens(), GROUP, axis=0), jnp.int32)
        self.lens = jnp.full((PROMPTS * GROUP,), PROMPT_LEN, jnp.int32)
        self.positions = jnp.broadcast_to(
            jnp.arange(PROMPT_LEN + NEW, dtype=jnp.int32), (PROMPTS * GROUP, PROMPT_LEN + NEW)
        )
        self.ref_logp = jax.jit(functools.partial(token_logprobs, config=self.cfg))
        self.version = 0

    @staticmethod
    @jax.jit
    def _make_batch(tokens, logp):
        """Rewards (fraction of even completion ids), group advantages, masks: one jitted call."""
        gen = tokens[:, PROMPT_LEN:]
        rewards = jnp.mean((gen % 2 == 0).astype(jnp.float32), axis=1)
        adv = group_advantages(rewards.reshape(PROMPTS, GROUP)).reshape(-1)
        mask = (jnp.arange(tokens.shape[1]) >= PROMPT_LEN).astype(jnp.float32)
        return {
            "tokens": tokens,
            "loss_mask": jnp.broadcast_to(mask, tokens.shape),
            "behav_logp": logp,
            "advantages": adv,
            "weight": jnp.ones((tokens.shape[0],), jnp.float32),
        }

    def iteration(self) -> dict[str, float]:
        t0 = time.perf_counter()
        params, v = self.state.params, self.version
        st = self.sampler.extend(params, self.empty, self.prompts, self.lens, version=v)
        st, _ = self.sampler.generate(params, st, jax.random.key(v + 1), max_new_tokens=NEW, version=v)
        batch = self._make_batch(st.tokens, st.logp)
        batch["positions"] = self.positions
        jax.block_until_ready(batch)
        t1 = time.perf_counter()
        if self.beta and not self.fused_reference:
            batch["ref_logp"] = jax.block_until_ready(
                self.ref_logp(self.ref_params, batch["tokens"], self.positions)[0]
            )
        t2 = time.perf_counter()
        ref = (self.ref_params,) if self.beta and self.fused_reference else ()
        self.state, metrics = self.train_step(self.state, batch, *ref)
        jax.block_until_ready((self.state.params, metrics))
        t3 = time.perf_counter()
        self.version += 1
        out = {"total": t3 - t0, "rollout": t1 - t0, "update": t3 - t2}
        return out | ({"reference": t2 - t1} if self.beta and not self.fused_reference else {})


# ---------------------------------------------------------------------------------------------
# tunix


def tunix_reward(prompts, completions, **_):
    return [reward_of_tokens(np.array([int(t) for t in c.split()], np.int64)) for c in completions]


class TunixGRPO:
    """tunix's ``GRPOLearner`` on the same model and work, with phase timers around its cluster."""

    def __init__(self, beta: float):
        from flax import nnx
        from tunix.models.llama3 import model as tl
        from tunix.rl import rl_cluster as rlc
        from tunix.rl.grpo import grpo_learner as gl
        from tunix.rl.rollout import base_rollout

        self.nnx = nnx
        m = MODEL
        cfg = llama3_config(m)
        self.mesh = one_device_mesh()
        with jax.set_mesh(self.mesh):
            self.actor = tl.Llama3(cfg, rngs=nnx.Rngs(0))
            ref = tl.Llama3(cfg, rngs=nnx.Rngs(0)) if beta else None
            r2m = {rlc.Role.ACTOR: self.mesh, rlc.Role.REFERENCE: self.mesh, rlc.Role.ROLLOUT: self.mesh}
            self.cc = rlc.ClusterConfig(
                role_to_mesh=r2m,
                rollout_engine="vanilla",
                offload_to_cpu=False,
                training_config=rlc.RLTrainingConfig(
                    actor_optimizer=optax.adamw(LR), eval_every_n_steps=10**9, max_steps=1
                ),
                rollout_config=base_rollout.RolloutConfig(
                    max_tokens_to_generate=NEW,
                    max_prompt_length=PROMPT_LEN,
                    kv_cache_size=PROMPT_LEN + NEW,
                    temperature=1.0,
                    top_p=1.0,
                    top_k=None,
                    eos_tokens=[m["vocab_size"]],
                ),
            )
            self.cluster = rlc.RLCluster(
                actor=self.actor, reference=ref, tokenizer=IntTokenizer(), cluster_config=self.cc
            )
            self.learner = gl.GRPOLearner(
                rl_cluster=self.cluster,
                algo_config=gl.GRPOConfig(
                    num_generations=GROUP, num_iterations=1, beta=beta, epsilon=EPS, kl_loss_mode="low_var_kl"
                ),
                reward_fns=tunix_reward,
            )
        self.phase: dict[str, float] = {}
        self._wrap("generate", "rollout", lambda out: out.tokens)
        self._wrap("get_ref_per_token_logps", "reference", lambda out: out)
        self._wrap("update_actor", "update", lambda out: nnx.state(self.actor))

    def _wrap(self, method: str, phase: str, result):
        inner = getattr(self.cluster, method)

        def timed(*a, **kw):
            t = time.perf_counter()
            out = inner(*a, **kw)
            jax.block_until_ready(result(out))
            self.phase[phase] = self.phase.get(phase, 0.0) + time.perf_counter() - t
            return out

        setattr(self.cluster, method, timed)

    def wait(self):
        jax.block_until_ready(self.nnx.state(self.actor))

    def run(self, steps: int, between) -> list[dict[str, float]]:
        """Runs ``steps`` tunix iterations in one ``train`` call; ``between()`` runs (untimed for
        tunix) after each finished iteration but the last, before the next batch is handed over.
        It always runs on tunix's data-loading thread, so its jit cache context never changes
        (a jitted function called under ``jax.set_mesh`` is traced and compiled anew)."""
        prompts = np.array([" ".join(map(str, p)) for p in prompt_tokens()])
        out, mark = [], []

        def batches():
            while True:
                self.wait()
                if mark:  # tunix pulls its first batch on the main thread, the rest on a worker
                    out.append({"total": time.perf_counter() - mark[-1], **self.phase})
                    between()
                self.phase = {}
                mark.append(time.perf_counter())
                yield {"prompts": prompts}

        self.cc.training_config.max_steps = steps
        with jax.set_mesh(self.mesh):
            self.learner.train(batches())
            self.wait()
        out.append({"total": time.perf_counter() - mark[-1], **self.phase})
        return out


# ---------------------------------------------------------------------------------------------


def median_row(runs: list[dict[str, float]]) -> dict:
    keys = ["total"] + [k for k in PHASES if any(k in r for r in runs)]
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys} | {
        "n": len(runs),
        "all_total": [round(r["total"], 4) for r in runs],
    }


def bench_variant(beta: float, repeats: int, warmup: int, engines: list[str]) -> dict:
    ours = {
        name: AgentjaxGRPO(
            exact_tile=8 if name == "agentjax_exact" else 0,
            beta=beta,
            fused_reference=name != "agentjax_split",
        )
        for name in engines
        if name.startswith("agentjax") and (beta or name != "agentjax_split")
    }
    runs: dict[str, list] = {k: [] for k in ours}

    def between():
        for k, eng in ours.items():
            runs[k].append(eng.iteration())

    if "tunix" in engines:
        # tunix iteration i+1 follows agentjax iteration i; both compile in their first one.
        tunix_runs = TunixGRPO(beta).run(warmup + repeats + 1, between)
        runs["tunix"] = tunix_runs[warmup + 1 :]
        for k in ours:
            runs[k] = runs[k][warmup:]
    else:
        for _ in range(warmup + repeats):
            between()
        runs = {k: v[warmup:] for k, v in runs.items()}
    row = {k: median_row(v) for k, v in runs.items()}
    for k in ours:
        if "tunix" in row:
            # Ratio of medians, and the median of the per-round ratios (agentjax iteration j
            # against the tunix iteration run right after it): less sensitive to load changes.
            row[f"tunix_over_{k}"] = row["tunix"]["total"] / row[k]["total"]
            row[f"tunix_over_{k}_paired"] = statistics.median(
                t["total"] / a["total"] for t, a in zip(runs["tunix"], runs[k], strict=True)
            )
    if "tunix_over_agentjax" in row:
        row["pass"] = row["tunix_over_agentjax"] >= TARGET
    return row


def format_table(results: dict) -> str:
    lines = [
        "| variant | engine | iteration s | rollout s | reference s | update s | "
        "tunix / engine | paired | vs 1.5x |",
        "|---" * 9 + "|",
    ]
    for variant, row in results["variants"].items():
        for eng in ("agentjax", "agentjax_split", "agentjax_exact", "tunix"):
            if eng not in row:
                continue
            r = row[eng]
            ph = [f"{r[p]:.4f}" if p in r else "-" for p in PHASES]
            ratio = row.get(f"tunix_over_{eng}")
            verdict = "" if eng != "agentjax" or ratio is None else ("PASS" if ratio >= TARGET else "FAIL")
            paired = row.get(f"tunix_over_{eng}_paired")
            lines.append(
                f"| {variant} | {eng} | {r['total']:.4f} | {' | '.join(ph)} | "
                f"{'' if ratio is None else f'{ratio:.2f}x'} | "
                f"{'' if paired is None else f'{paired:.2f}x'} | {verdict} |"
            )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/grpo_step.json")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--variants", default="kl,no_kl")
    ap.add_argument("--engines", default="agentjax,agentjax_split,agentjax_exact,tunix")
    args = ap.parse_args()
    engines = args.engines.split(",")
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "jax": jax.__version__,
            "devices": str(jax.devices()),
            "loadavg_start": os.getloadavg(),
        },
        "work": {
            "prompts": PROMPTS,
            "generations": GROUP,
            "prompt_len": PROMPT_LEN,
            "new_tokens": NEW,
            "model": MODEL,
            "beta": BETA,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "statistic": "median wall s per iteration",
        },
        "target_tunix_over_agentjax": TARGET,
        "variants": {},
    }
    for variant in args.variants.split(","):
        beta = BETA if variant == "kl" else 0.0
        row = bench_variant(beta, args.repeats, args.warmup, engines)
        row["loadavg_after"] = os.getloadavg()
        results["variants"][variant] = row
        print(variant, json.dumps(row), flush=True)
    results["machine"]["loadavg_end"] = os.getloadavg()
    table = format_table(results)
    results["table"] = table
    print(table)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
