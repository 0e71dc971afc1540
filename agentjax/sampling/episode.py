"""The host side of an episode, shared by both rollout drivers (lock-step :class:`Rollout` and
the slot engine's :class:`EngineRollout`): the one episode record (:class:`Episode`) and the
turn bookkeeping (:class:`Turns`: prompt, cut, turn, tool-call text, environment result,
trajectory). A driver owns how tokens are generated; everything an episode records goes through
here, so both drivers record the same trajectory by construction
(``agentjax.testing.drivers.assert_drivers_agree`` checks it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np

from agentjax.envs.protocol import REWARD_TREATMENT, Env, Label, ToolCallError, attribute_step_error
from agentjax.envs.sandbox import SandboxUnavailable
from agentjax.policy.codec import Codec, fit
from agentjax.sampling.queue import Caps
from agentjax.trajectory import StopReason, Trajectory, Turn

RoutesOf = Callable[[int], "np.ndarray | None"]  # MoE experts of an episode's first n positions


def input_widths(caps: Caps, max_seq_len: int) -> tuple[int, int]:
    """``(prompt, observation)`` widths after :func:`~agentjax.policy.codec.fit`: an observation keeps
    ``caps.max_obs_tokens`` (+2: the codec's turn markers); the prompt (the task, the system
    prompt, the tool schemas) is not an observation and keeps all the context but one action's
    room (``caps.max_action_tokens``), as the build's start check assumes."""
    obs = caps.max_obs_tokens + 2
    return max(obs, max_seq_len - caps.max_action_tokens), obs


@dataclasses.dataclass
class EpisodeSpec:
    env: Env
    task: Any
    seed: int
    task_id: str
    task_class: str = "default"
    submit_index: int = -1


@dataclasses.dataclass
class Episode:
    """One episode on the host, whichever driver runs it: its spec, turns so far, the current
    action's tokens, rewards, timings and why it stopped. Only its own methods (and
    :class:`Turns`, in this module) change it."""

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

    @property
    def action_tokens(self) -> int:
        """Action tokens over the episode so far (its finished turns and the current action)."""
        return sum(t.action.size for t in self.turns) + len(self.gen["tok"])

    # The rollouts (lock-step and slot engine) change a row only through these methods.
    def end(self, stop: StopReason) -> None:
        """The episode is over, for ``stop``."""
        self.done, self.stop = True, stop

    def note_pause(self) -> None:
        """The round budget cut the current action here (its offset is recorded)."""
        self.pauses.append(len(self.gen["tok"]))

    def pause(self, *, note: bool = True) -> None:
        """The round budget ran out mid-action: resumable (``note``: record the offset now)."""
        if note and self.gen["tok"]:
            self.note_pause()
        self.stop = StopReason.ROUND_BUDGET_PAUSED

    def count_call(self, took_part: bool) -> None:
        """One more generate call this episode took part in (its next sampling key)."""
        self.gen_calls += int(took_part)

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
def row_keys(rng, seeds, calls):
    """One key per row from the episode's own seed and call count: a row's samples never depend
    on its batch-mates (with exact kernels, batching does not change a trajectory at all)."""
    fold = lambda s, c: jax.random.fold_in(jax.random.fold_in(rng, s), c)
    return jax.vmap(fold)(seeds, calls)


class Driver(Protocol):
    """A rollout driver: lock-step :class:`~agentjax.sampling.rollout.Rollout` or the slot
    engine's :class:`~agentjax.sampling.engine_rollout.EngineRollout`. Both keep their episodes'
    records through :class:`Turns` (composition, not inheritance)."""

    rows: list[Episode]  # the episodes, in the order given
    paused: dict  # row -> its resumable state, for rows a round budget paused (partial rollout)
    metrics: dict  # the driver's own figures of its last run (the slot engine's: tokens, slots, ...)

    def run(
        self, params, version: int, rng, pool, *, round_budget=None, resume="recompute"
    ) -> list[Trajectory]:
        """Runs every episode to its end (or its round budget); their records, in episode order."""
        ...


@dataclasses.dataclass(frozen=True)
class Turns:
    """How an episode's record is kept: the codec (prompt, observation and tool-call text), the
    per-task caps and the context length. ``routes_of(n)``: the driver's MoE experts of the
    episode's first ``n`` positions (None: dense)."""

    codec: Codec
    caps: Caps
    max_seq_len: int

    @property
    def width(self) -> int:
        """Tokens an observation may take after :meth:`cut` (:func:`input_widths`)."""
        return input_widths(self.caps, self.max_seq_len)[1]

    @property
    def prompt_width(self) -> int:
        """Tokens the prompt may take after :meth:`cut` (:func:`input_widths`)."""
        return input_widths(self.caps, self.max_seq_len)[0]

    def tokens_left(self, ep: Episode) -> int:
        """Action tokens the episode may still generate under ``caps.max_tokens``."""
        if self.caps.max_tokens is None:
            return 1 << 30
        return max(self.caps.max_tokens - ep.action_tokens, 0)

    def capped(self, ep: Episode) -> bool:
        """The episode spent its ``caps.max_tokens``: it ends as ``task_cap`` (the agent's failure;
        a tie with the round budget goes to the cap)."""
        return self.caps.max_tokens is not None and ep.action_tokens >= self.caps.max_tokens

    def reset(self, ep: Episode) -> list[int]:
        """Resets the episode's environment; its prompt tokens. A reset that raises ends the episode
        as ``infra_fault`` (no prompt): the agent has not acted yet, so it cannot have caused it."""
        t0 = time.perf_counter()
        try:
            obs = ep.spec.env.reset(ep.spec.task, ep.spec.seed)
        except SandboxUnavailable:  # isolation is missing: a refusal to run at all, not one episode's fault
            raise
        except Exception as e:  # noqa: BLE001 - recorded on the episode, never a crash of the run
            _, evidence = attribute_step_error(e)
            ep.env_error = {**evidence, "attribution": "infra: the environment's reset raised"}
            ep.end(StopReason.INFRA_FAULT)
            return []
        finally:
            ep.timings["env_wall"] += time.perf_counter() - t0
        toks = self.cut(ep, self.codec.prompt(obs), self.prompt_width)
        ep.segments.append(("prompt", toks))
        return toks

    def cut(self, ep: Episode, toks: list[int], width: int | None = None) -> list[int]:
        """:func:`~agentjax.policy.codec.fit` to ``width`` (default: an observation's); the cut
        tokens recorded."""
        toks, n = fit(toks, self.width if width is None else width, self.codec.keep_tail)
        ep.obs_cut += n
        return toks

    def turn(self, ep: Episode, obs: list[int], routes_of: RoutesOf) -> Turn:
        """The episode's current action (generated so far) as a turn answered by ``obs``."""
        a = np.asarray(ep.gen["tok"], np.int32)
        return Turn(
            context=ep.context,
            action=a,
            logp=np.asarray(ep.gen["lp"], np.float32),
            logp_raw=np.asarray(ep.gen["raw"], np.float32),
            version=np.asarray(ep.gen["ver"], np.int32),
            observation=np.asarray(obs, np.int32),
            routes=routes_of(ep.context.size + a.size),
            pauses=tuple(ep.pauses),
            recomputed=ep.evicted,
        )

    def close(self, ep: Episode, obs: list[int], routes_of: RoutesOf) -> None:
        """Ends the current action as a turn answered by ``obs``."""
        turn = self.turn(ep, obs, routes_of)
        ep.turns.append(turn)
        ep.evicted = False
        ep.segments.append(("action", turn.action.tolist()))
        if obs:
            ep.segments.append(("observation", obs))
        ep.gen = {k: [] for k in ("tok", "lp", "raw", "ver")}
        ep.pauses = []

    def action_text(self, ep: Episode, routes_of: RoutesOf) -> str | None:
        """The episode's action as tool-call text; None (the episode ended as the agent's error)
        when it holds no well-formed tool call."""
        try:
            return self.codec.action_text(ep.gen["tok"])
        except ToolCallError as e:  # a malformed call is the agent's error, never a crash
            self.close(ep, [], routes_of)
            ep.done, ep.stop, ep.call_error = True, StopReason.AGENT_ERROR, str(e)
            return None

    def env_result(
        self, ep: Episode, res, err: BaseException | None, wall: float, routes_of: RoutesOf
    ) -> list[int]:
        """Books an environment step's result (or the error it raised) on the episode; returns the
        observation tokens to append (none when the episode ended)."""
        ep.timings["env_wall"] += wall
        if err is not None:  # the agent's, unless the exception carries infrastructure evidence
            label, ep.env_error = attribute_step_error(err)
            self.close(ep, [], routes_of)
            ep.done, ep.stop = True, StopReason(label.value)
            return []
        if res.done:  # the final step: the submission and its verification
            ep.timings["verify_wall"] = ep.timings.get("verify_wall", 0.0) + wall
        ep.timings["env"] += float(res.evidence.get("latency_s", 0.0))
        ep.calls += 1
        ep.rewards.append(float(res.reward))
        ep.final = res
        if res.done or ep.calls >= self.caps.max_tool_calls:
            self.close(ep, [], routes_of)
            ep.done = True
            ep.stop = StopReason(res.stop_reason or "finished") if res.done else StopReason.TASK_CAP
            return []
        obs = self.cut(ep, self.codec.observation(res.observation, after=ep.gen["tok"]))
        self.close(ep, obs, routes_of)
        return obs

    def trajectory(self, ep: Episode) -> Trajectory:
        """The episode's record: its verdict's reward and label, or the attributed fault."""
        verdict = None if ep.final is None or not ep.final.done else ep.final.verdict
        if verdict is not None:
            final, label = verdict.trained_reward, verdict.label.value
            evidence = {**verdict.evidence, "tests_run": verdict.tests_run}
            if "rubric" in ep.final.evidence:  # the rubric's scores, beside the verdict (never in it)
                evidence["rubric"] = ep.final.evidence["rubric"]
            fp, vv = verdict.env_fingerprint, verdict.verifier_version
        else:  # no verdict: the task's own fingerprint, never "" (group mode compares them)
            fp, vv = task_fingerprint(ep.spec), ""
            if ep.env_error is not None:  # infra evidence: masked, never a silent zero; else agent's
                label = ep.stop.value
                final, evidence = REWARD_TREATMENT[Label(label)].reward, dict(ep.env_error)
            elif ep.call_error is not None:  # the reply held no well-formed tool call
                final = REWARD_TREATMENT[Label.AGENT_ERROR].reward
                label, evidence = "agent_error", {"tool_call_error": ep.call_error}
            else:  # capped (or out of context) before a verdict: the task's no-submission reward
                final, label, evidence = 0.0, "fail", {}
                if ep.stop == StopReason.CONTEXT_FULL:
                    evidence = {"context_full": int(self.max_seq_len)}
        if ep.obs_cut:
            evidence = {**evidence, "observation_tokens_cut": ep.obs_cut}
        return Trajectory(
            task_id=ep.spec.task_id,
            task_class=ep.spec.task_class,
            turns=ep.turns,
            stop_reason=ep.stop,
            rewards=ep.rewards,
            final_reward=final,
            label=label,
            reward_evidence=evidence,
            timings=dict(ep.timings),
            env_fingerprint=fp,
            verifier_version=vv,
            submit_index=ep.spec.submit_index,
        )
