"""The run's composition: what one run is built from, before any training.

``build(run)`` checks the task against the model and returns :class:`Parts` (the task suite and
the policy, pure functions of the config); ``compose(parts)`` adds the placement, the samplers,
the learner's step (:class:`~agentjax.run.learner.LearnerParts`) and the rollout worker, built
whole (:func:`make_worker`). Nothing here is assigned after construction: the values are frozen,
the worker's and the learner job's state changes only through their own methods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import grain
import jax

from agentjax import tasks
from agentjax.diagnostics.evaluate import evaluate
from agentjax.learner import versions as pv
from agentjax.learner.step import make_optimizer, make_train_step
from agentjax.policy.config import ModelConfig
from agentjax.run import config as runconfig
from agentjax.run import loopparts
from agentjax.run.learner import LearnerParts
from agentjax.sampling.context import make_context_policy
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool, RealLatency
from agentjax.sampling.precision import sampler_model
from agentjax.sampling.queue import Clock
from agentjax.sampling.sampler import Sampler
from agentjax.sampling.transforms import Greedy, Temperature
from agentjax.sampling.worker import SamplerWorker
from agentjax.sharding import multihost
from agentjax.sharding.exchange import Exchange
from agentjax.sharding.placement import Placement, make_placement
from agentjax.tasks import model as task_model

EVAL_SEED = 10_000  # held-out evaluation's episode seeds (launch.eval uses the same)


@dataclasses.dataclass(frozen=True)
class Parts:
    """What one run is built from (pure functions of the config): the task suite and the policy."""

    run: runconfig.RunConfig
    suite: tasks.TaskSuite
    policy: task_model.Policy

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

    def make_env(self, rates: Mapping[str, float]) -> Any:
        """A training episode's environment, injecting the fault ``rates`` in force when the
        episode starts (a value: the noise curriculum's state publishes new ones with the
        weights, :func:`agentjax.run.learner.env_rates`)."""
        env = loopparts.NoisyEnv(self.suite.make_env(), dict(rates)) if rates else self.suite.make_env()
        scale = self.run.scheduler.env_latency_scale
        return RealLatency(env, scale) if scale else env

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
    return parts


def task_dataset(parts: Parts) -> grain.MapDataset:
    """GRPO groups as a grain dataset (:meth:`TaskSuite.train_item`). Its iterator state
    checkpoints with the run (exact resume)."""
    return grain.MapDataset.range(1 << 40).map(parts.suite.train_item)


@dataclasses.dataclass(frozen=True)
class Composed:
    """A run's machinery: placement, samplers, the learner's step and the rollout worker."""

    parts: Parts
    placement: Placement
    sampler: Sampler  # the training sampler (its precision: ``sampler.*``)
    greedy: Sampler  # held-out evaluation
    learner: LearnerParts
    worker: SamplerWorker
    exchange: Exchange | None = None  # several processes: evaluation's split, the bytes' count


def spreads(run: runconfig.RunConfig) -> bool:
    """Whether finished trajectories stay on the process that sampled them (several processes
    on the real clock: :mod:`agentjax.sampling.spread`); else every process holds them all
    (one process, or several on the virtual clock, which exchange them)."""
    return multihost.is_distributed() and run.scheduler.clock == Clock.REAL


def compose(parts: Parts) -> Composed:
    """Places the run on the devices there are and builds its samplers, learner and worker;
    a mesh or batch that does not fit fails here, naming the fields, before any work."""
    run = parts.run
    placement = _placement(run)
    transform = None if run.rl.temperature == 1.0 else Temperature(run.rl.temperature)
    # Each side gets the mesh its arrays live on: exact mode's Pallas kernels run in a shard_map
    # over it (Mosaic cannot partition a kernel traced off the mesh). On several processes the
    # training sampler gets a whole copy of the parameters (placement.sync_weights): colocated on
    # the process's first device (no mesh), disaggregated on the process's own sampler mesh;
    # held-out evaluation samples on the first device.
    distributed = multihost.is_distributed()
    s_mesh = None if distributed and placement.colocated else placement.sampler_mesh
    sampler = Sampler(
        sampler_model(parts.model, run.sampler),
        transform=transform,
        stop_tokens=(parts.codec.stop,),
        mesh=s_mesh,
    )
    tx = make_optimizer(run.optim)
    learner = LearnerParts(
        run=run,
        model=parts.model,
        mesh=placement.learner_mesh,
        tx=tx,
        train_step=make_train_step(
            parts.model,
            run.loss,
            tx,
            transform=transform,
            grad_accum=run.optim.grad_accum,
            minibatches=run.optim.minibatches,
            empty_batches=run.optim.empty_batches,
            mesh=placement.learner_mesh,
        ),
        # learner parameters of recent versions, for log-probs at each token's behaviour version
        kept_versions=(
            pv.slot_count(run.admission.max_version_gap, run.placement.sync_every)
            if "train_v" in run.loss.needs
            else 0
        ),
        curriculum=loopparts.make_curriculum(run.curriculum),
        rows=learner_rows(run),
        spread=spreads(run),
    )
    greedy = Sampler(
        parts.model,
        transform=Greedy(),
        stop_tokens=(parts.codec.stop,),
        mesh=None if distributed else placement.sampler_mesh,
    )
    exchange = Exchange.of_jax(run.placement.peer_timeout_s) if multihost.is_distributed() else None
    worker = make_worker(run, parts, sampler, None if spreads(run) else exchange)
    return Composed(parts, placement, sampler, greedy, learner, worker, exchange)


def _placement(run: runconfig.RunConfig) -> Placement:
    try:  # the mesh sizes against the devices there are (before any work)
        placement = make_placement(
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
    mesh = placement.learner_mesh.shape
    split = mesh.get("data", 1) * mesh.get("fsdp", 1)
    for what, rows in (
        ("the learner batch's", learner_rows(run)),  # rl.batch_size (x turns: context policy)
        ("warm_start.batch_size's", run.warm_start.batch_size if run.warm_start.steps else 0),
        ("loss.demo_rows'", run.loss.demo_rows if run.loss.demo_coef else 0),
    ):
        if rows % split:
            raise runconfig.ConfigError(
                f"{what} {rows} rows must split evenly over placement.learner_mesh data x "
                f"fsdp = {split} (data parallel): pick a multiple of {split}"
            )
    return placement


def make_worker(
    run: runconfig.RunConfig, parts: Parts, sampler, exchange: Exchange | None = None
) -> SamplerWorker:
    """The run's rollout worker, built whole: the slot engine and its environment pool when
    ``scheduler.engine_slots`` > 0 (same trajectories as lock-step in exact mode), and
    ``exchange`` (several processes on the virtual clock) through which each samples its share of
    every call's rounds.
    Its environments start with the run's initial fault rates; each publish brings the rates in
    force from then on."""
    engine = pool = None
    if run.scheduler.engine_slots:
        engine = Engine(sampler, run.scheduler.engine_slots, run.scheduler.engine_chunk)
        pool = EnvPool(run.scheduler.env_workers, run.scheduler.env_pool)
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
        env_rates=loopparts.initial_rates(run),
    )


def learner_rows(run: runconfig.RunConfig) -> int:
    """Rows of the learner batch (one compiled shape): under ``keep_all`` an episode is one row;
    a context policy that rewrites the context makes each turn its own row (``to_rows``), and an
    episode has at most ``caps.max_tool_calls`` turns."""
    per_episode = 1 if run.context.policy == "keep_all" else run.caps.max_tool_calls
    return run.rl.batch_size * per_episode


def evaluate_policy(parts: Parts, sampler, params, version: int, exchange=None) -> dict:
    """``params`` on the run's held-out tasks with ``sampler``, with the run's judges and episode
    seeds: the training loop's own evaluation and ``launch.eval``'s both call it, so a checkpoint
    evaluated offline reproduces the run's figure. Several processes: each evaluates its share."""
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


def evaluate_heldout(c: Composed, params, version: int) -> dict:
    """The training loop's held-out evaluation (greedy, every process its share)."""
    return evaluate_policy(c.parts, c.greedy, params, version, exchange=c.exchange)
