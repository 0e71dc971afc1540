"""The default run, as plain data: the one set of defaults every run config starts from.

``configs/default.py`` is this dict (plus the default run's own learning ``targets``, which no
other config inherits); :func:`agentjax.runconfig.parse` lays any config over it
field by field (:func:`merged`), so a config that sets part of a section keeps the default run's
other values (``configs/codefix_tiny.py`` sets a few scheduler fields and keeps the real clock and
the slot engine). A field named nowhere here takes its component's own default (the dataclass).

The default run: a tiny model trained on the minirepo bug-fix task on a 2-core CPU. Warm start on
an imperfect scripted demonstrator (~62% held-out), then GRPO-family RL with an IcePop consistency
filter and dynamic sampling (groups of equal rewards dropped and replaced) under windowed-FIFO
scheduling in real time: the slot engine samples (environments with long-tailed tool latency
stepped on a thread pool) while the learner trains. Exact kernels: the sampler's and the
learner's log-probs are bitwise equal.
"""

from __future__ import annotations

import copy

# The learning targets a run config may declare (top-level ``targets``: name -> bar, a share of
# the held-out tasks); the report's headline checks the final held-out evaluation against them,
# and a run that declares none gets no such check. None are set here (every config starts from
# these defaults): the default run declares its own in configs/default.py.
TARGET_NAMES = {
    "success": "final held-out success",
    "gain_over_rl_start": "final held-out success minus the RL start's (after the warm start)",
    "margin_over_demonstrator": "final held-out success minus the scripted demonstrator's",
}


def run_defaults() -> dict:
    """The default run's config (a fresh copy: sections are plain dicts)."""
    c = {}
    c["seed"] = 0
    c["model"] = dict(
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        d_ff=256,
        max_seq_len=96,
        exact_tile=8,
        value_head="none",
    )
    c["task"] = dict(
        name="minirepo",
        difficulty="default",
        latency="long_tailed",
        max_steps=6,
        eval_tasks=256,
        hack_tool=True,
    )
    c["caps"] = dict(max_tool_calls=6, max_action_tokens=6, max_obs_tokens=48)
    c["warm_start"] = dict(episodes=2000, steps=600, batch_size=64, learning_rate=3e-3)
    c["rl"] = dict(steps=100, group_size=8, batch_size=64, eval_every=20, temperature=1.0)
    c["scheduler"] = dict(
        mode="windowed_fifo",
        # clock: "real" (sampling and learning overlap in wall-clock time, agentjax/sampling/
        # realtime.py; --replay=W re-executes run W; --resume samples in-flight tasks again) or
        # "virtual" (a pure function of the seed: same seed, same run; bitwise --resume)
        clock="real",
        window=64,
        num_slots=128,
        gen_seconds_per_token=0.02,
        learner_step_time=2.0,
        # engine_slots > 0: sample on the slot engine (EngineRollout: continuous batching,
        # environments stepped on a pool while it decodes); 0: lock-step Rollout. Same
        # trajectories in exact mode
        engine_slots=64,
        engine_chunk=8,
        env_workers=8,
        env_pool="thread",
        # real time: > 0 makes each tool call also wait its simulated latency x this (minirepo's
        # long tail as real waiting); 0: environment steps take what they take (~50 us here)
        env_latency_scale=0.0,
        # partial rollout (slot engine): pause an episode after round_budget action tokens a
        # round, resume it under newer weights ("recompute" its context, or "keep" its KV cache)
        round_budget=0,
        resume="recompute",
        # dynamic sampling: "drop" keeps all-pass / all-fail groups (advantage 0) out of the
        # batch and samples more in their place, at most drop_budget x rl.batch_size per step
        # (every step trains 64 informative episodes: what lets learning_rate 1e-3 learn on
        # every seed without collapsing; docs/learning.md, issue #19); "keep": classic GRPO batch
        uniform_groups="drop",
        drop_budget=4,
    )
    c["placement"] = dict(
        kind="colocated",
        learner_mesh=dict(data=1, fsdp=1, tensor=1),
        sampler_mesh=dict(data=0, fsdp=0, tensor=0),
        sync_every=1,
        host_devices=0,  # CPU-only hosts: ask XLA for this many host devices (0: as is)
        peer_timeout_s=300.0,  # --num_processes > 1: a process silent this long fails the run
    )
    # context.policy: keep_all | drop_oldest_observations | truncate_observations. Other than
    # keep_all, each turn is its own learner row: rl.batch_size x caps.max_tool_calls rows.
    c["context"] = dict(policy="keep_all", arg=0)
    # loss.name picks the loss; its own fields sit under loss.<name> (the rest take its paper's
    # defaults, agentjax/objectives/registry.py). IcePop here bands the *total* ratio
    # current/behaviour (a hard trust region against staleness): with exact kernels the mismatch
    # ratio is exactly 1, so filter_ratio="mismatch" would mask nothing (configs/bf16_sampler_icepop.py).
    c["loss"] = dict(
        name="grpo",
        grpo=dict(clip_low=0.2, clip_high=0.28, aggregation="seq_mean_token_mean"),
        filter="icepop",
        filter_ratio="total",
        icepop_low=0.5,
        icepop_high=2.0,
        tis_cap=0.0,
        advantage="group_std",
        gamma=1.0,
        gae_lambda=0.95,
        whiten=True,
        value_coef=0.0,
        kl_coef=0.0,
        kl_kind="k3",
        negative_scale=1.0,
    )
    # loss.advantage: group_std | dr_grpo | rloo | gae (gae needs model.value_head "shared"/"separate")
    c["sampler"] = dict(
        param_dtype="", compute_dtype="", head_dtype="", quantize_bits=0, exact_tile=-1, replay_routes=True
    )  # "" / -1: as the learner
    c["faults"] = dict(rates={}, retry_max_attempts=1, retry_max_same_cause=2)  # 1 attempt: no retries
    c["rubric"] = dict(mode="evidence", weight=0.0)  # "reward": (1 - w) verdict + w rubric score
    c["fingerprints"] = dict(mode="record")  # "group": drop a member whose env fingerprint differs
    # admission: the staleness bounds (agentjax.sampling.staleness.StalenessConfig).
    # queue_capacity=0: 4 x rl.batch_size, at least scheduler.num_slots.
    c["admission"] = dict(
        max_version_gap=2,
        queue_capacity=0,
        max_in_flight=1 << 30,
        class_max_gap={},
        downweight_from_gap=-1,
        downweight_decay=0.5,
        pressure_threshold=1.0,
        pressure_tighten=0,
    )
    c["optim"] = dict(
        learning_rate=1e-3,  # with uniform_groups="drop"; 5e-4 stalled seeds 1 and 4 (docs/learning.md)
        warmup_steps=0,
        weight_decay=0.0,
        b1=0.9,
        b2=0.99,
        grad_clip=1.0,
        grad_accum=1,
        minibatches=1,
    )
    c["checkpoint_every"] = 20
    c["log_every"] = 5
    c["report"] = True
    return c


def merged(cfg: dict) -> dict:
    """``cfg`` laid over :func:`run_defaults`, dict fields merged key by key (``loss.grpo``,
    ``placement.learner_mesh``); a ``model`` section with ``hf_path`` is taken as it is (its
    architecture comes from the checkpoint)."""
    base = run_defaults()
    if isinstance(cfg.get("model"), dict) and cfg["model"].get("hf_path"):
        base.pop("model")
    return _merge(base, cfg)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else copy.copy(v)
    return out
