"""Sampling: the jitted sampler, transforms, partial rollout, multi-turn rollout, scheduler.

The scheduler is a pure state machine (``machine.make(...) -> Machine(spec, init, step)``,
:mod:`agentjax.sampling.schedstate` for its values) driven by :class:`Scheduler`, which owns an
executor: :class:`SimulatedExecutor` / :class:`BatchingExecutor` (the virtual clock),
:class:`ThreadedExecutor` and :class:`RealtimeExecutor` (the wall clock), :class:`ReplayExecutor`
(a recorded real-time run again). :class:`SamplerWorker` runs the rounds with the real sampler.

    from agentjax.sampling import Sampler, Temperature, TopK, compose, take
    sampler = Sampler(config, transform=compose(Temperature(0.7), TopK(20)), stop_tokens=(eos,))
    state = sampler.extend(params, sampler.init(batch), prompts, lengths, version=0)
    state, span = sampler.generate(params, state, row_keys, max_new_tokens=32, version=0)
    records = take(state, span)   # per row: tokens, logp, logp_raw, version (and routes for MoE)

Pass one key per row (``row_keys: [B]``) for a row's tokens to be independent of its batch-mates
and of its row index; a single key is split over rows, so row i's stream depends on i.
"""

from agentjax.sampling import machine
from agentjax.sampling.clock import SimulatedExecutor, ThreadedExecutor
from agentjax.sampling.engine import Engine
from agentjax.sampling.engine_rollout import EngineRollout
from agentjax.sampling.envpool import EnvPool, EnvPoolKind, RealLatency, pool_stats
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.partial import ResumeMode, mixed_version, resume, version_segments
from agentjax.sampling.queue import Caps
from agentjax.sampling.realtime import RealtimeExecutor
from agentjax.sampling.replay import ReplayExecutor
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.runlog import RunLog, SchedulerConfig
from agentjax.sampling.sampler import Sampler, SamplerState, Span, Status, take
from agentjax.sampling.schedstate import Async, SchedulerState, Sync, Train, WindowedFifo
from agentjax.sampling.scheduler import Scheduler
from agentjax.sampling.staleness import StalenessConfig
from agentjax.sampling.transforms import Chain, Greedy, Temperature, TopK, TopP, compose
from agentjax.sampling.worker import BatchingExecutor, SamplerWorker

__all__ = [
    "Async",
    "BatchingExecutor",
    "RealtimeExecutor",
    "ReplayExecutor",
    "RunLog",
    "SamplerWorker",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerState",
    "SimulatedExecutor",
    "StalenessConfig",
    "Sync",
    "ThreadedExecutor",
    "Train",
    "WindowedFifo",
    "machine",
    "Caps",
    "Chain",
    "Engine",
    "EngineRollout",
    "EnvPool",
    "EpisodeSpec",
    "Greedy",
    "EnvPoolKind",
    "RealLatency",
    "ResumeMode",
    "Rollout",
    "Sampler",
    "SamplerState",
    "Span",
    "Status",
    "Temperature",
    "TopK",
    "TopP",
    "compose",
    "mixed_version",
    "pool_stats",
    "resume",
    "take",
    "version_segments",
]
