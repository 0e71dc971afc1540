"""A simulated rollout worker and a long-tailed workload, for the virtual clock.

A simulated task is a list of turns; each turn generates ``gen_tokens`` action tokens (at
``token_time`` seconds each) and then runs one environment step of ``env_time`` seconds that
returns ``obs_tokens`` observation tokens. The last step is the verifier's verdict. Token ids and
log-probs are a deterministic function of (task seed, turn, token position, policy version), so a
trajectory records exactly which version produced which token.

:class:`SimState` is the abstract resumable state of a paused rollout (the position and what was
generated so far); the real sampler supplies its own (with a KV cache) through the same
:class:`~agentjax.sampling.queue.RolloutWorker` interface.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import numpy as np

from agentjax.envs.protocol import Label
from agentjax.sampling.queue import RoundResult, WorkItem
from agentjax.trajectory import StopReason, Trajectory, Turn

VOCAB = 1000
_M64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class SimTurn:
    gen_tokens: int
    env_time: float
    obs_tokens: int


@dataclasses.dataclass(frozen=True)
class SimTask:
    task_id: str
    task_class: str
    seed: int
    turns: tuple[SimTurn, ...]
    token_time: float = 0.05  # seconds per generated token
    prefill_time: float = 0.0005  # seconds per context token re-prefilled on a "recompute" resume
    prompt_tokens: int = 16
    label: Label = Label.PASS

    @property
    def duration(self) -> float:
        """Seconds of one uninterrupted rollout (no caps, no budget)."""
        return sum(t.gen_tokens * self.token_time + t.env_time for t in self.turns)


@dataclasses.dataclass(frozen=True)
class SimState:
    turn: int = 0  # the turn being generated
    offset: int = 0  # action tokens already generated in that turn
    turns: tuple[Turn, ...] = ()  # finished turns
    partial: tuple[np.ndarray, ...] = ()  # (tokens, logp, version) chunks of the current turn
    pauses: tuple[int, ...] = ()  # pause offsets inside the current turn
    tokens: int = 0  # action tokens so far
    tool_calls: int = 0


def _mix(*keys: int, n: int = 1, start: int = 0) -> np.ndarray:
    """A cheap deterministic hash of (keys, position) -> uint64 [n] (splitmix64 finaliser)."""
    base = 0
    for k in keys:
        base = ((base ^ (k & _M64)) * 0xBF58476D1CE4E5B9 + 0x9E3779B97F4A7C15) & _M64
    h = np.arange(start, start + n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    h ^= np.uint64(base)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(29))


def _chunk(task: SimTask, turn: int, start: int, n: int, version: int):
    h = _mix(task.seed, turn, version, n=n, start=start)
    tok = (h % np.uint64(VOCAB)).astype(np.int32)
    logp = -((h >> np.uint64(40)).astype(np.float32) / np.float32(1 << 22))  # in (-4, 0]
    return tok, logp, np.full(n, version, np.int32)


def _context(task: SimTask, done: Sequence[Turn]) -> np.ndarray:
    if not done:
        return np.arange(task.prompt_tokens, dtype=np.int32) % VOCAB
    last = done[-1]
    return np.concatenate([last.context, last.action, last.observation]).astype(np.int32)


def _turn(task: SimTask, st: SimState, obs: np.ndarray) -> Turn:
    cat = lambda i, dt: np.concatenate([c[i] for c in st.partial] or [np.zeros(0, dt)]).astype(dt)
    logp = cat(1, np.float32)
    return Turn(
        context=_context(task, st.turns),
        action=cat(0, np.int32),
        logp=logp,
        logp_raw=logp - np.float32(0.01),
        version=cat(2, np.int32),
        observation=obs,
        pauses=st.pauses,
    )


class SimulatedWorker:
    """Runs rounds of :class:`SimTask` rollouts; ``sleep_scale > 0`` also sleeps (real latency)."""

    def __init__(self, sleep_scale: float = 0.0) -> None:
        self.sleep_scale = sleep_scale

    def run_round(self, item: WorkItem) -> RoundResult:
        task, caps = item.task, item.caps
        st = item.state if item.state is not None else SimState()
        t, gen_t, env_t, recompute, env_iv = 0.0, 0.0, 0.0, 0.0, []
        if item.state is not None and item.resume == "recompute":
            done_ctx = _context(task, st.turns).size + st.offset
            recompute = t = done_ctx * task.prefill_time
        budget = np.inf if item.round_budget is None else item.round_budget
        cap = np.inf if caps is None or caps.max_tokens is None else caps.max_tokens
        stop = None
        while stop is None:
            spec = task.turns[st.turn]
            want = spec.gen_tokens - st.offset
            n = int(min(want, budget, cap - st.tokens))
            if n > 0:
                chunk = _chunk(task, st.turn, st.offset, n, item.version)
                st = dataclasses.replace(
                    st, offset=st.offset + n, tokens=st.tokens + n, partial=(*st.partial, chunk)
                )
                t += n * task.token_time
                gen_t += n * task.token_time
                budget -= n
            if n < want:  # cut short: the task cap wins a tie (the episode is over)
                if st.tokens >= cap:
                    stop = StopReason.TASK_CAP
                else:
                    st = dataclasses.replace(st, pauses=(*st.pauses, st.offset))
                    stop = StopReason.ROUND_BUDGET_PAUSED
                break
            if caps is not None and st.tool_calls >= caps.max_tool_calls:
                stop = StopReason.TASK_CAP
                break
            env_iv.append((t, t + spec.env_time))
            t += spec.env_time
            env_t += spec.env_time
            obs = _mix(task.seed, st.turn, 7, n=spec.obs_tokens) % np.uint64(VOCAB)
            obs = obs.astype(np.int32)
            done_turn = _turn(task, st, obs)
            st = SimState(
                turn=st.turn + 1,
                turns=(*st.turns, done_turn),
                tokens=st.tokens,
                tool_calls=st.tool_calls + 1,
            )
            if st.turn == len(task.turns):
                stop = StopReason.FINISHED
        if self.sleep_scale > 0:
            time.sleep(t * self.sleep_scale)
        return RoundResult(st, self._trajectory(task, st, stop), t, gen_t, env_t, recompute, tuple(env_iv))

    @staticmethod
    def _trajectory(task: SimTask, st: SimState, stop: StopReason) -> Trajectory:
        turns = list(st.turns)
        if st.partial or stop == StopReason.ROUND_BUDGET_PAUSED:
            turns.append(_turn(task, st, np.zeros(0, np.int32)))
        finished = stop == StopReason.FINISHED
        reward: float | None = 0.0
        if finished:
            reward = {Label.PASS: 1.0, Label.INFRA_FAULT: None}.get(task.label, 0.0)
        return Trajectory(
            task_id=task.task_id,
            task_class=task.task_class,
            turns=turns,
            stop_reason=stop,
            final_reward=reward,
            label=task.label.value if finished else None,
            timings={"generation": sum(t.action.size for t in turns) * task.token_time},
        )


@dataclasses.dataclass(frozen=True)
class TaskClass:
    name: str
    share: float  # probability a submitted task is of this class
    median_seconds: float  # median uninterrupted episode time
    sigma: float  # lognormal shape of the episode time
    turns: int
    gen_fraction: float = 0.5  # share of the episode spent generating


DEFAULT_CLASSES = (
    TaskClass("short", 0.6, 8.0, 0.3, 2),
    TaskClass("medium", 0.3, 25.0, 0.3, 4),
    TaskClass("long", 0.1, 120.0, 0.35, 10),
)


def long_tailed_workload(
    seed: int,
    classes: Sequence[TaskClass] = DEFAULT_CLASSES,
    *,
    token_time: float = 0.05,
    infra_fault_rate: float = 0.0,
    pass_rate: float = 0.5,
    limit: int | None = None,
) -> Iterator[SimTask]:
    """Deterministic stream of simulated tasks with lognormal, class-dependent episode times."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum([c.share for c in classes], dtype=np.float64)
    cdf /= cdf[-1]
    i = 0
    while limit is None or i < limit:
        c = classes[min(int(np.searchsorted(cdf, rng.random(), side="right")), len(classes) - 1)]
        total = c.median_seconds * float(np.exp(c.sigma * rng.standard_normal()))
        gen_tokens = max(c.turns, round(total * c.gen_fraction / token_time))
        per_gen = np.diff(np.linspace(0, gen_tokens, c.turns + 1).round()).astype(int)
        env_each = total * (1 - c.gen_fraction) / c.turns
        u = rng.random()
        label = (
            Label.INFRA_FAULT
            if u < infra_fault_rate
            else Label.PASS
            if u < infra_fault_rate + pass_rate
            else Label.FAIL
        )
        turns = tuple(SimTurn(int(g), env_each, 8) for g in per_gen)
        yield SimTask(f"t{i}", c.name, int(rng.integers(1 << 31)), turns, token_time, label=label)
        i += 1
