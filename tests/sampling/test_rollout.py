"""Multi-turn rollout over host environments: records, context policies, caps and partial rollout."""

import jax
import numpy as np
import pytest

from agentjax.envs import minirepo
from agentjax.policy import init_params
from agentjax.policy.codec import Codec
from agentjax.policy.scoring import token_logprobs
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.sampling.context import drop_oldest_observations
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.queue import Caps
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler
from agentjax.testing.models import tiny_dense
from agentjax.trajectory import StopReason, to_rows

TOK = WordTokenizer(minirepo.vocabulary())
CFG = tiny_dense(vocab_size=TOK.vocab_size, max_seq_len=96, exact_tile=8)
SCORE = jax.jit(lambda p, t, q: token_logprobs(p, t, q, config=CFG))
CAPS = Caps(max_tool_calls=4, max_action_tokens=4, max_obs_tokens=24)


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(0))


def _specs(n, seed=0):
    return [
        EpisodeSpec(
            minirepo.MinirepoEnv(),
            minirepo.generate(seed + i, "train"),
            seed + i,
            task_id=f"t{seed + i}",
            submit_index=i,
        )
        for i in range(n)
    ]


def _run(params, context=None, n=3, budget=None):
    kw = {} if context is None else {"context": context}
    r = Rollout(Sampler(CFG, stop_tokens=(TOK.eos_id,)), Codec(TOK), CAPS, _specs(n), **kw)
    r.start(params, version=7)
    return r, r.advance(params, 7, jax.random.key(1), token_budget=budget)


def test_keep_all_records_and_exact_scores(params):
    _, trajs = _run(params)
    assert len(trajs) == 3
    for t in trajs:
        assert t.stop_reason in set(StopReason)
        assert t.turns and t.is_keep_all()
        assert len(t.turns) <= CAPS.max_tool_calls
        for turn in t.turns:
            assert 0 < turn.action.size <= CAPS.max_action_tokens
            assert (turn.version == 7).all()
        (row,) = to_rows(t)
        assert row.tokens[0] == TOK.bos_id
        # The loss mask covers exactly the generated tokens.
        assert row.loss_mask.sum() == t.num_action_tokens
        # Exact mode: the learner's scores equal the sampler's record bitwise.
        pos = np.arange(row.tokens.size)[None]
        lp, raw = SCORE(params, row.tokens[None], pos)
        m = row.loss_mask > 0
        np.testing.assert_array_equal(np.asarray(lp)[0][m], row.logp[m])
        np.testing.assert_array_equal(np.asarray(raw)[0][m], row.logp_raw[m])


def test_episode_ends_with_a_verdict_or_cap(params):
    _, trajs = _run(params)
    for t in trajs:
        if t.stop_reason == StopReason.TASK_CAP:
            assert t.final_reward == 0.0  # the cap is part of the task: a failure
        else:
            assert t.label is not None and t.verifier_version


def test_context_policy_stores_each_turns_input(params):
    _, trajs = _run(params, context=drop_oldest_observations(0))
    multi = [t for t in trajs if len(t.turns) > 1]
    assert multi, "expected multi-turn episodes"
    for t in multi:
        assert not t.is_keep_all()
        rows = to_rows(t)
        assert len(rows) == len(t.turns)
        for turn, row in zip(t.turns, rows, strict=True):
            np.testing.assert_array_equal(row.tokens[: turn.context.size], turn.context)
            # no observation tokens in a context that dropped them all (only prompt + actions)
            assert turn.context.size <= t.turns[0].context.size + sum(x.action.size for x in t.turns)


def test_round_budget_pauses_then_resumes(params):
    r, done = _run(params, budget=2)
    assert not done and r.unfinished == 3
    assert all(row.stop == StopReason.ROUND_BUDGET_PAUSED for row in r.rows)
    r.resume(params, 8, mode="recompute")
    finished = []
    for k in range(40):
        finished += r.advance(params, 8, jax.random.key(2 + k), token_budget=3)
        if not r.unfinished:
            break
    assert len(finished) == 3
    versions = np.concatenate([t.versions for t in finished])
    assert set(versions.tolist()) == {7, 8}  # tokens keep the version that produced them
    paused = [turn for t in finished for turn in t.turns if turn.pauses]
    assert paused  # pause positions recorded on the turns that spanned a round boundary


def test_batch_composition_does_not_change_trajectories(params):
    """Exact kernels + per-episode keys: an episode's record is the same alone, padded or batched."""
    sampler = Sampler(CFG, stop_tokens=(TOK.eos_id,))
    specs = _specs(3, seed=20)
    together = Rollout(sampler, Codec(TOK), CAPS, specs, pad_to=8)
    together.start(params, 0)
    batched = together.advance(params, 0, jax.random.key(5))
    for spec, ref in zip(_specs(3, seed=20), sorted(batched, key=lambda t: t.task_id), strict=True):
        alone = Rollout(sampler, Codec(TOK), CAPS, [spec])
        alone.start(params, 0)
        (t,) = alone.advance(params, 0, jax.random.key(5))
        assert t.task_id == ref.task_id and len(t.turns) == len(ref.turns)
        for a, b in zip(t.turns, ref.turns, strict=True):
            np.testing.assert_array_equal(a.context, b.context)
            np.testing.assert_array_equal(a.action, b.action)
            np.testing.assert_array_equal(a.logp, b.logp)


def test_context_overflow_ends_the_episode_as_context_full(params):
    """An episode whose context fills the buffer stops as ``context_full`` (the system's limit,
    not the agent's ``task_cap``), never hangs."""
    small = CFG.replace(max_seq_len=24)
    p = init_params(small, jax.random.key(0))
    caps = Caps(max_tool_calls=20, max_action_tokens=4, max_obs_tokens=24)
    r = Rollout(Sampler(small, stop_tokens=(TOK.eos_id,)), Codec(TOK), caps, _specs(3, seed=40))
    r.start(p, 0)
    trajs = r.advance(p, 0, jax.random.key(3))
    assert len(trajs) == 3 and r.unfinished == 0
    full = [t for t in trajs if t.stop_reason == StopReason.CONTEXT_FULL]
    assert full and all(t.final_reward == 0.0 and t.reward_evidence["context_full"] == 24 for t in full)
    assert all(t.stop_reason != StopReason.TASK_CAP for t in trajs)  # 20 tool calls: never reached
    assert all(t.env_fingerprint for t in trajs)  # verdict or not, each carries its task's fingerprint


def _rescore_rows(params, trajs):
    """Every learner row of ``trajs`` scored in one fixed-shape batch (one compile)."""
    from agentjax.learner.batching import make_batch  # noqa: PLC0415

    n = sum(len(to_rows(t)) for t in trajs)
    b, _ = make_batch(trajs, [1.0] * len(trajs), rows=n, length=CFG.max_seq_len)
    lp, _ = SCORE(params, b["tokens"], b["positions"])
    m = b["loss_mask"] > 0
    return np.asarray(lp)[m], b["behav_logp"][m]


def test_rewritten_context_with_round_budget_keeps_partial_actions(params):
    """A row paused mid-action by the round budget, re-prefilled because another row's context
    was rewritten, keeps its partial action tokens: the recorded log-probs equal rescoring."""
    # Many stop tokens: actions end at different lengths, so rows pause at different times.
    stops = (TOK.eos_id, *range(8, TOK.vocab_size, 3))
    r = Rollout(
        Sampler(CFG, stop_tokens=stops),
        Codec(TOK),
        CAPS,
        _specs(3, seed=60),
        context=drop_oldest_observations(0),
    )
    r.start(params, version=0)
    finished = []
    for k in range(60):
        finished += r.advance(params, 0, jax.random.key(9 + k), token_budget=3)
        if not r.unfinished:
            break
        r.resume(params, 0, mode="keep")
    assert len(finished) == 3
    assert any(turn.pauses for t in finished for turn in t.turns if len(t.turns) > 1)
    assert any(not t.is_keep_all() for t in finished)
    rescored, recorded = _rescore_rows(params, finished)
    np.testing.assert_array_equal(rescored, recorded)
