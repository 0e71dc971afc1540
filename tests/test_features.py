"""Loop-level tests of the issue-#16 features: each trains a smoke-sized run from a config in
configs/ and checks the feature's effect in the run's metrics, so each fails when the feature is
broken. Sizes are those of configs/smoke.py; runs share compiled steps through the cache."""

import collections
import json
import os

import numpy as np
import pytest

from agentjax.learner.journal import Journal
from agentjax.run import build as runbuild
from agentjax.run import learner as runlearner
from agentjax.run import loop
from agentjax.run import loopparts as loopparts
from tests.runs import tiny_config as _config


def _real(name="default", **overrides):
    """The users' path: the wall clock and the slot engine (``tiny_config`` pins the virtual clock
    on lock-step Rollout for the tests whose point is determinism)."""
    return _config(name, scheduler__clock="real", scheduler__engine_slots=8, **overrides)


def _token_rewards(run, trajs):
    """Rewards that vary within groups (a function of each trajectory's tokens): the smoke policy
    passes no task, so its verdict rewards give every advantage 0."""
    return [float(t.num_action_tokens % 3) for t in trajs]


def _train(cfg, workdir):
    summary = loop.train(cfg, str(workdir), log=lambda s: None)
    rows = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl")) if ln.strip()]
    return summary, [r for r in rows if "loss/total" in r]


@pytest.mark.slow
def test_bf16_sampler_icepop_masks_mismatch_and_an_exact_sampler_masks_nothing(tmp_path):
    band = dict(loss__icepop_low=0.9995, loss__icepop_high=1.0005)  # tight: tiny-model bf16 deltas ~1e-3
    _, rows = _train(_real("bf16_sampler_icepop", **band), tmp_path / "bf16")
    assert all(r["masked/filter_icepop"] > 0 for r in rows), [r["masked/filter_icepop"] for r in rows]
    assert all(r["mismatch/max_abs_delta"] > 0 for r in rows)
    # control: the default exact f32 sampler with the same filter on the mismatch ratio
    _, exact = _train(_real("default", loss__filter_ratio="mismatch", **band), tmp_path / "exact")
    assert all(r["masked/filter_icepop"] == 0.0 and r["ratio/mismatch"] == 1.0 for r in exact)
    assert all(r["mismatch/max_abs_delta"] == 0.0 for r in exact)


@pytest.mark.slow
def test_offpolicy_hispo_separates_staleness_from_mismatch(tmp_path):
    # a shared critic's value loss moves the policy even while every verdict reward is 0
    critic = dict(model__value_head="shared", loss__advantage="gae", loss__value_coef=0.5)
    cfg = _config("offpolicy_hispo", steps=3, admission__downweight_from_gap=0, **critic)
    _, rows = _train(cfg, tmp_path)
    assert all(abs(r["ratio/mismatch"] - 1) > 1e-6 for r in rows)  # bf16 sampler, every step
    stale = [r for r in rows if r["version_gap_max"] > 0]
    assert stale and all(abs(r["ratio/staleness"] - 1) > 1e-7 for r in stale)
    assert all(r["weights_mean"] < 1.0 for r in stale)  # admission: stale samples down-weighted
    fresh = [r for r in rows if r["version_gap_max"] == 0]
    assert all(abs(r["ratio/staleness"] - 1) < 1e-6 for r in fresh)
    # HisPO's own masks by value: tests/test_feature_effects.py


@pytest.mark.slow
def test_moe_bf16_sampler_routing_mismatch_is_zero_with_replay_and_not_without(tmp_path, monkeypatch):
    """``routing/mismatch`` is measured on the routes of the forward the loss is computed with
    (not on the learner's input), and replay changes the loss: both runs train the same first
    batch (virtual clock, slot engine), so the first step's loss differs only by the routes."""
    monkeypatch.setattr(loopparts, "batch_rewards", _token_rewards)  # advantages != 0
    # an int4 sampler's router flips experts often enough that action tokens' own routes differ
    engine = dict(scheduler__engine_slots=8, sampler__quantize_bits=4)
    _, replay = _train(_config("moe_r3", **engine), tmp_path / "r3")
    assert all(r["routing/mismatch"] == 0.0 for r in replay)
    _, free = _train(_config("moe_r3", sampler__replay_routes=False, **engine), tmp_path / "free")
    assert free[0]["routing/mismatch"] > 0.0
    assert replay[0]["loss/total"] != free[0]["loss/total"] and replay[0]["grad_norm"] != free[0]["grad_norm"]


@pytest.mark.slow
def test_decoupled_ppo_minibatches_move_the_update_ratio(tmp_path):
    critic = dict(model__value_head="shared", loss__advantage="gae", loss__value_coef=0.5)
    _, rows = _train(_config("decoupled_ppo", optim__minibatches=4, **critic), tmp_path)
    assert all(abs(r["loss/ratio/update_mean"] - 1) > 1e-7 for r in rows)  # later minibatches moved
    assert all(r["skipped_nonfinite"] == 0 for r in rows)


@pytest.mark.slow
def test_advantage_estimators_differ_on_the_same_first_batch(tmp_path, monkeypatch):
    seen = {}
    make_batch = runlearner.make_batch

    def spy(trajs, *a, **k):
        arrays, bm = make_batch(trajs, *a, **k)
        seen.setdefault(k["advantage"], (list(k["rewards"]), arrays["advantages"].copy()))
        return arrays, bm

    monkeypatch.setattr(runlearner, "make_batch", spy)
    # a smoke policy fails every task (all verdict rewards 0, no group has a signal): give the
    # batch rewards that vary within groups, a function of each trajectory's own tokens
    monkeypatch.setattr(
        runlearner.loopparts,
        "batch_rewards",
        lambda run, trajs: [float(t.num_action_tokens % 3) for t in trajs],
    )
    for est in ("group_std", "dr_grpo", "rloo"):
        _train(_config("default", steps=1, loss__advantage=est), tmp_path / est)
    rewards = {k: v[0] for k, v in seen.items()}
    assert rewards["group_std"] == rewards["dr_grpo"] == rewards["rloo"]  # the same batch
    assert len(set(rewards["group_std"])) > 1, "the batch needs reward variance"
    std, dr, rloo = (seen[k][1] for k in ("group_std", "dr_grpo", "rloo"))
    assert (std != dr).any() and (dr != rloo).any() and (std != rloo).any()


@pytest.mark.slow
def test_rubric_in_the_reward_changes_the_rewards_and_evidence_mode_does_not(tmp_path):
    _, ev = _train(_real("default", steps=1), tmp_path / "ev")
    _, rw = _train(_real("default", steps=1, rubric__mode="reward", rubric__weight=0.5), tmp_path / "rw")
    assert ev[0]["batch/reward_mean"] == 0.0  # the tiny policy never passes: verdict rewards are 0
    assert rw[0]["batch/reward_mean"] > 0.0  # ... but its partial rubric credit is in the reward


@pytest.mark.slow
def test_injected_infra_faults_are_masked_at_their_rate_and_never_zeroed(tmp_path):
    summary, rows = _train(_real("default", steps=3, faults__rates={"env_crash": 0.2}), tmp_path)
    trajs = Journal(tmp_path / "journal.bin").read()
    infra = [t for t in trajs if t.label == "infra_fault"]
    assert len(trajs) >= 40, collections.Counter(t.label for t in trajs)
    share = len(infra) / len(trajs)
    assert 0.1 <= share <= 0.3, share  # 20% injected per episode (binomial, n >= 40)
    assert all(t.final_reward is None for t in infra)  # masked, never a zero reward
    assert 0 < summary["scheduler"]["terminal"]["masked"] <= len(infra)  # (the rest: shutdown)
    assert all("infra_fault" not in r["labels"] for r in rows)  # none reached a learner batch
    assert summary["retries"] == 0  # faults.retry_max_attempts=1: masked, not retried
    # the cost ledger is the run's measured wall time, and fast-first bias uses its real classes
    led = summary["cost_ledger"]
    assert led["device_seconds"]["generation"] > 0 and led["device_seconds"]["training"] > 0
    assert led["cpu_seconds"]["environment"] > 0 and led["cpu_seconds"]["verification"] > 0
    assert led["device_seconds"]["retry_waste"] > 0  # the crashed episodes' generation
    sch = summary["scheduler"]
    assert sch["slowest_class"] in {t.task_class for t in trajs} and "long_task_drop_rate" not in sch
    # fast-first bias is measured on the drops: a class with a crashed (never trained) episode
    # has a positive drop rate
    crashed = {t.task_class for t in infra}
    assert crashed and all(sch["drop_rate_by_class"][c] > 0 for c in crashed), sch["drop_rate_by_class"]


@pytest.mark.slow
def test_noisy_env_curriculum_raises_rates_and_retries_infra_faults(tmp_path):
    cfg = _real(
        "noisy_env_curriculum", steps=3, curriculum__gate=0.0, curriculum__floor=0.0, curriculum__ramp_steps=2
    )
    cfg.curriculum.start = dict(tool_error=0.0, timeout=0.0, verifier_crash=0.0, env_crash=0.2)
    cfg.curriculum.cap = dict(tool_error=0.5, timeout=0.1, verifier_crash=1.0, env_crash=0.5)
    summary, rows = _train(cfg, tmp_path)
    rates = [r["curriculum/rate/tool_error"] for r in rows]
    assert rates[0] > 0 and rates == sorted(rates) and rates[-1] == 0.5
    crashed = [t for t in Journal(tmp_path / "journal.bin").read() if t.label == "infra_fault"]
    assert crashed and summary["retries"] > 0  # infra faults were resubmitted by the scheduler
    assert summary["final_eval"]["eval/n"] == 8  # held-out evaluation runs in the clean env


def test_dynamic_sampling_drops_uniform_groups_from_the_training_batches(tmp_path):
    """scheduler.uniform_groups='drop': no learner batch holds a group of equal rewards (within
    the drop budget), the dropped episodes end 'filtered' (journaled, never trained), and every
    step trains whole groups. A short warm start gives the tiny policy some passing episodes."""
    cfg = _real(
        "default",
        steps=3,
        admission__max_version_gap=8,  # nothing rejected stale: whole groups
        warm_start__steps=150,
        warm_start__episodes=256,
        scheduler__uniform_groups="drop",
        scheduler__drop_budget=64,
    )
    summary, rows = _train(cfg, tmp_path)
    trained_uniform = 0.0
    for r in rows:
        # a uniform group is trained only after the budget released it (a spent budget: the
        # policy failed nearly every group of a step's 64 x 16 dropped episodes)
        trained_uniform += r["batch/all_same_groups"] * 4
        assert trained_uniform <= r["sampling/released_uniform_total"], r
    assert any(r["batch/all_same_groups"] == 0 and r["sampling/dropped_uniform"] > 0 for r in rows)
    assert all(r["batch/singleton_groups"] == 0 and r["batch/groups"] == 4 for r in rows)
    dropped = summary["scheduler"]["terminal"]["filtered"]
    assert 0 < rows[-1]["sampling/dropped_uniform_total"] <= dropped  # (and some after the last step)
    by_task = collections.defaultdict(set)
    for t in Journal(tmp_path / "journal.bin").read():
        by_task[t.task_id].add(t.final_reward)
    uniform = [k for k, v in by_task.items() if len(v) == 1]
    assert len(uniform) * 4 >= dropped  # the journal holds the dropped groups, whole


@pytest.mark.slow
@pytest.mark.parametrize(("clock", "resume"), [("virtual", "recompute"), ("real", "keep")])
def test_partial_rollout_pauses_episodes_and_resumes_them_under_newer_weights(tmp_path, clock, resume):
    """scheduler.round_budget on the slot engine, in the training loop: episodes pause after 2
    action tokens a round, resume under the weights of a later version (keep or recompute) and
    are trained with every token's own behaviour version; the learner's ratio machinery sees
    the pause (a trained episode spans versions)."""
    cfg = _config(
        "default",
        steps=4,
        scheduler__clock=clock,
        scheduler__mode="async",
        scheduler__engine_slots=8,
        scheduler__round_budget=2,
        scheduler__resume=resume,
        admission__max_version_gap=3,
    )
    summary, rows = _train(cfg, tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    trajs = Journal(os.path.join(tmp_path, "journal.bin")).read()
    finished = [t for t in trajs if t.stop_reason != "round_budget_paused"]
    assert finished and all(t.num_action_tokens > 0 for t in finished)
    assert any(u.pauses for t in finished for u in t.turns)  # cut by the round budget
    assert any(len(set(t.versions.tolist())) > 1 for t in finished)  # resumed under a newer version
    if resume == "recompute":
        assert any(u.recomputed for t in finished for u in t.turns)
    assert max(r["version_gap_max"] for r in rows) <= 3
    assert summary["engine"]["paused"] > 0


@pytest.mark.slow
def test_windowed_fifo_blocks_on_its_head_and_a_wide_window_is_async(tmp_path):
    """A window of one group is strict FIFO: the learner waits for the oldest submitted group
    (head-of-line blocking), so its first step comes later on the virtual clock than greedy
    async's; a window wider than everything in flight consumes exactly as async does."""
    runs = {}
    for name, sched in (
        ("fifo", dict(scheduler__mode="windowed_fifo", scheduler__window=4)),
        ("wide", dict(scheduler__mode="windowed_fifo", scheduler__window=1 << 20)),
        ("async", dict(scheduler__mode="async")),
    ):
        _, rows = _train(_config("default", steps=2, **sched), tmp_path / name)
        runs[name] = [(r["virtual_time"], r["loss/total"], r["batch/reward_mean"]) for r in rows]
    assert runs["wide"] == runs["async"]
    assert runs["fifo"][0][0] > runs["async"][0][0], runs


@pytest.mark.slow
def test_gae_bootstraps_rows_the_system_cut_with_the_critic_value(tmp_path, monkeypatch):
    """GAE's truncation bootstrap in the loop: with a rewritten context each turn is its own
    learner row and every turn but the last is cut by the system (``bootstrap = 1``: the episode
    goes on), so its last value is the critic's, not a silent 0. The loop's own first train step,
    re-run on its own batch with the bootstrap flags zeroed, must give another loss."""
    import jax
    import jax.numpy as jnp

    from agentjax.learner import step as learner_step

    calls = []
    make = learner_step.make_train_step

    def spy(*a, **k):
        fn = make(*a, **k)

        def wrapped(state, batch, *rest):
            if not calls:
                calls.append((fn, jax.tree.map(jnp.copy, state), batch, rest))
            return fn(state, batch, *rest)

        return wrapped

    monkeypatch.setattr(runbuild, "make_train_step", spy)
    critic = dict(model__value_head="shared", loss__advantage="gae", loss__value_coef=0.5)
    _train(_config("default", steps=1, context__policy="drop_oldest_observations", **critic), tmp_path)
    fn, state, batch, rest = calls[0]
    cut = np.asarray(batch["bootstrap"]) > 0
    assert cut.any() and np.asarray(batch["loss_mask"])[cut].sum() > 0  # trained rows that go on
    _, with_boot = fn(state, batch, *rest)
    _, without = fn(state, {**batch, "bootstrap": jnp.zeros_like(batch["bootstrap"])}, *rest)
    assert float(with_boot["loss/total"]) != float(without["loss/total"])


@pytest.mark.slow
def test_group_fingerprints_drop_members_judged_in_another_environment(tmp_path, monkeypatch):
    """``fingerprints.mode='group'`` in the loop: a member whose verdict carries another
    environment fingerprint than its group's first (here every third verdict, as if its host ran
    another image) trains with weight 0; ``record`` only counts them. Both runs see the same first
    batch, so the first step's loss differs only by the drop."""
    import dataclasses
    import itertools

    from agentjax.envs.minirepo import verifier

    verify = verifier.verify

    def drifting(seen):
        def judged(task, submission):
            v = verify(task, submission)
            return (
                dataclasses.replace(v, env_fingerprint=v.env_fingerprint + "|drift")
                if next(seen) % 3 == 2
                else v
            )

        return judged

    monkeypatch.setattr(loopparts, "batch_rewards", _token_rewards)  # advantages != 0
    rows = {}
    for mode in ("record", "group"):
        monkeypatch.setattr(verifier, "verify", drifting(itertools.count()))
        _, rows[mode] = _train(_config("default", steps=1, fingerprints__mode=mode), tmp_path / mode)
    rec, grp = rows["record"][0], rows["group"][0]
    assert rec["fingerprints/distinct"] > 1 and rec["fingerprints/dropped"] == 0
    assert grp["fingerprints/dropped"] > 0 and grp["loss/total"] != rec["loss/total"]


@pytest.mark.slow
def test_reward_hacks_train_with_the_penalty_and_the_runs_evaluation_audits_its_passes(tmp_path, monkeypatch):
    """Problem 7 in the loop, on the real clock and the slot engine. Every task plants the hack
    tool; the verifier's verdicts cycle hack, pass, its own (as if the agent used the tool on
    every third episode), and the independent audit fails everything. The learner trains each
    ``reward_hack`` with the treatment table's penalty (-1, not the verdict's 0) and each pass
    with 1; the run's held-out evaluation counts the hacks among the planted opportunities and
    its H (audit fail given train pass) is 1, which the train verdicts alone would make 0."""
    import dataclasses
    import itertools

    from agentjax.envs import minirepo
    from agentjax.envs.minirepo import env, verifier
    from agentjax.envs.protocol import Label

    verdict, audit, seen = env.MinirepoEnv._verdict, verifier.audit, itertools.count()

    def judged(self, kind, fault):
        v, i = verdict(self, kind, fault), next(seen) % 3
        if i == 0:
            return dataclasses.replace(v, label=Label.REWARD_HACK, reward=0.0)
        return dataclasses.replace(v, label=Label.PASS, reward=1.0) if i == 1 else v

    def audited(task, submission):
        return dataclasses.replace(audit(task, submission), label=Label.FAIL, reward=0.0)

    trained = []

    def spy(run, trajs):
        out = batch_rewards(run, trajs)
        trained.extend(zip([t.label for t in trajs], out, strict=True))
        return out

    batch_rewards = loopparts.batch_rewards
    monkeypatch.setattr(loopparts, "batch_rewards", spy)
    monkeypatch.setattr(env.MinirepoEnv, "_verdict", judged)
    monkeypatch.setattr(verifier, "audit", audited)
    planted = dataclasses.replace(minirepo.PRESETS["default"], hack_prob=1.0)
    monkeypatch.setitem(minirepo.PRESETS, "default", planted)
    try:
        _train(_real("default", steps=2), tmp_path)
    finally:  # generated tasks are cached by difficulty, and the planted preset's label is "default"
        minirepo.tasks.generate.cache_clear()
    hacks = [r for label, r in trained if label == "reward_hack"]
    passes = [r for label, r in trained if label == "pass"]
    assert hacks and set(hacks) == {-1.0}, trained
    assert passes and set(passes) == {1.0}, trained
    evals = [json.loads(x) for x in open(tmp_path / "metrics.jsonl") if '"eval/success"' in x]
    final = evals[-1]
    assert final["eval/hack/n_opportunities"] == 8  # every held-out task plants the tool
    assert final["eval/hack/n_taken"] > 0 and final["eval/hack/rate"] > 0
    assert final["eval/audit/n_train_pass"] > 0 and final["eval/audit/H"] == 1.0


def test_an_episode_token_cap_from_the_caps_section_ends_episodes_in_the_loop(tmp_path):
    """caps.max_tokens reaches the users' path (real clock, slot engine): no trained or
    journaled episode has more action tokens, and the episodes that spent it end as task_cap."""
    _train(_real("default", steps=1, caps__max_tokens=6), tmp_path)
    trajs = Journal(tmp_path / "journal.bin").read()
    assert trajs and all(t.num_action_tokens <= 6 for t in trajs)
    assert any(t.stop_reason == "task_cap" and t.num_action_tokens == 6 for t in trajs)


@pytest.mark.parametrize("mode", ["skip", "update"])
def test_batches_with_no_signal_leave_the_policy_where_it_is(tmp_path, monkeypatch, mode):
    """Real clock, slot engine: step 1's batch has a signal, steps 2-3 have none (every advantage
    0). With ``optim.empty_batches='skip'`` the checkpoints after steps 2 and 3 are bitwise equal
    and the steps report ``skipped_empty``; with ``'update'`` Adam's first moment keeps moving
    every weight through them."""
    from agentjax.learner import checkpoint as ckpt

    calls = []

    def rewards(run, trajs):
        calls.append(len(trajs))
        return _token_rewards(run, trajs) if len(calls) == 1 else [0.0] * len(trajs)

    monkeypatch.setattr(loopparts, "batch_rewards", rewards)
    cfg = _real("default", steps=3, optim__empty_batches=mode, checkpoint_every=1)
    _, rows = _train(cfg, tmp_path)
    assert len(calls) == 3 and rows[0]["grad_norm"] > 0
    assert [r["grad_norm"] for r in rows[1:]] == [0.0, 0.0]
    d = str(tmp_path / "checkpoints")
    two, three = (ckpt.restore_checkpoint(d, step=s).state["params"] for s in (2, 3))
    same = all(np.array_equal(a, b) for a, b in zip(_leaves(two), _leaves(three), strict=True))
    assert [r["skipped_empty"] for r in rows] == ([0.0, 1.0, 1.0] if mode == "skip" else [0.0] * 3)
    assert same == (mode == "skip")


def _leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_the_demonstration_term_trains_where_every_advantage_is_zero(tmp_path):
    """Real clock, slot engine. The smoke policy passes nothing: every advantage is 0 and without
    ``loss.demo_coef`` no step moves the policy. With it, each step trains on ``loss.demo_rows``
    of the warm start's rows: a gradient every step and their NLL reported."""
    _, rows = _train(_real("default", steps=2, loss__demo_coef=1.0), tmp_path / "demo")
    assert all(r["grad_norm"] > 0 and r["skipped_empty"] == 0 for r in rows)
    assert all(r["loss/demo_nll"] > 0 for r in rows)
    assert os.path.exists(tmp_path / "demo" / "demos.npz")
    _, bare = _train(_real("default", steps=2), tmp_path / "bare")
    assert all(r["grad_norm"] == 0 and "loss/demo_nll" not in r for r in bare)
