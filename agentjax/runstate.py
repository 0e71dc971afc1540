"""One run's parts and mutable state: what ``system.train`` composes, and the learner job the
scheduler's Train command starts.

(One module, over 300 lines: ``Parts`` and ``RunState`` are the state the learner callback
mutates; the held-out evaluation reads it. The progress line and the summary: ``runsummary``.)

``Parts`` (the task suite and the policy, pure functions of the config), ``RunState`` (the learner
callback, journal, curriculum, sampler weights) and the held-out evaluation. ``system.py`` is the
composition root that drives them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import grain
import jax
import numpy as np

from agentjax import loopparts, runconfig, tasks
from agentjax.diagnostics.evaluate import evaluate
from agentjax.learner import versions as pv
from agentjax.learner.batching import make_batch
from agentjax.learner.journal import Journal
from agentjax.learner.step import make_optimizer, make_train_step
from agentjax.policy.config import ModelConfig
from agentjax.sampling.context import make_context_policy
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool, RealLatency
from agentjax.sampling.precision import sampler_model, to_sampler
from agentjax.sampling.sampler import Sampler
from agentjax.sampling.transforms import Greedy, Temperature
from agentjax.sampling.worker import SamplerWorker
from agentjax.sharding import multihost
from agentjax.sharding.exchange import Exchange
from agentjax.sharding.placement import SyncStats, make_placement, sync_weights
from agentjax.tasks import model as task_model
from agentjax.trajectory import Trajectory

EVAL_SEED = 10_000  # held-out evaluation's episode seeds (launch.eval uses the same)


@dataclasses.dataclass
class Parts:
    """What one run is built from (pure functions of the config): the task suite and the policy."""

    run: runconfig.RunConfig
    suite: tasks.TaskSuite
    policy: task_model.Policy
    fault_rates: dict = dataclasses.field(default_factory=dict)  # the rates new episodes get now

    @property
    def model(self) -> ModelConfig:
        return self.policy.config

    @property
    def tokenizer(self):
        return self.policy.tokenizer

    @property
    def codec(self):
        return self.policy.codec

    @property
    def heldout(self) -> list:
        return self.suite.heldout

    @property
    def make_env(self) -> Callable[[], Any]:
        """Training episodes' environment: with injected faults when the config asks for them
        (``fault_rates`` is read at each episode's start, so the noise curriculum moves it)."""
        make = (
            loopparts.noisy(self.suite.make_env, self.fault_rates)
            if self.fault_rates
            else self.suite.make_env
        )
        scale = self.run.scheduler.env_latency_scale
        return (lambda: RealLatency(make(), scale)) if scale else make

    @property
    def make_eval_env(self) -> Callable[[], Any]:
        return self.suite.make_env  # held-out evaluation: never injected faults


def build(run: runconfig.RunConfig) -> Parts:
    """The task suite and the policy; a HF directory's files are all checked here (before training)."""
    suite = tasks.make(run)
    parts = Parts(run, suite, task_model.build(run.model, suite))
    env = suite.make_env()
    shortest = min(len(parts.codec.prompt(env.reset(t, 0))) for t in suite.heldout)
    if hasattr(env, "close"):
        env.close()
    if parts.model.max_seq_len < shortest + run.caps.max_action_tokens:  # no room for one whole action
        raise runconfig.ConfigError(
            f"model.max_seq_len={parts.model.max_seq_len} is too small for any episode: the shortest task "
            f"prompt is {shortest} tokens and one action up to caps.max_action_tokens="
            f"{run.caps.max_action_tokens}; must be >= {shortest + run.caps.max_action_tokens}"
        )
    parts.fault_rates.update(loopparts.initial_rates(run))  # moved in place by the curriculum
    return parts


def task_dataset(parts: Parts) -> grain.MapDataset:
    """GRPO groups as a grain dataset (:meth:`TaskSuite.train_item`). Its iterator state
    checkpoints with the run (exact resume)."""
    return grain.MapDataset.range(1 << 40).map(parts.suite.train_item)


class RunState:
    """Mutable run state: the learner job (the scheduler only sees version numbers), the journal,
    the curriculum. ``system.train`` owns one per run."""

    def __init__(self, parts: Parts, workdir: str, log: Callable[[str], None]):
        self.parts, self.workdir, self.log = parts, workdir, log
        run = parts.run
        try:  # the mesh sizes against the devices there are (before any work)
            self.placement = make_placement(
                run.placement.kind,
                {k: v for k, v in run.placement.learner_mesh.items() if v},
                {k: v for k, v in run.placement.sampler_mesh.items() if v},
                sync_every=run.placement.sync_every,
                devices=jax.devices(),
            )
        except ValueError as e:
            p = run.placement
            raise runconfig.ConfigError(
                f"placement.learner_mesh={p.learner_mesh}, placement.sampler_mesh={p.sampler_mesh} "
                f"do not fit the {jax.device_count()} devices: {e}"
            ) from None
        mesh = self.placement.learner_mesh.shape
        split = mesh.get("data", 1) * mesh.get("fsdp", 1)
        for what, rows in (
            ("the learner batch's", learner_rows(run)),  # rl.batch_size (x turns: context policy)
            ("warm_start.batch_size's", run.warm_start.batch_size if run.warm_start.steps else 0),
        ):
            if rows % split:
                raise runconfig.ConfigError(
                    f"{what} {rows} rows must split evenly over placement.learner_mesh data x "
                    f"fsdp = {split} (data parallel): pick a multiple of {split}"
                )
        self.sync = SyncStats()
        self.tx = make_optimizer(run.optim)
        transform = None if run.rl.temperature == 1.0 else Temperature(run.rl.temperature)
        self.sampler = Sampler(
            sampler_model(parts.model, run.sampler), transform=transform, stop_tokens=(parts.codec.stop,)
        )
        self.greedy = Sampler(parts.model, transform=Greedy(), stop_tokens=(parts.codec.stop,))
        self.train_step = make_train_step(
            parts.model,
            run.loss,
            self.tx,
            transform=transform,
            grad_accum=run.optim.grad_accum,
            minibatches=run.optim.minibatches,
        )
        # learner parameters of recent versions, for log-probs at each token's behaviour version
        self.slots = (
            pv.slot_count(run.admission.max_version_gap, run.placement.sync_every)
            if "train_v" in run.loss.needs
            else 0
        )
        self.kept: dict = {}
        self.train_wall = 0.0  # measured learner step seconds (cost ledger)
        self.journal = Journal(os.path.join(workdir, "journal.bin"))
        self.writer = jax.process_index() == 0  # several processes: process 0 writes the files
        self.metrics_path = os.path.join(workdir, "metrics.jsonl")
        self.state = None
        self.ref_params = None  # the frozen reference policy (the warm start) when loss.kl_coef > 0
        self.sampler_params = None
        self.rows: list[dict] = []
        self.wall0 = time.perf_counter()
        self.index_base = 0  # submissions before a real-time resume (journal submit indices)
        self._journaled: set[int] = set()
        self.curriculum, self.curriculum_state = loopparts.make_curriculum(run.curriculum), None
        self.journal_count = 0  # records in the journal (the checkpoint's "journaled")
        self.sampler_version = 0
        self.worker = make_worker(run, parts, self.sampler)

    def on_mesh(self, state):
        """``state`` with its process-local leaves (step counter, rng, optimizer counts) placed on
        the learner mesh under ``jax.distributed``; as it is otherwise."""
        return multihost.globalize(state, self.placement.learner_mesh)

    def attach(self, version: int, journaled) -> None:
        """Starts a scheduler run (fresh or restored) at ``version``: publishes the learner's
        current weights to the sampler as that version; the submissions in ``journaled`` (the
        trajectories the scheduler already holds) count as journaled."""
        run = self.parts.run
        weights = to_sampler(self.state.params, run.sampler)
        self.sampler_params = multihost.local_view(
            sync_weights(self.placement, weights, None, version, self.sync)
        )
        if self.slots:
            self.kept = pv.keep({}, version, self.state.params, oldest=version)
        self.sampler_version = version
        self.worker.publish(version, self.sampler_params)
        self._journaled = set(journaled)

    # -- learner, a job the scheduler's Train command starts -----------------------------------
    def learner(self, version: int, train) -> int:
        """One learner step on ``train.batch`` (the scheduler's Train command) from ``version``;
        returns the new version."""
        run, batch = self.parts.run, train.batch
        trajs: list[Trajectory] = [c.trajectory for c in batch]
        weights, fm = loopparts.fingerprint_weights(run, trajs, [c.weight for c in batch])
        arrays, bm = make_batch(
            trajs,
            weights,
            rows=learner_rows(run),
            length=self.parts.model.max_seq_len,
            advantage=run.loss.advantage,
            rewards=loopparts.batch_rewards(run, trajs),
        )
        bm = {**bm, **fm, **self.curriculum_step(trajs)}
        if not run.sampler.replay_routes and "routes" in arrays:  # R3 off: measured, not replayed
            arrays["sampler_routes"] = arrays.pop("routes")
        # data parallel: rows split over the learner mesh's data and fsdp axes (every process's
        # devices); the same split whether the mesh spans one process or several
        arrays = multihost.shard_batch(arrays, self.placement.learner_mesh)
        behaviour = None
        if self.slots:
            pv.check_covered(self.kept, arrays["behaviour_version"], arrays["loss_mask"])
            behaviour = pv.slots(self.kept, self.slots, fallback=self.state.params)
        t0 = time.perf_counter()
        self.state, m = self.train_step(self.state, arrays, self.ref_params, behaviour)
        jax.block_until_ready(self.state.step)  # measured: the ledger's training cost
        self.train_wall += time.perf_counter() - t0
        new = version + 1
        if self.slots:
            self.kept = pv.keep(self.kept, new, self.state.params, oldest=new - self.slots + 1)
        synced = self.sync.syncs
        self.sampler_params = multihost.local_view(
            sync_weights(
                self.placement,
                to_sampler(self.state.params, run.sampler),
                self.sampler_params,
                new,
                self.sync,
            )
        )
        if self.placement.colocated or self.sync.syncs > synced:
            self.sampler_version = new  # else the sampler keeps older weights (sync_every > 1)
        self.worker.publish(
            new,
            self.sampler_params,
            keep_from=new - run.admission.max_version_gap - 1,
            behaviour_version=self.sampler_version,
        )
        gaps = [int(version - t.versions.min()) for t in trajs if t.num_action_tokens]
        row = {
            "step": new,
            **{k: float(v) for k, v in m.items()},
            **bm,
            "labels": dict(_count(t.label for t in trajs)),
            "classes": dict(_count(t.task_class for t in trajs)),
            "version_gap_mean": float(np.mean(gaps)) if gaps else 0.0,
            "version_gap_max": int(max(gaps)) if gaps else 0,
            "weights_mean": float(np.mean([c.weight for c in batch])),
            **train.sampling,  # dynamic sampling's account when the batch was formed
            "virtual_time": float(train.time),
            "wall": time.perf_counter() - self.wall0,
        }
        self.rows.append(row)
        return new

    def curriculum_step(self, trajs) -> dict:
        """Moves the noise curriculum once per step; new episodes get the new rates."""
        if self.curriculum is None:
            return {}
        if self.curriculum_state is None:
            self.curriculum_state = self.curriculum.init()
        self.curriculum_state = self.curriculum.update(self.curriculum_state, loopparts.success(trajs))
        self.parts.fault_rates.clear()
        self.parts.fault_rates.update(self.curriculum_state.rates)
        return {
            "curriculum/level": float(self.curriculum_state.level),
            **{f"curriculum/rate/{k}": float(v) for k, v in self.curriculum_state.rates.items()},
        }

    def journal_rounds(self, finished):
        """Appends every newly completed trajectory of ``finished`` ((index, trajectory) pairs)
        to the crash-safe journal."""
        done = [t for i, t in finished if i not in self._journaled]
        self._journaled.update(t.submit_index for t in done)
        if self.index_base:  # a resumed real-time run's scheduler counts from 0 again
            done = [dataclasses.replace(t, submit_index=t.submit_index + self.index_base) for t in done]
        if self.writer:
            self.journal.append(done)
        self.journal_count += len(done)


def make_worker(run: runconfig.RunConfig, parts: Parts, sampler) -> SamplerWorker:
    """The run's rollout worker, built whole: the slot engine and its environment pool when
    ``scheduler.engine_slots`` > 0 (same trajectories as lock-step in exact mode), and with
    several processes the exchange through which each samples its share of every call's rounds."""
    engine = pool = exchange = None
    if run.scheduler.engine_slots:
        engine = Engine(sampler, run.scheduler.engine_slots, run.scheduler.engine_chunk)
        pool = EnvPool(run.scheduler.env_workers, run.scheduler.env_pool)
    if multihost.is_distributed():
        exchange = Exchange.of_jax(run.placement.peer_timeout_s)
    return SamplerWorker(
        sampler,
        parts.codec,
        run.caps,
        parts.make_env,
        rng=jax.random.key(run.seed + 1),
        gen_seconds_per_token=run.scheduler.gen_seconds_per_token,
        context=make_context_policy(run.context.policy, run.context.arg),
        engine=engine,
        pool=pool,
        exchange=exchange,
    )


def learner_rows(run: runconfig.RunConfig) -> int:
    """Rows of the learner batch (one compiled shape): under ``keep_all`` an episode is one row;
    a context policy that rewrites the context makes each turn its own row (``to_rows``), and an
    episode has at most ``caps.max_tool_calls`` turns."""
    per_episode = 1 if run.context.policy == "keep_all" else run.caps.max_tool_calls
    return run.rl.batch_size * per_episode


def _count(xs):
    out: dict = {}
    for x in xs:
        out[str(x)] = out.get(str(x), 0) + 1
    return out


def evaluate_policy(parts: Parts, sampler, params, version: int, exchange=None) -> dict:
    """``params`` on the run's held-out tasks with ``sampler``, with the run's judges and episode
    seeds: the training loop's own evaluation and ``launch.eval``'s both call it, so a checkpoint
    evaluated offline reproduces the run's figure."""
    return evaluate(
        sampler,
        parts.codec,
        parts.run.caps,
        params,
        version,
        parts.heldout,
        parts.make_eval_env,
        audit_fn=parts.suite.audit_fn,
        planted=parts.suite.planted,
        seed=EVAL_SEED,
        exchange=exchange,
    )


def evaluate_heldout(r: RunState, params, version: int) -> dict:
    # several processes: each evaluates its share
    return evaluate_policy(r.parts, r.greedy, params, version, exchange=r.worker.exchange)
