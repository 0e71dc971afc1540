"""Rollout engine benchmark: lock-step ``Rollout`` vs the slot engine, real waiting on minirepo.

Both run the same episodes (minirepo train tasks, the default run's model, caps and exact
kernels, random weights) with the same number of decode slots. Every environment step *waits*
its minirepo latency x ``--latency-scale`` real seconds (``RealLatency``); the latency model is
long-tailed for every tool (minirepo's ``run`` distribution, lognormal, median 1 x task cost,
sigma 1: an untrained policy rarely calls ``run``/``submit``, whose tails the default model
reserves for them, so every call is given that tail here).

* lock-step: ``Rollout`` over batches of ``slots`` episodes; each batch decodes in lock-step and
  steps its environments one after another between decode calls, and the next batch starts when
  every episode of this one has ended (today's ``SamplerWorker``);
* slot engine: ``EngineRollout`` on ``slots`` slots, environments on a thread pool, episodes
  admitted as slots free up, waiting episodes evicted when others wait for a slot (so more
  episodes than slots can be in flight); and the same without eviction (at most ``slots``
  episodes in flight, a waiting episode keeps its slot).

Workloads (``--workload``): ``minirepo`` (above), or ``codefix``: the real sandbox, every
environment step a real tool call in bubblewrap (``test``: pytest over the task's visible tests,
``ls``, then ``submit``: the isolated verifier), so its latency is the sandbox's own, not a
model. The agent's moves are scripted (:class:`Scripted`: a random-weights model makes no valid
tool call, so each action, however it reads, runs the script's next call) and the model sees the
first words of the real output; generation is the real model's. Needs root, ``bwrap`` and
``setpriv`` (as codefix does).

Exact mode: the two produce the same trajectories (checked). Reports trajectories/s, generated
tokens/s, slot occupancy, env-pool utilisation, queue, latency and Little's law; writes
``benchmarks/results/engine.json``. Target (issue 15): slot engine >= 2.0x lock-step
trajectories/s on the long-tailed environment.

    python benchmarks/engine.py [--episodes 48] [--slots 8] [--latency-scale 0.05]
    python benchmarks/engine.py --workload codefix [--episodes 24] [--slots 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time

import jax
import numpy as np

from agentjax.envs import minirepo
from agentjax.envs.minirepo.vocab import TOOLS
from agentjax.policy.codec import Codec
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import init_params
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.sampling.engine import Engine
from agentjax.sampling.engine_rollout import EngineRollout
from agentjax.sampling.envpool import EnvPool, RealLatency
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.queue import Caps
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler

MODEL = dict(
    d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=256, max_seq_len=96, exact_tile=8
)  # configs/default.py
CAPS = Caps(max_tool_calls=6, max_action_tokens=6, max_obs_tokens=48)
RUN = minirepo.LONG_TAILED.tools["run"]
LATENCY = minirepo.LatencyModel(tools={}, default=RUN, cost_scaled=(*TOOLS, "error"))


def specs(n: int, scale: float, first: int = 0) -> list[EpisodeSpec]:
    env = minirepo.EnvConfig(max_steps=6, latency=LATENCY)
    return [
        EpisodeSpec(
            RealLatency(minirepo.MinirepoEnv(env), scale),
            minirepo.generate(first + i, "train"),
            first + i,
            task_id=f"t{first + i}",
            submit_index=i,
        )
        for i in range(n)
    ]


SCRIPT = ("test", "ls", "test", "submit")  # codefix: the scripted tool calls of every episode
OPEN: list = []  # codefix environments, closed (workspaces unmounted) at exit


class Scripted:
    """A codefix environment whose tool calls follow ``SCRIPT`` whatever the action says; the
    observation is the real output's first words, digits dropped (pytest's timings would make
    two runs' observations differ)."""

    def __init__(self, env):
        self.env, self.k = env, 0

    @staticmethod
    def _short(text: str, words: int = 10) -> str:
        return " ".join(text.translate(str.maketrans("", "", "0123456789")).split()[:words])

    def reset(self, task, seed: int):
        self.k = 0
        return self._short(self.env.reset(task, seed))

    def step(self, action_text: str):
        call = SCRIPT[min(self.k, len(SCRIPT) - 1)]
        self.k += 1
        res = self.env.step(call)
        return dataclasses.replace(res, observation=self._short(res.observation))


def codefix_specs(n: int, first: int = 0) -> list[EpisodeSpec]:
    from agentjax.envs.codefix import api
    from agentjax.envs.codefix.env import CodefixEnv, EnvConfig

    names = api.list_tasks()
    envs = [Scripted(CodefixEnv(EnvConfig(max_steps=len(SCRIPT)))) for _ in range(n)]
    OPEN.extend(envs)
    return [
        EpisodeSpec(
            envs[i],
            api.load_task(names[(first + i) % len(names)]),
            first + i,
            task_id=f"t{first + i}",
            submit_index=i,
        )
        for i in range(n)
    ]


def lock_step(sampler, codec, params, eps, slots, rng):
    t0 = time.perf_counter()
    trajs = []
    for k in range(0, len(eps), slots):
        r = Rollout(sampler, codec, CAPS, eps[k : k + slots], pad_to=slots)
        r.start(params, 0)
        trajs += sorted(r.advance(params, 0, rng), key=lambda t: t.submit_index)
    wall = time.perf_counter() - t0
    tokens = sum(t.num_action_tokens for t in trajs)
    return trajs, {
        "wall_s": wall,
        "trajectories_per_s": len(trajs) / wall,
        "tokens_per_s": tokens / wall,
        "tokens": tokens,
    }


def slot_engine(sampler, codec, params, eps, slots, chunk, workers, rng, evict_after=0.0):
    r = EngineRollout(Engine(sampler, slots=slots, chunk=chunk), codec, CAPS, eps, evict_after=evict_after)
    with EnvPool(workers, "thread") as pool:
        trajs = r.run(params, 0, rng, pool)
        stats = pool.stats()
    return trajs, {**r.metrics, "env_pool": stats}


def same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.task_id != y.task_id or len(x.turns) != len(y.turns):
            return False
        for p, q in zip(x.turns, y.turns, strict=True):
            if not (np.array_equal(p.action, q.action) and np.array_equal(p.logp, q.logp)):
                return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=48)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--latency-scale", type=float, default=0.05)
    ap.add_argument("--workload", choices=("minirepo", "codefix"), default="minirepo")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/engine[_codefix].json")
    args = ap.parse_args()
    if args.out is None:
        args.out = f"benchmarks/results/engine{'_codefix' if args.workload == 'codefix' else ''}.json"
    make = (lambda n, scale, first=0: codefix_specs(n, first)) if args.workload == "codefix" else specs
    tok = WordTokenizer(minirepo.vocabulary())
    codec = Codec(tok)
    cfg = ModelConfig(**MODEL, vocab_size=tok.vocab_size)
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg, stop_tokens=(codec.stop,))
    rng = jax.random.key(1)
    # warm-up (compilation) on other episodes, without waiting; every engine program
    Engine(sampler, slots=args.slots, chunk=args.chunk).warm_up(params)
    lock_step(sampler, codec, params, make(args.slots, 0.0, 10_000), args.slots, rng)
    slot_engine(
        sampler, codec, params, make(args.slots, 0.0, 10_000), args.slots, args.chunk, args.workers, rng
    )
    load0 = os.getloadavg()
    ref, ls = lock_step(sampler, codec, params, make(args.episodes, args.latency_scale), args.slots, rng)
    got, se = slot_engine(
        sampler,
        codec,
        params,
        make(args.episodes, args.latency_scale),
        args.slots,
        args.chunk,
        args.workers,
        rng,
    )
    kept, sk = slot_engine(
        sampler,
        codec,
        params,
        make(args.episodes, args.latency_scale),
        args.slots,
        args.chunk,
        args.workers,
        rng,
        evict_after=None,
    )
    env_s = [t.timings["env_wall"] for t in ref]
    speedup = se["trajectories_per_s"] / ls["trajectories_per_s"]
    res = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "jax": jax.__version__,
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
        },
        "settings": {
            **vars(args),
            "model": MODEL,
            "caps": dataclasses.asdict(CAPS),
            "latency": (
                "the sandbox's own (real tool calls: " + ", ".join(SCRIPT) + ")"
                if args.workload == "codefix"
                else "lognormal(median 1 x task cost, sigma 1) per step, x scale"
            ),
        },
        "workload": {
            "episodes": len(ref),
            "env_steps": sum(len(t.rewards) for t in ref),
            "env_wall_per_episode_mean_s": float(np.mean(env_s)),
            "env_wall_per_episode_p95_s": float(np.percentile(env_s, 95)),
            "env_wall_per_episode_max_s": float(np.max(env_s)),
        },
        "lock_step": ls,
        "slot_engine": se,
        "slot_engine_no_eviction": sk,
        "speedup_trajectories_per_s": speedup,
        "speedup_no_eviction": sk["trajectories_per_s"] / ls["trajectories_per_s"],
        "identical_trajectories": same(ref, got) and same(ref, kept),
        "target_2x": speedup >= 2.0,
    }
    p = se["env_pool"]
    print(
        f"no eviction {sk['wall_s']:7.2f} s  {sk['trajectories_per_s']:6.2f} traj/s  "
        f"{sk['tokens_per_s']:7.1f} tok/s  occupancy {sk['slot_occupancy']:.2f}  "
        f"held-waiting {sk['slot_held_waiting']:.2f}  "
        f"({res['speedup_no_eviction']:.2f}x lock-step)"
    )
    print(f"episodes {len(ref)}, {args.slots} slots, env steps {res['workload']['env_steps']}")
    print(
        f"lock-step   {ls['wall_s']:7.2f} s  {ls['trajectories_per_s']:6.2f} traj/s  "
        f"{ls['tokens_per_s']:7.1f} tok/s"
    )
    print(
        f"slot engine {se['wall_s']:7.2f} s  {se['trajectories_per_s']:6.2f} traj/s  "
        f"{se['tokens_per_s']:7.1f} tok/s  occupancy {se['slot_occupancy']:.2f}  "
        f"held-waiting {se['slot_held_waiting']:.2f}  evictions {se['evictions']:.0f}"
    )
    print(
        f"env pool: utilisation {p['utilisation']:.2f}, queue {p['queue_length_mean']:.2f}, "
        f"latency p50/p95 {p['latency_p50']:.3f}/{p['latency_p95']:.3f} s, in flight "
        f"{p['in_flight_measured']:.2f} vs Little {p['in_flight_littles_law']:.2f}, "
        f"implied workers {p['implied_workers']:.0f}"
    )
    print(
        f"speed-up {speedup:.2f}x (target >= 2.0x: {'PASS' if speedup >= 2.0 else 'FAIL'}); "
        f"identical trajectories: {res['identical_trajectories']}"
    )
    for env in OPEN:
        env.env.close()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
