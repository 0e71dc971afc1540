"""The default run, as plain data: the one set of defaults every run config starts from.

``configs/default.py`` is this dict (plus the default run's own learning ``targets``, which no
other config inherits); :func:`agentjax.runconfig.parse` lays any config over it
field by field (:func:`merged`), so a config that sets part of a section keeps the default run's
other values (``configs/codefix_tiny.py`` sets a few scheduler fields and keeps the real clock and
the slot engine). Only values that differ from the components' own defaults are written here (a
field named nowhere takes its dataclass's default; ``tests/test_runconfig.py`` keeps it so); every
section is present, perhaps empty, so a config can set ``c.<section>.<field>``.

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
    c["model"] = dict(d_model=64, head_dim=16, d_ff=256, max_seq_len=96, exact_tile=8)
    c["task"] = dict()  # minirepo, long-tailed tool latency, 256 held-out tasks (TaskConfig)
    c["caps"] = dict(max_tool_calls=6, max_action_tokens=6, max_obs_tokens=48)
    c["warm_start"] = dict(steps=600)
    c["rl"] = dict(eval_every=20)  # 100 steps of 64 trajectories in groups of 8 (RLConfig)
    c["scheduler"] = dict(
        mode="windowed_fifo",
        # clock: "real" (sampling and learning overlap in wall-clock time, agentjax/sampling/
        # realtime.py; --replay=W re-executes run W; --resume samples in-flight tasks again) or
        # "virtual" (a pure function of the seed: same seed, same run; bitwise --resume)
        clock="real",
        num_slots=128,
        learner_step_time=2.0,
        # engine_slots > 0: sample on the slot engine (EngineRollout: continuous batching,
        # environments stepped on a pool while it decodes); 0: lock-step Rollout. Same
        # trajectories in exact mode
        # (chunks of 8 tokens, 8 thread workers; scheduler.env_latency_scale > 0 makes each tool
        # call also wait its simulated latency; scheduler.round_budget > 0 pauses an episode
        # after that many action tokens a round: partial rollout)
        engine_slots=64,
        # dynamic sampling: "drop" keeps all-pass / all-fail groups (advantage 0) out of the
        # batch and samples more in their place, at most drop_budget x rl.batch_size per step
        # (every step trains 64 informative episodes: what lets learning_rate 1e-3 learn on
        # every seed without collapsing; docs/learning.md, issue #19); "keep": classic GRPO batch
        uniform_groups="drop",
    )
    # colocated: one mesh of every axis 1 (the sampler's axes 0: as the learner's)
    c["placement"] = dict(
        learner_mesh=dict(data=1, fsdp=1, tensor=1), sampler_mesh=dict(data=0, fsdp=0, tensor=0)
    )
    # context.policy: keep_all (the default) | drop_oldest_observations | truncate_observations.
    # Other than keep_all, each turn is its own learner row: rl.batch_size x caps.max_tool_calls rows.
    c["context"] = dict()
    # loss.name picks the loss; its own fields sit under loss.<name> (the rest take its paper's
    # defaults, agentjax/objectives/registry.py). IcePop here bands the *total* ratio
    # current/behaviour (a hard trust region against staleness): with exact kernels the mismatch
    # ratio is exactly 1, so filter_ratio="mismatch" would mask nothing (configs/bf16_sampler_icepop.py).
    # GRPO (the default loss) with DAPO's clip-higher; group_std advantages (dr_grpo | rloo | gae;
    # gae needs model.value_head "shared"/"separate").
    c["loss"] = dict(grpo=dict(clip_high=0.28), filter="icepop", filter_ratio="total")
    c["sampler"] = dict()  # as the learner (SamplerPrecision)
    c["faults"] = dict()  # no injected faults; 1 attempt: no retries (FaultsSection)
    c["curriculum"] = dict()
    c["codefix"] = dict()
    c["rubric"] = dict()  # "evidence"; "reward": (1 - w) verdict + w rubric score
    c["fingerprints"] = dict()  # "record"; "group": drop a member whose env fingerprint differs
    # admission: the staleness bounds (agentjax.sampling.staleness.StalenessConfig), a version gap
    # of 2; queue_capacity=0: 4 x rl.batch_size, at least scheduler.num_slots.
    c["admission"] = dict(max_version_gap=2, queue_capacity=0)
    # learning rate 1e-3 (OptimConfig's) with uniform_groups="drop"; 5e-4 stalled seeds 1 and 4
    # (docs/learning.md)
    c["optim"] = dict()
    c["checkpoint_every"] = 20
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
