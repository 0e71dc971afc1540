"""The mutation catalogue: one named, small source patch per feature, and the loop tests that must
fail under it (issue #27). ``python -m tests.mutations.run`` applies each in a scratch copy of the
tree and runs its tests; ``docs/mutations.md`` records the last run. ``test_catalogue.py`` keeps
every patch applicable (its ``find`` text occurs exactly once) in the suite.

A mutation breaks its feature the way a bug would: made a no-op, its mask reported but not
applied, its parameter ignored, a weight forced to 1.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    feature: str  # the README row or registry entry it breaks
    path: str  # relative to the repository root
    find: str  # occurs exactly once in ``path``
    replace: str
    tests: tuple[str, ...]  # pytest node ids; the mutation is killed when one fails


FX = "tests/test_feature_effects.py"
FT = "tests/test_features.py"
SP = "tests/sampling/test_spread.py::test_every_process_takes_the_same_decisions_and_only_metadata_crosses"
_filters = f"{FX}::test_a_consistency_filter_masks_by_its_parameter_and_the_mask_reaches_the_loss"
_own = f"{FX}::test_a_loss_honours_its_own_clip_or_bounds_in_the_loop"


def _call(fn: str, low: str, high: str) -> str:
    """The registry's call of loss ``fn`` up to its clip arguments."""
    head = "".join(f"            {a},\n" for a in ("lp.current", "lp.behavior", "adv", "mask"))
    return f"        return {fn}(\n{head}            clip_low={low},\n            clip_high={high},"


MUTATIONS = (
    Mutation(
        "r3_loss_routes_freely",
        "4 mismatch: routing replay (R3)",
        "agentjax/learner/step.py",
        '        routes=batch.get("routes"),\n        mesh=mesh,\n    )\n    values = None',
        "        routes=None,\n        mesh=mesh,\n    )\n    values = None",
        (f"{FT}::test_moe_bf16_sampler_routing_mismatch_is_zero_with_replay_and_not_without",),
    ),
    Mutation(
        "filter_mask_reported_not_applied",
        "4 mismatch: IcePop / KPop",
        "agentjax/learner/objective.py",
        "    m = mask * keep\n",
        "    m = mask\n",
        (
            f"{_filters}[icepop]",
            f"{FT}::test_bf16_sampler_icepop_masks_mismatch_and_an_exact_sampler_masks_nothing",
        ),
    ),
    Mutation(
        "icepop_band_ignored",
        "4 mismatch: IcePop",
        "agentjax/learner/objective.py",
        "low=cfg.icepop_low, high=cfg.icepop_high",
        "low=0.5, high=2.0",
        (f"{_filters}[icepop]",),
    ),
    Mutation(
        "kpop_threshold_ignored",
        "4 mismatch: KPop",
        "agentjax/learner/objective.py",
        "threshold=cfg.kpop_threshold",
        "threshold=0.05",
        (f"{_filters}[kpop]",),
    ),
    Mutation(
        "tis_weight_not_applied",
        "4 mismatch / 5 objectives: TIS",
        "agentjax/learner/objective.py",
        "adv) * jax.lax.stop_gradient(tis)",
        "adv) * 1.0",
        (f"{FX}::test_truncated_is_weights_the_advantages_and_truncates_at_its_cap",),
    ),
    Mutation(
        "tis_cap_ignored",
        "4 mismatch / 5 objectives: TIS",
        "agentjax/learner/objective.py",
        "train_v - behav, 0.0)), cfg.tis_cap)",
        "train_v - behav, 0.0)), 2.0)",
        (f"{FX}::test_truncated_is_weights_the_advantages_and_truncates_at_its_cap",),
    ),
    Mutation(
        "ess_of_even_weights",
        "3 staleness: ESS",
        "agentjax/learner/objective.py",
        'metrics["ess/token_frac"] = obj.ess(w, batch["loss_mask"])',
        'metrics["ess/token_frac"] = obj.ess(jnp.ones_like(w), batch["loss_mask"])',
        (f"{FX}::test_ess_falls_below_one_with_a_mismatched_sampler_and_is_one_without",),
    ),
    Mutation(
        "decoupled_behaviour_weight_one",
        "5 objectives: decoupled PPO",
        "agentjax/objectives/decoupled.py",
        "jnp.where(on, w * keep * obj, 0.0)",
        "jnp.where(on, keep * obj, 0.0)",
        (f"{FX}::test_decoupled_ppo_weights_by_the_behaviour_ratio",),
    ),
    Mutation(
        "ppo_clip_ignored",
        "5 objectives: PPO",
        "agentjax/objectives/registry.py",
        _call("ppo_loss", "self.clip_low", "self.clip_high"),
        _call("ppo_loss", "0.2", "0.2"),
        (f"{_own}[ppo]",),
    ),
    Mutation(
        "gspo_clip_ignored",
        "5 objectives: GSPO",
        "agentjax/objectives/registry.py",
        "gspo_loss(lp.current, lp.behavior, adv, mask, clip_low=self.clip_low, clip_high=self.clip_high)",
        "gspo_loss(lp.current, lp.behavior, adv, mask, clip_low=3e-4, clip_high=4e-4)",
        (f"{_own}[gspo]",),
    ),
    Mutation(
        "cispo_clip_ignored",
        "5 objectives: CISPO",
        "agentjax/objectives/registry.py",
        _call("cispo_loss", "self.clip_low", "self.clip_high"),
        _call("cispo_loss", "self.clip_low", "0.28"),
        (f"{_own}[cispo]",),
    ),
    Mutation(
        "mis_po_token_bounds_ignored",
        "5 objectives: MIS-PO",
        "agentjax/objectives/registry.py",
        "            token_bounds=self.token_bounds,\n",
        "            token_bounds=None,\n",
        (f"{_own}[mis_po]",),
    ),
    Mutation(
        "hispo_mismatch_mask_ignored",
        "5 objectives: HisPO",
        "agentjax/objectives/registry.py",
        "            mismatch_token_bounds=self.mismatch_bounds,\n",
        "            mismatch_token_bounds=None,\n",
        (f"{_own}[hispo]",),
    ),
    Mutation(
        "sampler_head_dtype_ignored",
        "4 mismatch: FP32 head",
        "agentjax/sampling/precision.py",
        'for f in ("param_dtype", "compute_dtype", "head_dtype") if getattr(s, f)}',
        'for f in ("param_dtype", "compute_dtype") if getattr(s, f)}',
        (f"{FX}::test_sampler_precision_settings_each_change_the_mismatch",),
    ),
    Mutation(
        "sampler_quantisation_ignored",
        "4 mismatch: quantised sampler",
        "agentjax/sampling/precision.py",
        "    if s.quantize_bits:\n        params = fake_quantize(params, s.quantize_bits)",
        "    if False:\n        params = fake_quantize(params, s.quantize_bits)",
        (f"{FX}::test_sampler_precision_settings_each_change_the_mismatch",),
    ),
    Mutation(
        "rubric_reward_ignored",
        "6 reward: rubric in the reward",
        "agentjax/run/loopparts.py",
        '    if run.rubric.mode != "reward":\n',
        "    if True:\n",
        (f"{FT}::test_rubric_in_the_reward_changes_the_rewards_and_evidence_mode_does_not",),
    ),
    Mutation(
        "uniform_groups_never_dropped",
        "6 reward: dynamic sampling",
        "agentjax/sampling/groups.py",
        "        if len({r for _, r in members}) > 1:\n",
        "        if True:\n",
        (f"{FT}::test_dynamic_sampling_drops_uniform_groups_from_the_training_batches",),
    ),
    Mutation(
        "window_ignored",
        "2 sync vs async: windowed FIFO",
        "agentjax/sampling/schedstate.py",
        "            return sorted(i for i in completed if i < head + w)",
        "            return list(completed)",
        (f"{FT}::test_windowed_fifo_blocks_on_its_head_and_a_wide_window_is_async",),
    ),
    Mutation(
        "env_pool_serial",
        "1 placement: env pool (Little's law)",
        "agentjax/sampling/envpool.py",
        'cf.ThreadPoolExecutor(workers, thread_name_prefix="envpool")',
        'cf.ThreadPoolExecutor(1, thread_name_prefix="envpool")',
        (
            "tests/test_realtime.py::test_env_latency_as_real_waiting_runs_on_the_pool_while_the_engine_decodes",
        ),
    ),
    Mutation(
        "gae_bootstrap_zeroed",
        "6 credit: GAE truncation bootstrap",
        "agentjax/learner/critic.py",
        "[:, 0] * bootstrap",
        "[:, 0] * 0.0",
        (f"{FT}::test_gae_bootstraps_rows_the_system_cut_with_the_critic_value",),
    ),
    Mutation(
        "drop_rates_stuck_at_zero",
        "2 async: fast-first bias (drop rate by class)",
        "agentjax/diagnostics/metrics.py",
        "drop = {c: float(np.mean([not t for _, t in v])) for c, v in sorted(by.items())}",
        "drop = {c: 0.0 for c, v in sorted(by.items())}",
        (f"{FT}::test_injected_infra_faults_are_masked_at_their_rate_and_never_zeroed",),
    ),
    Mutation(
        "grpo_clip_ignored",
        "5 objectives: GRPO",
        "agentjax/objectives/registry.py",
        _call("grpo_loss", "self.clip_low", "self.clip_high"),
        _call("grpo_loss", "0.2", "0.2"),
        (f"{_own}[grpo]",),
    ),
    Mutation(
        "rloo_is_group_mean",
        "6 credit: advantage estimators (RLOO)",
        "agentjax/learner/batching.py",
        '        if estimator == "rloo":\n',
        '        if estimator == "never":\n',
        (f"{FT}::test_advantage_estimators_differ_on_the_same_first_batch",),
    ),
    Mutation(
        "std_scale_ignored",
        "6 credit: advantage estimators (GRPO's std)",
        "agentjax/learner/batching.py",
        'scale="std" if estimator == "group_std" else "none"',
        'scale="none"',
        (f"{FT}::test_advantage_estimators_differ_on_the_same_first_batch",),
    ),
    Mutation(
        "fingerprint_drop_counted_not_applied",
        "8 noise: env fingerprints (group mode)",
        "agentjax/run/loopparts.py",
        "            w, dropped = 0.0, dropped + 1\n",
        "            w, dropped = w, dropped + 1\n",
        (f"{FT}::test_group_fingerprints_drop_members_judged_in_another_environment",),
    ),
    Mutation(
        "hack_penalty_ignored",
        "7 reward hacking: the treatment table's penalty",
        "agentjax/envs/protocol.py",
        "        return self.reward if rule.reward is None else rule.reward\n",
        "        return self.reward\n",
        (f"{FT}::test_reward_hacks_train_with_the_penalty_and_the_runs_evaluation_audits_its_passes",),
    ),
    Mutation(
        "audit_not_consulted",
        "7 reward hacking: audit metric H",
        "agentjax/envs/audit.py",
        "    fails = sum(a.label is not Label.PASS for _, a in passed)\n",
        "    fails = sum(t.label is not Label.PASS for t, _ in passed)\n",
        (f"{FT}::test_reward_hacks_train_with_the_penalty_and_the_runs_evaluation_audits_its_passes",),
    ),
    Mutation(
        "sync_barrier_open",
        "2 sync vs async: the sync barrier",
        "agentjax/sampling/rules.py",
        "        if not self.round_open and not self.training:\n",
        "        if not self.round_open:\n",
        ("tests/test_realtime.py::test_sync_real_time_never_overlaps",),
    ),
    Mutation(
        "gap_bound_not_enforced",
        "3 staleness: the version-gap bound cancels in-flight work",
        "agentjax/sampling/machine.py",
        "        self.gate.on_step()\n        self.enforce_bound()\n",
        "        self.gate.on_step()\n",
        ("tests/sampling/test_machine.py::test_publishing_cancels_rounds_over_the_version_gap_bound",),
    ),
    Mutation(
        "scheduler_step_changes_its_input",
        "2 sync vs async: the scheduler's step is pure",
        "agentjax/sampling/machine.py",
        "self.records, self.task, self.traj = dict(s.records), dict(s.task), dict(s.traj)",
        "self.records, self.task, self.traj = s.records, s.task, s.traj",
        ("tests/sampling/test_machine.py::test_random_event_sequences_keep_conservation_bounds_and_purity",),
    ),
    Mutation(
        "pallas_matmul_k_order_by_rows",
        "1 consistency: exact mode's Pallas kernels (K blocks fixed whatever the rows)",
        "agentjax/policy/pallas_kernels.py",
        "    bk = BK\n",
        "    bk = BK if m < 32 else 2 * BK\n",
        ("tests/policy/test_pallas_exact.py::test_row_kernels_give_a_row_the_same_bits_in_any_row_count",),
    ),
    Mutation(
        "generator_validation_skipped",
        "codefix generated tasks: every task validated before use",
        "agentjax/envs/codefix/generated/store.py",
        "else check.validate(task)",
        "else []",
        (
            "tests/envs/test_codefix_generator.py::"
            "test_validation_drops_a_reference_that_fails_and_a_bug_no_test_catches",
        ),
    ),
    Mutation(
        "spread_every_process_decides",
        "2 async on many processes: one decision maker orders the deliveries",
        "agentjax/sampling/spread.py",
        "return self.me == LEADER and self.recorded is None",
        "return self.recorded is None",
        (f"{SP}[slow1]",),
    ),
    Mutation(
        "spread_groups_split_over_processes",
        "2 async on many processes: a GRPO group is sampled whole on one process",
        "agentjax/sampling/spread.py",
        "        p = self._group.get(key)\n",
        "        p = None\n",
        (f"{SP}[even]",),
    ),
    Mutation(
        "liveness_asks_the_service_barrier",
        "2 async on many processes: a waiting process asks nothing of the others (no barrier)",
        "agentjax/sharding/exchange.py",
        "                beat = _client().key_value_try_get_bytes(self._alive(p))\n",
        "                beat = _client().get_live_nodes(list(range(self.count)))\n",
        ("tests/sampling/test_spread.py::test_a_waiting_process_never_waits_for_the_others_attention",),
    ),
    Mutation(
        "heartbeat_ignored",
        "2 async on many processes: a process whose heartbeat stops is dead",
        "agentjax/sharding/exchange.py",
        "            elif now - last[1] > self.timeout_s:\n",
        "            elif False:\n",
        ("tests/sampling/test_spread.py::test_a_peer_whose_heartbeat_stops_stops_a_waiting_process",),
    ),
    Mutation(
        "spread_batch_rows_in_holder_order",
        "2 async on many processes: the learner batch assembled from process-local rows",
        "agentjax/learner/spread_batch.py",
        "    return np.asarray(src + [pad] * (rows - len(src)), np.int32)",
        "    return np.asarray(sorted(src) + [pad] * (rows - len(src)), np.int32)",
        (
            "tests/learner/test_spread_batch.py::test_rows_staged_on_their_holders_assemble_into_one_process_batch",
        ),
    ),
    Mutation(
        "disaggregated_sampler_on_a_learner_device",
        "1 placement: disaggregated across processes (each process samples on its own devices)",
        "agentjax/sharding/placement.py",
        "        if placement.colocated:\n            return learner_params\n",
        "        return learner_params\n",
        (
            "tests/test_multiprocess.py::test_a_killed_disaggregated_run_fails_and_resumes_to_the_colocated_runs_bits",
        ),
    ),
    Mutation(
        "disaggregated_sync_skipped_across_processes",
        "1 placement: weight sync onto every process's sampler mesh",
        "agentjax/sharding/placement.py",
        "    if not placement.colocated and sampler_params is not None and step % placement.sync_every:",
        "    if not placement.colocated and sampler_params is not None and (\n"
        "        distributed or step % placement.sync_every\n"
        "    ):",
        (
            "tests/test_multiprocess.py::test_a_killed_disaggregated_run_fails_and_resumes_to_the_colocated_runs_bits",
            "tests/test_multiprocess_realtime.py::test_when_a_process_dies_the_other_stops_with_a_named_error_and_resume_finishes",
        ),
    ),
    Mutation(
        "process_local_programs_not_cached",
        "1 placement: a process other than the first caches its own sampler programs",
        "launch/compile_cache.py",
        '        if host_callbacks or not getattr(executable_devices, "is_fully_addressable", False):',
        "        if True:",
        (
            "tests/test_compile_cache.py::test_a_non_zero_process_writes_its_own_programs_only_with_the_wrapper",
        ),
    ),
    Mutation(
        "copy_rows_span_not_a_copy",
        "#30 copy pretraining (launch.make_tiny_hf --copy_steps): the trained spans repeat the context",
        "agentjax/learner/copy_rows.py",
        "            tok[i, k + 1 : k + 1 + s] = ctx[o : o + s]\n",
        "            tok[i, k + 1 : k + 1 + s] = pool[rng.integers(len(pool), size=s)]\n",
        (
            "tests/learner/test_copy_rows.py::test_each_trained_token_continues_a_span_copied_from_the_context",
        ),
    ),
    Mutation(
        "editor_edits_whole_line",
        "#30 the editor's compact edit: the shortest unique span of words, not the whole line",
        "agentjax/envs/codefix/edits.py",
        "    lo, hi = max(0, lo - 1), min(len(words) - 1, hi + 1)  # one word of context each side\n",
        "    lo, hi = 0, len(words) - 1\n",
        (
            "tests/envs/test_codefix_edit.py::"
            "test_editor_writes_the_shortest_unique_span_and_it_rewrites_the_fix_exactly",
        ),
    ),
    Mutation(
        "prompt_cut_as_an_observation",
        "the prompt keeps the context but one action (caps.max_obs_tokens cuts observations only)",
        "agentjax/sampling/episode.py",
        "        toks = self.cut(ep, self.codec.prompt(obs), self.prompt_width)\n",
        "        toks = self.cut(ep, self.codec.prompt(obs))\n",
        (
            "tests/sampling/test_prompt_width.py::test_a_prompt_longer_than_an_observation_reaches_the_model_whole_on_both_drivers",
        ),
    ),
    Mutation(
        "warm_start_rows_uncut",
        "the warm start's rows cut prompt and observations by the rollout's rule (caps)",
        "agentjax/learner/sft.py",
        "            if widths is not None:\n",
        "            if False:\n",
        (
            "tests/sampling/test_prompt_width.py::test_warm_start_rows_cut_prompt_and_observations_like_the_rollout",
        ),
    ),
    Mutation(
        "loop_warm_start_rows_uncut",
        "launch.train's warm start cuts its rows as the rollout cuts its inputs (caps)",
        "agentjax/run/loop.py",
        "    return demo_rows(episodes, codec, max_seq_len, input_widths(caps, max_seq_len))\n",
        "    return demo_rows(episodes, codec, max_seq_len)\n",
        (
            "tests/sampling/test_prompt_width.py::test_the_training_loops_warm_start_rows_match_the_rollouts_inputs",
        ),
    ),
    Mutation(
        "audit_unavailable_crashes",
        "a task the codefix audit cannot build cases for is an unaudited pass, not a crash",
        "agentjax/envs/codefix/audit.py",
        "    except api.TaskInvalid as e:\n",
        "    except ZeroDivisionError as e:\n",
        (
            "tests/envs/test_codefix_audit.py::"
            "test_a_task_without_audit_cases_is_an_unaudited_pass_not_a_crash",
        ),
    ),
    Mutation(
        "report_calls_every_eval_held_out",
        "the report names the set the run evaluates (eval_set) in every section",
        "agentjax/report/common.py",
        '    return header.get("eval_set") or "held-out"\n',
        '    return "held-out"\n',
        ("tests/diagnostics/test_report.py::test_every_section_names_the_set_the_run_evaluates",),
    ),
    Mutation(
        "empty_batch_still_steps_adam",
        "a batch whose gradient is exactly zero is no optimiser step (optim.empty_batches='skip')",
        "agentjax/learner/step.py",
        "    empty = (norm == 0) if skip_empty else jnp.zeros((), bool)\n",
        "    empty = jnp.zeros((), bool)\n",
        (
            "tests/test_features.py::test_batches_with_no_signal_leave_the_policy_where_it_is[skip]",
            "tests/learner/test_step.py::test_a_batch_with_no_signal_is_no_optimiser_step[skip]",
        ),
    ),
    Mutation(
        "demo_term_left_out_of_the_gradient",
        "loss.demo_coef adds the demonstrations' NLL to every RL update's gradient",
        "agentjax/learner/step.py",
        "        grads = jax.tree.map(lambda g, d: g + coef * d.astype(g.dtype), grads, d_grads)\n",
        "        grads = grads\n",
        ("tests/test_features.py::test_the_demonstration_term_trains_where_every_advantage_is_zero",),
    ),
    Mutation(
        "demo_rows_lost_on_resume",
        "a resumed run trains on the same demonstration rows (loss.demo_coef)",
        "agentjax/run/loop.py",
        "        demos = dict(np.load(files.demos)) if run.loss.demo_coef else None\n",
        "        demos = None\n",
        ("tests/test_system.py::test_critic_gae_reference_kl_and_demonstrations_train_and_resume_exactly",),
    ),
    Mutation(
        "first_step_state_left_unplaced",
        "a run (fresh or resumed) compiles its learner step once",
        "agentjax/sharding/multihost.py",
        "    on_mesh = set(mesh.devices.flat)\n",
        "    if not is_distributed():\n        return tree\n    on_mesh = set(mesh.devices.flat)\n",
        ("tests/test_system.py::test_critic_gae_reference_kl_and_demonstrations_train_and_resume_exactly",),
    ),
    Mutation(
        "warm_start_counter_left_uncommitted",
        "the warm start compiles its step once",
        "agentjax/learner/sft.py",
        "    opt = onto_mesh_of(tx.init(params), params)",
        "    opt = tx.init(params)",
        ("tests/test_system.py::test_critic_gae_reference_kl_and_demonstrations_train_and_resume_exactly",),
    ),
    Mutation(
        "fresh_sampler_state_left_unplaced",
        "a sampler compiles its prefill once (a fresh state and a used one share the program)",
        "agentjax/sampling/sampler.py",
        "state if isinstance(state.tokens.sharding, NamedSharding) else onto_mesh_of(state, params),",
        "state,",
        (
            "tests/sampling/test_sampler.py::test_a_fresh_state_extends_with_the_program_every_later_extend_runs[shape1-29]",
        ),
    ),
    Mutation(
        "fresh_sampler_status_weakly_typed",
        "a sampler compiles its prefill once (a fresh state and a used one share the program)",
        "agentjax/sampling/sampler.py",
        "int(Status.STOPPED), jnp.int32)",
        "Status.STOPPED, jnp.int32)",
        (
            "tests/sampling/test_sampler.py::test_a_fresh_state_extends_with_the_program_every_later_extend_runs[shape1-29]",
        ),
    ),
)
