"""The learner as a value: :class:`LearnerState` and the pure :func:`learner_step`.

``learner_step(parts, state, train) -> (state, weights, metrics)`` turns the scheduler's Train
command (a batch of completed trajectories) into the next state: the jitted train step, the kept
parameter versions (behaviour-version recompute), the noise curriculum's move. It changes
nothing it is given. The effects of a step (the weight sync onto the sampler's mesh, the
publish to the rollout worker, wall-clock measurement) belong to the loop's
:class:`~agentjax.run.loop.LearnerJob`.

The fault rates live in the curriculum's state (``env_rates``): each step's :class:`Weights`
carries the rates that new episodes get from then on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agentjax.learner import versions as pv
from agentjax.learner.batching import make_batch
from agentjax.learner.spread_batch import spread_batch
from agentjax.policy.config import ModelConfig
from agentjax.run import loopparts
from agentjax.run.config import RunConfig
from agentjax.sampling.precision import to_sampler
from agentjax.sharding import multihost
from agentjax.trajectory import Trajectory


@dataclasses.dataclass(frozen=True)
class LearnerParts:
    """What a learner step is built from (functions of the config and the placement)."""

    run: RunConfig
    model: ModelConfig
    mesh: Any  # the learner mesh: batch rows split over its data x fsdp axes
    tx: Any  # the optax optimizer
    train_step: Callable
    kept_versions: int  # parameter versions kept for the behaviour-version recompute (0: none)
    curriculum: Any  # the noise curriculum (init, update), or None
    rows: int  # rows of the learner batch (one compiled shape)
    spread: bool = False  # trajectories stay on their processes: the batch is built from local rows


@dataclasses.dataclass(frozen=True)
class LearnerState:
    """The learner between steps: train state, the version it is at, the frozen reference policy
    (``loss.kl_coef`` > 0), the kept versions' parameters, the curriculum's state."""

    train: Any  # learner.step.TrainState
    version: int
    ref_params: Any = None
    kept: Mapping[int, Any] = dataclasses.field(default_factory=dict)
    curriculum: Any = None  # envs.curriculum.CurriculumState, or None
    demos: Any = None  # the warm start's rows (host arrays) for loss.demo_coef, or None


@dataclasses.dataclass(frozen=True)
class Weights:
    """What a step publishes: the sampler-precision parameters of ``version`` and the fault rates
    new episodes get."""

    version: int
    params: Any
    env_rates: dict


def init_state(parts: LearnerParts, train, version: int, ref_params=None, demos=None) -> LearnerState:
    """The learner at ``version`` with ``train`` (fresh or restored): only ``version`` is kept."""
    kept = pv.keep({}, version, train.params, oldest=version) if parts.kept_versions else {}
    cur = parts.curriculum.init() if parts.curriculum is not None else None
    return LearnerState(train, version, ref_params, kept, cur, demos)


def demo_batch(parts: LearnerParts, state: LearnerState):
    """The ``loss.demo_rows`` demonstration rows step ``state.version`` trains on (None without
    ``loss.demo_coef``): consecutive rows of one seeded permutation, so every row comes in turn
    and a resumed run picks the same ones."""
    if state.demos is None:
        return None
    n, k = len(state.demos["tokens"]), parts.run.loss.demo_rows
    order = np.random.default_rng(parts.run.seed).permutation(n)
    idx = order[(state.version * k + np.arange(k)) % n]
    return multihost.shard_batch({name: v[idx] for name, v in state.demos.items()}, parts.mesh)


def env_rates(parts: LearnerParts, state: LearnerState) -> dict:
    """The fault rates in force: the curriculum's (once it has moved), else the run's initial."""
    if state.curriculum is None:
        return loopparts.initial_rates(parts.run)
    return dict(state.curriculum.rates)


def weights(parts: LearnerParts, state: LearnerState) -> Weights:
    return Weights(state.version, to_sampler(state.train.params, parts.run.sampler), env_rates(parts, state))


def learner_step(parts: LearnerParts, state: LearnerState, train) -> tuple[LearnerState, Weights, dict]:
    """One learner step on ``train.batch`` (the scheduler's Train command); returns the next
    state, the weights to publish and the step's metrics."""
    run, batch = parts.run, train.batch
    trajs: list[Trajectory] = [c.trajectory for c in batch]
    ws, fm = loopparts.fingerprint_weights(run, trajs, [c.weight for c in batch])
    host, arrays, bm = _batch(parts, trajs, ws)
    cur, cm = _curriculum_step(parts, state.curriculum, trajs)
    if not run.sampler.replay_routes and "routes" in arrays:  # R3 off: measured, not replayed
        arrays["sampler_routes"] = arrays.pop("routes")
    behaviour = None
    if parts.kept_versions:  # this process's rows (every row on one process)
        pv.check_covered(state.kept, host["behaviour_version"], host["loss_mask"])
        behaviour = pv.slots(state.kept, parts.kept_versions, fallback=state.train.params)
    new_train, m = parts.train_step(
        state.train, arrays, state.ref_params, behaviour, demo_batch(parts, state)
    )
    new = state.version + 1
    kept = state.kept
    if parts.kept_versions:
        kept = pv.keep(kept, new, new_train.params, oldest=new - parts.kept_versions + 1)
    out = dataclasses.replace(state, train=new_train, version=new, kept=kept, curriculum=cur)
    gaps = [int(state.version - t.versions.min()) for t in trajs if t.num_action_tokens]
    metrics = {
        "step": new,
        **{k: float(v) for k, v in m.items()},
        **bm,
        **fm,
        **cm,
        "labels": _count(t.label for t in trajs),
        "classes": _count(t.task_class for t in trajs),
        "version_gap_mean": float(np.mean(gaps)) if gaps else 0.0,
        "version_gap_max": int(max(gaps)) if gaps else 0,
        "weights_mean": float(np.mean([c.weight for c in batch])),
        **train.sampling,  # dynamic sampling's account when the batch was formed
        "virtual_time": float(train.time),
    }
    return out, weights(parts, out), metrics


def _batch(parts: LearnerParts, trajs: list[Trajectory], ws: list[float]):
    """``(host rows, global arrays, metrics)`` of the learner batch. Data parallel: rows split over
    the learner mesh's data and fsdp axes (every process's devices). Every process holds every
    trajectory (one process, or the virtual clock's exchange): it builds the whole batch and
    places its shards. Trajectories left on their processes (``spread``): each process stages
    its own rows and the devices assemble the batch (:mod:`agentjax.learner.spread_batch`)."""
    kw = dict(
        rows=parts.rows,
        length=parts.model.max_seq_len,
        advantage=parts.run.loss.advantage,
        rewards=loopparts.batch_rewards(parts.run, trajs),
    )
    if parts.spread:
        return spread_batch(trajs, ws, mesh=parts.mesh, **kw)
    host, bm = make_batch(trajs, ws, **kw)
    return host, multihost.shard_batch(host, parts.mesh), bm


def _curriculum_step(parts: LearnerParts, state, trajs) -> tuple[Any, dict]:
    """Moves the noise curriculum once per step; new episodes get the new rates."""
    if parts.curriculum is None:
        return state, {}
    state = parts.curriculum.update(state, loopparts.success(trajs))
    return state, {
        "curriculum/level": float(state.level),
        **{f"curriculum/rate/{k}": float(v) for k, v in state.rates.items()},
    }


def _count(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[str(x)] = out.get(str(x), 0) + 1
    return out
