"""Multi-turn rollout: jitted generation alternating with host environment steps.

(One module, over 300 lines: the per-row turn bookkeeping, pause/resume and context rebuilds share
the row state; the slot-engine counterpart is ``engine_rollout.py``.)

A :class:`Rollout` drives a batch of episodes in lock-step over one :class:`Sampler` state:

    r = Rollout(sampler, codec, caps, specs)
    r.start(params, version)
    finished = r.advance(params, version, rng)                    # sync: run to the end
    finished = r.advance(params, version, rng, token_budget=64)   # partial: pause at a round budget
    r.resume(new_params, new_version, mode="recompute" | "keep")  # next round, new policy

Token ids in, token ids out: the observation tokens are appended to the very buffer the sampler
reads, so the learner trains on exactly the context the model saw. A context policy other than
``keep_all`` rewrites the context each turn; the row is then re-prefilled and each turn records
its own input. Per-task caps (tool calls, action tokens) end the episode as ``task_cap``; a full
context (``max_seq_len``, the system's limit) as ``context_full``; the round budget pauses it as
``round_budget_paused`` — never confused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from agentjax.envs.protocol import REWARD_TREATMENT, Env, Label, ToolCallError, attribute_step_error
from agentjax.envs.sandbox import SandboxUnavailable
from agentjax.policy.codec import Codec
from agentjax.sampling.context import ContextPolicy, keep_all
from agentjax.sampling.partial import resume as resume_state
from agentjax.sampling.sampler import Sampler, Status, take
from agentjax.trajectory import StopReason, Trajectory, Turn


@dataclasses.dataclass(frozen=True)
class Caps:
    """Per-task caps (part of the task: exceeding them is the agent's failure)."""

    max_tool_calls: int = 8
    max_action_tokens: int = 16  # per turn
    max_obs_tokens: int = 80  # per observation, after encoding (cut tokens are recorded)


@dataclasses.dataclass
class EpisodeSpec:
    env: Env
    task: Any
    seed: int
    task_id: str
    task_class: str = "default"
    submit_index: int = -1


@dataclasses.dataclass
class _Row:
    spec: EpisodeSpec
    segments: list = dataclasses.field(default_factory=list)
    turns: list = dataclasses.field(default_factory=list)
    context: np.ndarray | None = None
    gen: dict = dataclasses.field(default_factory=lambda: {k: [] for k in ("tok", "lp", "raw", "ver")})
    pauses: list = dataclasses.field(default_factory=list)
    calls: int = 0  # tool calls
    gen_calls: int = 0  # generate calls this row took part in (its sampling keys)
    done: bool = False
    stop: StopReason | None = None
    rewards: list = dataclasses.field(default_factory=list)
    final: Any = None  # the environment's last StepResult
    result: Trajectory | None = None
    timings: dict = dataclasses.field(
        default_factory=lambda: {"generation": 0.0, "env": 0.0, "env_wall": 0.0}
    )
    obs_cut: int = 0
    env_error: dict | None = None  # the evidence of an exception the environment raised
    call_error: str | None = None  # why the action was not a tool call (agent_error)
    evicted: bool = False  # the slot engine gave up this row's slot while its environment ran

    # The rollouts (lock-step and slot engine) change a row only through these methods.
    def end(self, stop: StopReason) -> None:
        """The episode is over, for ``stop``."""
        self.done, self.stop = True, stop

    def pause(self) -> None:
        """The round budget ran out mid-action: resumable (the pause's offset is recorded)."""
        if self.gen["tok"]:
            self.pauses.append(len(self.gen["tok"]))
        self.stop = StopReason.ROUND_BUDGET_PAUSED

    def record(self, tokens, logp, logp_raw, version, seconds: float) -> None:
        """Generated tokens of the current action, with their log-probs and versions."""
        for k, x in (("tok", tokens), ("lp", logp), ("raw", logp_raw), ("ver", version)):
            self.gen[k].extend(np.asarray(x).tolist())
        self.timings["generation"] += seconds

    def set_env(self, env) -> None:
        """The episode's environment as a process pool's worker stepped it (a copy came back)."""
        self.spec.env = env

    def evict(self) -> None:
        """The slot engine gave up the row's slot: its next action is re-prefilled (recomputed)."""
        self.evicted = True

    def set_context(self, tokens: np.ndarray) -> None:
        """What the model sees before the row's next action."""
        self.context = tokens

    def deliver(self, result: Trajectory) -> Trajectory:
        """The row's record (finished or paused), kept and returned."""
        self.result = result
        return result


def bucket(n: int, smallest: int = 8) -> int:
    """The next power of two >= n (at least ``smallest``): few distinct compiled batch sizes."""
    b = smallest
    while b < n:
        b *= 2
    return b


def task_fingerprint(spec: EpisodeSpec) -> str:
    """The fingerprint of an episode's task when no verdict carries one (a Task's ``fingerprint``;
    else a hash of the task's text and class, so one task always gets one fingerprint)."""
    fp = getattr(spec.task, "fingerprint", None)
    if isinstance(fp, str) and fp:
        return fp
    key = f"{type(spec.task).__qualname__}|{spec.task_class}|{spec.task_id}"
    return "task:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def env_call(env: Env, text: str):
    """One environment step, timed: ``(env, result, error, wall seconds)``. The environment comes
    back with the result so that a step run in another process carries its state home."""
    t0 = time.perf_counter()
    try:
        res, err = env.step(text), None
    except Exception as e:  # noqa: BLE001 - reported to the caller as the step's error
        res, err = None, e
    return env, res, err, time.perf_counter() - t0


@jax.jit
def _row_keys(rng, seeds, calls):
    """One key per row from the episode's own seed and call count: a row's samples never depend
    on its batch-mates (with exact kernels, batching does not change a trajectory at all)."""
    fold = lambda s, c: jax.random.fold_in(jax.random.fold_in(rng, s), c)
    return jax.vmap(fold)(seeds, calls)


class Rollout:
    """A resumable batch of episodes (host state + one sampler state)."""

    def __init__(
        self,
        sampler: Sampler,
        codec: Codec,
        caps: Caps,
        specs: Sequence[EpisodeSpec],
        *,
        context: ContextPolicy = keep_all,
        pad_to: int = 0,
    ):
        """``pad_to``: run at least this many sampler rows (idle padding rows), so that batches of
        varying size share one compiled program (see :func:`bucket`)."""
        self.sampler, self.codec, self.caps, self.ctx = sampler, codec, caps, context
        self.rows = [_Row(s) for s in specs]
        self.capacity = max(len(self.rows), pad_to)
        self.width = caps.max_obs_tokens + 2
        self.state = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, params, version: int):
        self.state = self.sampler.init(self.capacity)
        self._extend(params, version, [self._reset(r) for r in self.rows])

    @property
    def unfinished(self) -> int:
        return sum(not r.done for r in self.rows)

    def resume(self, params, version: int, mode: str):
        """Next round under new parameters (``recompute``: fresh cache; ``keep``: old cache)."""
        self.state = resume_state(self.sampler, params, self.state, version=version, mode=mode)

    def advance(self, params, version: int, rng, *, token_budget: int | None = None) -> list[Trajectory]:
        """Runs turns until every episode ends or the round's token budget is spent.

        Returns the trajectories that finished during this call.
        """
        spent = np.zeros(len(self.rows), np.int64)
        finished: list[Trajectory] = []
        while True:
            self._close_full_rows()
            budget = np.zeros(self.capacity, np.int32)
            budget[: len(self.rows)] = [self._turn_budget(i) for i in range(len(self.rows))]
            if token_budget is not None:
                budget = np.minimum(budget, np.maximum(token_budget - spent, 0)).astype(np.int32)
            if not budget.any():
                break
            t0 = time.perf_counter()
            seeds = np.zeros(self.capacity, np.uint32)
            calls = np.zeros(self.capacity, np.uint32)
            seeds[: len(self.rows)] = [r.spec.seed for r in self.rows]
            calls[: len(self.rows)] = [r.gen_calls for r in self.rows]
            keys = _row_keys(rng, seeds, calls)
            for r, b in zip(self.rows, budget[: len(self.rows)], strict=True):
                r.gen_calls += int(b > 0)
            self.state, span = self.sampler.generate(
                params, self.state, keys, max_new_tokens=budget, version=version
            )
            recs, status = take(self.state, span), np.asarray(self.state.status)
            dt = time.perf_counter() - t0
            obs_toks = [[] for _ in self.rows]
            for i, (r, rec) in enumerate(zip(self.rows, recs[: len(self.rows)], strict=True)):
                n = rec["tokens"].size
                if r.done or n == 0:
                    continue
                spent[i] += n
                r.record(
                    rec["tokens"],
                    rec["logp"],
                    rec["logp_raw"],
                    rec["version"],
                    dt * n / max(int(budget.sum()), 1),
                )
                turn_full = len(r.gen["tok"]) >= self.caps.max_action_tokens
                if status[i] == Status.FULL:
                    self._close_turn(i, [])
                    r.end(StopReason.CONTEXT_FULL)
                elif status[i] == Status.STOPPED or turn_full:
                    obs_toks[i] = self._env_step(i)
                else:  # paused by the round budget: resumable
                    r.pauses.append(len(r.gen["tok"]))
            if any(obs_toks):
                self._extend(params, version, obs_toks)
        for r in self.rows:
            if r.done and r.result is None:
                r.result = self._trajectory(r)
                finished.append(r.result)
            elif not r.done and r.gen["tok"]:
                r.stop = StopReason.ROUND_BUDGET_PAUSED
        return finished

    # -- internals ---------------------------------------------------------------------------
    def _reset(self, r: _Row) -> list[int]:
        """Resets row ``r``'s environment; its prompt tokens. A reset that raises ends the episode
        as ``infra_fault`` (no prompt): the agent has not acted yet, so it cannot have caused it."""
        t0 = time.perf_counter()
        try:
            obs = r.spec.env.reset(r.spec.task, r.spec.seed)
        except SandboxUnavailable:  # isolation is missing: a refusal to run at all, not one episode's fault
            raise
        except Exception as e:  # noqa: BLE001 - recorded on the episode, never a crash of the run
            _, evidence = attribute_step_error(e)
            r.env_error = {**evidence, "attribution": "infra: the environment's reset raised"}
            r.end(StopReason.INFRA_FAULT)
            return []
        finally:
            r.timings["env_wall"] += time.perf_counter() - t0
        toks = self._cut(r, self.codec.prompt(obs))
        r.segments.append(("prompt", toks))
        return toks

    def _close_full_rows(self) -> None:
        """An episode whose context filled the whole buffer ends there (the system's limit)."""
        length = np.asarray(self.state.length)
        for i, r in enumerate(self.rows):
            if not r.done and length[i] >= self.sampler.config.max_seq_len:
                if r.gen["tok"]:
                    self._close_turn(i, [])
                r.end(StopReason.CONTEXT_FULL)

    def _turn_budget(self, i: int) -> int:
        r = self.rows[i]
        if r.done:
            return 0
        room = self.sampler.config.max_seq_len - int(self.state.length[i])
        return max(min(self.caps.max_action_tokens - len(r.gen["tok"]), room), 0)

    def _cut(self, r: _Row, toks: list[int]) -> list[int]:
        """Explicit, recorded rule for over-long inputs: keep the head and the codec's turn suffix
        (the final ``keep_tail`` tokens: the turn marker / the template's generation prompt)."""
        if len(toks) > self.width:
            tail = self.codec.keep_tail
            r.obs_cut += len(toks) - self.width
            toks = toks[: self.width - tail] + toks[-tail:]
        return toks

    def _extend(self, params, version, toks: list[list[int]]):
        arr = np.zeros((self.capacity, self.width), np.int32)
        lens = np.zeros(self.capacity, np.int32)
        for i, t in enumerate(toks):
            arr[i, : len(t)], lens[i] = t, len(t)
        rewrite = self.ctx is not keep_all
        if rewrite:
            for i, r in enumerate(self.rows):
                if lens[i]:
                    r.context = np.asarray(self.ctx(r.segments), np.int32)
            self._rebuild(params, version)
        else:
            self.state = self.sampler.extend(params, self.state, arr, lens, version=version)
            host = np.asarray(self.state.tokens)
            for i, r in enumerate(self.rows):
                if lens[i]:
                    r.context = host[i, : int(self.state.length[i])].copy()

    def _rebuild(self, params, version):
        """Re-prefills every unfinished row into a fresh state: its (rewritten) context and, for a
        row paused mid-action by the round budget, the action tokens generated so far (the model
        must keep seeing them: they are part of the input of the rest of the action)."""
        l = self.sampler.config.max_seq_len
        arr = np.zeros((self.capacity, l), np.int32)
        lens = np.zeros(self.capacity, np.int32)
        for i, r in enumerate(self.rows):
            if not r.done and r.context is not None:
                c = np.concatenate([r.context, np.asarray(r.gen["tok"], np.int32)])[:l]
                arr[i, : c.size], lens[i] = c, c.size
        self.state = self.sampler.extend(params, self.sampler.init(self.capacity), arr, lens, version=version)

    def _turn_of(self, i: int, obs: list[int]) -> Turn:
        """Row ``i``'s current action (generated so far) as a turn answered by ``obs``."""
        r = self.rows[i]
        a = np.asarray(r.gen["tok"], np.int32)
        return Turn(
            context=r.context,
            action=a,
            logp=np.asarray(r.gen["lp"], np.float32),
            logp_raw=np.asarray(r.gen["raw"], np.float32),
            version=np.asarray(r.gen["ver"], np.int32),
            observation=np.asarray(obs, np.int32),
            routes=self._routes_of(i, r.context.size + a.size),
            pauses=tuple(r.pauses),
            recomputed=r.evicted,
        )

    def _close_turn(self, i: int, obs: list[int]):
        r = self.rows[i]
        turn = self._turn_of(i, obs)
        r.turns.append(turn)
        r.evicted = False
        r.segments.append(("action", turn.action.tolist()))
        if obs:
            r.segments.append(("observation", obs))
        r.gen = {k: [] for k in ("tok", "lp", "raw", "ver")}
        r.pauses = []

    def _routes_of(self, i: int, n: int) -> np.ndarray | None:
        """Row ``i``'s MoE experts at its first ``n`` positions (None: dense model)."""
        if self.state.routes is None:
            return None
        return np.asarray(self.state.routes[i, :n])

    def _env_step(self, i: int) -> list[int]:
        """Hands the action to the environment; returns the observation tokens to append."""
        text = self._action_text(i)
        if text is None:
            return []
        _, res, err, wall = env_call(self.rows[i].spec.env, text)
        return self._env_result(i, res, err, wall)

    def _action_text(self, i: int) -> str | None:
        """Row ``i``'s action as tool-call text; None (the episode ended as the agent's error)
        when it holds no well-formed tool call."""
        r = self.rows[i]
        try:
            return self.codec.action_text(r.gen["tok"])
        except ToolCallError as e:  # a malformed call is the agent's error, never a crash
            self._close_turn(i, [])
            r.done, r.stop, r.call_error = True, StopReason.AGENT_ERROR, str(e)
            return None

    def _env_result(self, i: int, res, err: BaseException | None, wall: float) -> list[int]:
        """Books an environment step's result (or the error it raised) on row ``i``; returns the
        observation tokens to append (none when the episode ended)."""
        r = self.rows[i]
        r.timings["env_wall"] += wall
        if err is not None:  # the agent's, unless the exception carries infrastructure evidence
            label, r.env_error = attribute_step_error(err)
            self._close_turn(i, [])
            r.done, r.stop = True, StopReason(label.value)
            return []
        if res.done:  # the final step: the submission and its verification
            r.timings["verify_wall"] = r.timings.get("verify_wall", 0.0) + wall
        r.timings["env"] += float(res.evidence.get("latency_s", 0.0))
        r.calls += 1
        r.rewards.append(float(res.reward))
        r.final = res
        if res.done or r.calls >= self.caps.max_tool_calls:
            self._close_turn(i, [])
            r.done = True
            r.stop = StopReason(res.stop_reason or "finished") if res.done else StopReason.TASK_CAP
            return []
        obs = self._cut(r, self.codec.observation(res.observation, after=r.gen["tok"]))
        self._close_turn(i, obs)
        return obs

    def _trajectory(self, r: _Row) -> Trajectory:
        verdict = None if r.final is None or not r.final.done else r.final.verdict
        if verdict is not None:
            final, label = verdict.trained_reward, verdict.label.value
            evidence = {**verdict.evidence, "tests_run": verdict.tests_run}
            if "rubric" in r.final.evidence:  # the rubric's scores, beside the verdict (never in it)
                evidence["rubric"] = r.final.evidence["rubric"]
            fp, vv = verdict.env_fingerprint, verdict.verifier_version
        else:  # no verdict: the task's own fingerprint, never "" (group mode compares them)
            fp, vv = task_fingerprint(r.spec), ""
            if r.env_error is not None:  # infra evidence: masked, never a silent zero; else agent's
                label = r.stop.value
                final, evidence = REWARD_TREATMENT[Label(label)].reward, dict(r.env_error)
            elif r.call_error is not None:  # the reply held no well-formed tool call
                final = REWARD_TREATMENT[Label.AGENT_ERROR].reward
                label, evidence = "agent_error", {"tool_call_error": r.call_error}
            else:  # capped (or out of context) before a verdict: the task's no-submission reward
                final, label, evidence = 0.0, "fail", {}
                if r.stop == StopReason.CONTEXT_FULL:
                    evidence = {"context_full": int(self.sampler.config.max_seq_len)}
        if r.obs_cut:
            evidence = {**evidence, "observation_tokens_cut": r.obs_cut}
        return Trajectory(
            task_id=r.spec.task_id,
            task_class=r.spec.task_class,
            turns=r.turns,
            stop_reason=r.stop,
            rewards=r.rewards,
            final_reward=final,
            label=label,
            reward_evidence=evidence,
            timings=dict(r.timings),
            env_fingerprint=fp,
            verifier_version=vv,
            submit_index=r.spec.submit_index,
        )
