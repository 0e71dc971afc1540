"""Multi-turn rollout: jitted generation alternating with host environment steps.

The lock-step driver; the slot engine's is ``engine_rollout.py``. Both keep each episode's record
through :mod:`agentjax.sampling.episode` (one ``Episode`` record, one ``Turns`` bookkeeping), so
they record the same trajectory (``agentjax.testing.drivers``).

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

import time
from collections.abc import Sequence

import numpy as np

from agentjax.policy.codec import Codec
from agentjax.sampling.context import ContextPolicy, keep_all
from agentjax.sampling.engine import prefill_width
from agentjax.sampling.episode import Episode, EpisodeSpec, Turns, env_call, row_keys
from agentjax.sampling.partial import resume as resume_state
from agentjax.sampling.queue import Caps
from agentjax.sampling.sampler import Sampler, Status, take
from agentjax.trajectory import StopReason, Trajectory


def bucket(n: int, smallest: int = 8) -> int:
    """The next power of two >= n (at least ``smallest``): few distinct compiled batch sizes."""
    b = smallest
    while b < n:
        b *= 2
    return b


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
        self.sampler, self.caps, self.ctx = sampler, caps, context
        self.turns = Turns(codec, caps, sampler.config.max_seq_len)
        self.rows = [Episode(s) for s in specs]
        self.capacity = max(len(self.rows), pad_to)
        self.width = self.turns.width
        self.state = None
        self.paused: dict = {}  # lock-step pauses in place (start/advance/resume), never here
        self.metrics: dict = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, params, version: int):
        self.state = self.sampler.init(self.capacity)
        self._extend(params, version, [self.turns.reset(r) for r in self.rows])

    def run(
        self, params, version: int, rng, pool=None, *, round_budget=None, resume="recompute"
    ) -> list[Trajectory]:
        """The :class:`~agentjax.sampling.episode.Driver` call: every episode to its end, in
        episode order (environments stepped inline: ``pool`` is not used). A round budget
        (partial rollout across calls) needs the slot engine; lock-step pauses in place with
        :meth:`advance`'s ``token_budget`` and :meth:`resume`."""
        if round_budget:
            raise NotImplementedError("partial rollout (a round budget) needs the slot engine")
        self.start(params, version)
        self.advance(params, version, rng)
        return [r.result for r in self.rows]

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
            length = np.asarray(self.state.length)
            budget[: len(self.rows)] = [self._turn_budget(i, length[i]) for i in range(len(self.rows))]
            if token_budget is not None:
                budget = np.minimum(budget, np.maximum(token_budget - spent, 0)).astype(np.int32)
            if not budget.any():
                break
            t0 = time.perf_counter()
            seeds = np.zeros(self.capacity, np.uint32)
            calls = np.zeros(self.capacity, np.uint32)
            seeds[: len(self.rows)] = [r.spec.seed for r in self.rows]
            calls[: len(self.rows)] = [r.gen_calls for r in self.rows]
            keys = row_keys(rng, seeds, calls)
            for r, b in zip(self.rows, budget[: len(self.rows)], strict=True):
                r.count_call(b > 0)
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
                    self.turns.close(r, [], self._routes(i))
                    r.end(StopReason.CONTEXT_FULL)
                elif status[i] == Status.STOPPED or turn_full:
                    obs_toks[i] = self._env_step(i)
                elif self.turns.capped(r):  # the episode's token cap (wins a tie with the budget)
                    self.turns.close(r, [], self._routes(i))
                    r.end(StopReason.TASK_CAP)
                else:  # paused by the round budget: resumable
                    r.note_pause()
            if any(obs_toks):
                self._extend(params, version, obs_toks)
        for r in self.rows:
            if r.done and r.result is None:
                finished.append(r.deliver(self.turns.trajectory(r)))
            elif not r.done and r.gen["tok"]:
                r.pause(note=False)  # its offset was noted when the budget cut it
        return finished

    # -- internals ---------------------------------------------------------------------------
    def _close_full_rows(self) -> None:
        """An episode whose context filled the whole buffer ends there (the system's limit); one
        that spent its episode token cap (``caps.max_tokens``) ends as ``task_cap``."""
        length = np.asarray(self.state.length)
        for i, r in enumerate(self.rows):
            full = length[i] >= self.sampler.config.max_seq_len
            if not r.done and (full or self.turns.capped(r)):
                if r.gen["tok"]:
                    self.turns.close(r, [], self._routes(i))
                r.end(StopReason.CONTEXT_FULL if full else StopReason.TASK_CAP)

    def _turn_budget(self, i: int, length: int) -> int:
        r = self.rows[i]
        if r.done:
            return 0
        room = self.sampler.config.max_seq_len - int(length)
        return max(min(self.caps.max_action_tokens - len(r.gen["tok"]), room, self.turns.tokens_left(r)), 0)

    def _extend(self, params, version, toks: list[list[int]]):
        # a prompt may be wider than an observation (Turns.prompt_width): its own padded width
        n = max((len(t) for t in toks), default=0)
        w = self.width if n <= self.width else prefill_width(n, self.sampler.config.max_seq_len)
        arr = np.zeros((self.capacity, w), np.int32)
        lens = np.zeros(self.capacity, np.int32)
        for i, t in enumerate(toks):
            arr[i, : len(t)], lens[i] = t, len(t)
        rewrite = self.ctx is not keep_all
        if rewrite:
            for i, r in enumerate(self.rows):
                if lens[i]:
                    r.set_context(np.asarray(self.ctx(r.segments), np.int32))
            self._rebuild(params, version)
        else:
            self.state = self.sampler.extend(params, self.state, arr, lens, version=version)
            host, length = np.asarray(self.state.tokens), np.asarray(self.state.length)
            for i, r in enumerate(self.rows):
                if lens[i]:
                    r.set_context(host[i, : int(length[i])].copy())

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

    def _routes(self, i: int):
        """Row ``i``'s MoE experts at its first ``n`` positions, ``n -> array`` (None: dense)."""
        return lambda n: None if self.state.routes is None else np.asarray(self.state.routes)[i, :n]

    def _env_step(self, i: int) -> list[int]:
        """Hands the action to the environment; returns the observation tokens to append."""
        r, routes = self.rows[i], self._routes(i)
        text = self.turns.action_text(r, routes)
        if text is None:
            return []
        _, res, err, wall = env_call(r.spec.env, text)
        return self.turns.env_result(r, res, err, wall, routes)
