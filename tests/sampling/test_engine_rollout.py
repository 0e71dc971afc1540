"""Episodes over the slot engine + environment pool: Rollout's trajectories, bitwise (exact mode)."""

import jax
import numpy as np
import pytest

from agentjax.envs import minirepo
from agentjax.policy import init_params
from agentjax.policy.codec import Codec
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.sampling.engine import Engine
from agentjax.sampling.engine_rollout import Admission, EngineRollout
from agentjax.sampling.envpool import EnvPool, RealLatency
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.queue import Caps
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler
from agentjax.testing.drivers import assert_same_trajectories, assert_same_trajectory, lockstep, on_engine
from agentjax.testing.models import tiny_dense

TOK = WordTokenizer(minirepo.vocabulary())
CFG = tiny_dense(vocab_size=TOK.vocab_size, max_seq_len=96, exact_tile=8)
CAPS = Caps(max_tool_calls=4, max_action_tokens=4, max_obs_tokens=24)
SAMPLER = Sampler(CFG, stop_tokens=(TOK.eos_id,))
ENV = minirepo.EnvConfig(max_steps=4, latency=minirepo.LONG_TAILED)


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(0))


def _specs(n, wrap=lambda e: e):
    return [
        EpisodeSpec(
            wrap(minirepo.MinirepoEnv(ENV)),
            minirepo.generate(i, "train"),
            100 + i,
            task_id=f"t{i}",
            submit_index=i,
        )
        for i in range(n)
    ]


_same = assert_same_trajectory  # the drivers' parity fixture (agentjax.testing.drivers)


@pytest.mark.slow
def test_engine_rollout_equals_rollout_with_real_env_latency_and_evictions(params):
    """6 episodes on 3 slots, minirepo's long-tailed latency as real waiting on a 3-thread pool:
    environments answer out of order, episodes are evicted and re-prefilled, and still every
    trajectory is bitwise the one the lock-step Rollout records."""
    ref = Rollout(SAMPLER, Codec(TOK), CAPS, _specs(6))
    ref.start(params, 3)
    want = sorted(ref.advance(params, 3, jax.random.key(7)), key=lambda t: t.task_id)
    engine = Engine(SAMPLER, slots=3, chunk=3)
    r = EngineRollout(engine, Codec(TOK), CAPS, _specs(6, lambda e: RealLatency(e, 0.01)))
    with EnvPool(3, "thread") as pool:
        got = r.run(params, 3, jax.random.key(7), pool)
        ps = pool.stats()
    assert [t.task_id for t in got] == [f"t{i}" for i in range(6)]
    assert any(len(t.turns) > 1 for t in got)
    for a, b in zip(got, want, strict=True):
        _same(a, b)
    m = r.metrics
    assert m["evictions"] > 0 and any(turn.recomputed for t in got for turn in t.turns)
    assert 0 < m["slot_occupancy"] <= 1 and m["tokens"] == sum(t.num_action_tokens for t in got)
    assert ps["steps"] == sum(len(t.rewards) for t in got) and ps["utilisation"] > 0


@pytest.mark.slow
def test_rewritten_context_on_a_process_pool_equals_rollout(params):
    """A context policy that rewrites each turn's input re-prefills the slot; environments
    stepped in other processes carry their state home between steps (else later observations
    would differ). Trajectories equal Rollout's, and their log-probs equal rescoring."""
    from agentjax.sampling.context import drop_oldest_observations
    from tests.sampling.test_rollout import _rescore_rows

    ctx = drop_oldest_observations(0)
    ref = Rollout(SAMPLER, Codec(TOK), CAPS, _specs(4), context=ctx)
    ref.start(params, 0)
    want = sorted(ref.advance(params, 0, jax.random.key(3)), key=lambda t: t.task_id)
    r = EngineRollout(Engine(SAMPLER, slots=2, chunk=2), Codec(TOK), CAPS, _specs(4), context=ctx)
    with EnvPool(2, "process") as pool:
        got = r.run(params, 0, jax.random.key(3), pool)
    assert any(len(t.turns) > 1 and not t.is_keep_all() for t in got)
    for a, b in zip(got, want, strict=True):
        _same(a, b)
    rescored, recorded = _rescore_rows(params, got)
    np.testing.assert_array_equal(rescored, recorded)


@pytest.mark.slow
def test_moe_routes_recorded_per_slot_equal_rollout():
    """MoE: the experts chosen at every position are recorded per slot, as Rollout records them."""
    from agentjax.testing.models import tiny_moe

    cfg = tiny_moe(vocab_size=TOK.vocab_size, max_seq_len=96, exact_tile=8)
    p = init_params(cfg, jax.random.key(1))
    sampler = Sampler(cfg, stop_tokens=(TOK.eos_id,))
    ref = Rollout(sampler, Codec(TOK), CAPS, _specs(3))
    ref.start(p, 0)
    want = sorted(ref.advance(p, 0, jax.random.key(4)), key=lambda t: t.task_id)
    r = EngineRollout(Engine(sampler, slots=2, chunk=4), Codec(TOK), CAPS, _specs(3))
    with EnvPool(2) as pool:
        got = r.run(p, 0, jax.random.key(4), pool)
    for a, b in zip(got, want, strict=True):
        _same(a, b)
        for x, y in zip(a.turns, b.turns, strict=True):
            assert x.routes is not None and x.routes.shape[0] == x.context.size + x.action.size
            np.testing.assert_array_equal(x.routes, y.routes)


def _in_rounds(params, episodes, budget, resume, *, slots, versions, ctx=None):
    """Runs ``episodes`` in rounds of ``budget`` action tokens (round k under ``versions[k]``,
    the same weights), resuming the paused ones each round; the final trajectories in order."""
    kw = {} if ctx is None else {"context": ctx}
    done, rounds = {}, 0
    todo = dict(enumerate(episodes))
    with EnvPool(2) as pool:
        while todo:
            keys = sorted(todo)
            r = EngineRollout(
                Engine(SAMPLER, slots=slots, chunk=3), Codec(TOK), CAPS, [todo[k] for k in keys], **kw
            )
            got = r.run(
                params,
                versions[min(rounds, len(versions) - 1)],
                jax.random.key(7),
                pool,
                round_budget=budget,
                resume=resume,
            )
            assert r.metrics["paused"] == len(r.paused)
            todo = {}
            for j, (k, t) in enumerate(zip(keys, got, strict=True)):
                if j in r.paused:
                    assert t.stop_reason == "round_budget_paused" and t.final_reward == 0.0
                    assert sum(u.action.size for u in t.turns) > 0 or t.turns == []
                    todo[k] = r.paused[j]
                else:
                    done[k] = t
            rounds += 1
            assert rounds < 40
    return [done[k] for k in sorted(done)], rounds


@pytest.mark.slow
@pytest.mark.parametrize(
    ("budget", "resume", "slots", "ctx"),
    [(1, "keep", 2, None), (3, "recompute", 5, None), (2, "recompute", 3, "drop"), (5, "keep", 3, "drop")],
)
def test_partial_rollout_on_the_engine_equals_the_unpaused_episode(params, budget, resume, slots, ctx):
    """Partial rollout on the slot engine: episodes paused every ``budget`` action tokens and
    resumed (KV kept, or their stream re-prefilled) under the same weights are bitwise the
    episodes that never paused, with a rewritten context too (where Rollout's rebuild once lost
    the paused action); the pauses and recomputes are recorded on the turns."""
    from agentjax.sampling.context import drop_oldest_observations

    policy = drop_oldest_observations(0) if ctx else None
    kw = {} if policy is None else {"context": policy}
    ref = Rollout(SAMPLER, Codec(TOK), CAPS, _specs(5), **kw)
    ref.start(params, 3)
    want = sorted(ref.advance(params, 3, jax.random.key(7)), key=lambda t: t.task_id)
    got, rounds = _in_rounds(params, _specs(5), budget, resume, slots=slots, versions=[3], ctx=policy)
    assert rounds > 1
    for a, b in zip(got, want, strict=True):
        _same(a, b)
    turns = [u for t in got for u in t.turns]
    assert any(u.pauses for u in turns)
    if resume == "recompute":  # (under keep, evictions re-prefill too)
        assert any(u.recomputed for u in turns)


@pytest.mark.slow
@pytest.mark.parametrize("resume", ["keep", "recompute"])
def test_partial_rollout_records_each_tokens_version_across_rounds(params, resume):
    """Rounds under versions 0, 1, 2, ...: every token carries the version of its round, an
    action cut by a pause spans versions, and the round budget bounds each round's tokens."""
    got, rounds = _in_rounds(params, _specs(4), 2, resume, slots=4, versions=list(range(40)))
    assert rounds > 2
    spans = [np.unique(u.version).size for t in got for u in t.turns]
    assert max(spans) > 1  # a paused action resumed under the next version
    for t in got:
        v = t.versions
        assert np.all(np.diff(v) >= 0)  # versions only move forward along an episode
        counts = np.bincount(v)
        assert counts.max() <= 2  # at most the round budget per round


@pytest.mark.slow
def test_rounds_fed_into_a_running_call_at_another_version_equal_their_own_runs(params):
    """Continuous admission (``run(feed=..., on_done=...)``): 3 episodes start at version 1 on 2
    slots; while they run, 3 more join at version 2 (other weights). Each episode is bitwise
    the one it gets in a call of its own at its version (every token made by its own version),
    and each is delivered the moment it ends, while others are still running."""
    other = init_params(CFG, jax.random.key(1))
    wrap = lambda e: RealLatency(e, 0.01)
    want = {}
    for p, v, specs in ((params, 1, _specs(6)[:3]), (other, 2, _specs(6)[3:])):
        ref = EngineRollout(Engine(SAMPLER, slots=2, chunk=3), Codec(TOK), CAPS, specs)
        with EnvPool(2, "thread") as pool:
            want.update({t.task_id: t for t in ref.run(p, v, jax.random.key(7), pool)})
    late = [Admission(s, other, 2) for s in _specs(6, wrap)[3:]]
    polls, delivered = [], []

    def feed():
        polls.append(len(polls))
        return [late.pop(0)] if len(polls) in (3, 5, 9) else []

    r = EngineRollout(Engine(SAMPLER, slots=2, chunk=3), Codec(TOK), CAPS, _specs(6, wrap)[:3])
    with EnvPool(2, "thread") as pool:
        got = r.run(
            params,
            1,
            jax.random.key(7),
            pool,
            feed=feed,
            on_done=lambda i, t: delivered.append((i, len(r.sl.open))),
        )
    assert not late and [t.task_id for t in got] == [f"t{i}" for i in range(6)]
    for t in got:
        _same(t, want[t.task_id])
        assert {int(v) for turn in t.turns for v in turn.version} == {1 if t.task_id < "t3" else 2}
    assert sorted(i for i, _ in delivered) == list(range(6))
    assert any(still_open > 0 for _, still_open in delivered)  # delivered before the call ended
    assert r.metrics["joined_running"] == 3 and r.metrics["generate_calls"] > r.metrics["chunks"]


@pytest.mark.slow
def test_a_call_that_fails_with_steps_in_flight_leaves_the_shared_pool_usable(params):
    """A call that raises while environment steps run (here its feed) leaves them on the worker's
    long-lived pool; the next call on that pool ignores their results (its rows reuse the same
    indices) and is bitwise the call that had the pool alone."""
    wrap = lambda e: RealLatency(e, 0.05)
    ref = EngineRollout(Engine(SAMPLER, slots=2, chunk=3), Codec(TOK), CAPS, _specs(3))
    with EnvPool(4, "thread") as pool:
        want = ref.run(params, 1, jax.random.key(7), pool)
    polls = []

    def feed():
        polls.append(1)
        if len(polls) == 4:
            raise RuntimeError("the scheduler's queue broke")
        return []

    with EnvPool(4, "thread") as pool:
        broken = EngineRollout(Engine(SAMPLER, slots=2, chunk=3), Codec(TOK), CAPS, _specs(3, wrap))
        with pytest.raises(RuntimeError, match="queue broke"):
            broken.run(params, 1, jax.random.key(7), pool, feed=feed)
        assert pool.in_flight > 0  # its steps are still running
        again = EngineRollout(Engine(SAMPLER, slots=2, chunk=3), Codec(TOK), CAPS, _specs(3, wrap))
        got = again.run(params, 1, jax.random.key(7), pool)
    for a, b in zip(got, want, strict=True):
        _same(a, b)


@pytest.mark.parametrize("slots,chunk,seed", [(2, 5, 11), (5, 2, 29)])
def test_every_driver_yields_the_same_trajectory(params, slots, chunk, seed):
    """The parity fixture on randomised cases: episode count, slots, chunk and sampling key
    drawn per case; lock-step Rollout and the slot engine give each episode the same record."""
    n = int(np.random.default_rng(seed).integers(3, 7))
    rng = jax.random.key(seed)
    want = lockstep(SAMPLER, Codec(TOK), CAPS, _specs(n), params, 2, rng)
    with EnvPool(2, "thread") as pool:
        got = on_engine(
            Engine(SAMPLER, slots=slots, chunk=chunk), Codec(TOK), CAPS, _specs(n), params, 2, rng, pool
        )
    assert_same_trajectories(got, want)


@pytest.mark.parametrize("max_tokens", [3, 9])
def test_an_episode_token_cap_ends_the_episode_as_task_cap_on_every_driver(params, max_tokens):
    """caps.max_tokens (action tokens over the whole episode) bites on both drivers, the same
    way: no episode generates more, and an episode that spent it ends as task_cap."""
    caps = Caps(max_tool_calls=4, max_action_tokens=4, max_obs_tokens=24, max_tokens=max_tokens)
    rng = jax.random.key(5)
    want = lockstep(SAMPLER, Codec(TOK), caps, _specs(4), params, 1, rng)
    with EnvPool(2, "thread") as pool:
        got = on_engine(Engine(SAMPLER, slots=2, chunk=3), Codec(TOK), caps, _specs(4), params, 1, rng, pool)
    assert_same_trajectories(got, want)
    assert all(t.num_action_tokens <= max_tokens for t in got)
    capped = [t for t in got if t.stop_reason == "task_cap"]
    assert capped and all(t.num_action_tokens == max_tokens for t in capped)
