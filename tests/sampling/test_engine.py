"""Slot engine: continuous batching keeps exact mode bitwise; waiting slots are untouched."""

import jax
import numpy as np
import pytest

from agentjax.policy.model import init_params
from agentjax.sampling.engine import Engine
from agentjax.sampling.sampler import Sampler, Status
from agentjax.testing.models import tiny_dense

CFG = tiny_dense(max_seq_len=48, exact_tile=8)
SLOTS = 8


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(0))


@pytest.fixture(scope="module")
def engine():
    return Engine(Sampler(CFG, stop_tokens=(3,)), slots=SLOTS, chunk=3)


def _prompt(i):
    rng = np.random.default_rng(100 + i)
    return rng.integers(4, CFG.vocab_size, size=5 + (i * 7) % 13)


def _key(i):
    return jax.random.fold_in(jax.random.key(42), i)


def _keys(owner):
    return jax.numpy.stack([_key(max(o, 0)) for o in owner])


def _run(params, engine, episodes, plan, chunk=None):
    """Continuous batching: ``plan`` is the order episodes are admitted, each into the lowest free
    slot at the next chunk (an ended episode frees its slot at once). Returns per episode its
    slot(s) and the concatenated (tokens, logp, logp_raw, version)."""
    eng = engine if chunk is None else Engine(engine.sampler, engine.slots, chunk)
    state, owner, left = eng.init(), [-1] * SLOTS, {e: n for e, n in episodes.items()}
    out = {e: [[], [], [], []] for e in episodes}
    slots, queue = {}, list(plan)
    while queue or any(o >= 0 for o in owner):
        for s in range(SLOTS):
            if owner[s] < 0 and queue:
                e = queue.pop(0)
                state = eng.insert(eng.prefill(params, _prompt(e), version=1), state, s)
                owner[s], slots[e] = e, s
        remaining = [left[o] if o >= 0 else 0 for o in owner]
        state, span = eng.generate(params, state, _keys(owner), remaining, version=1)
        for s, rec in enumerate(eng.records(state, span)):
            e = owner[s]
            if e < 0:
                continue
            for acc, x in zip(out[e], rec[:4], strict=True):
                acc.extend(x.tolist())
            left[e] -= rec.tokens.size
            if rec.status in (Status.STOPPED, Status.FULL) or left[e] == 0:
                owner[s] = -1  # ended: the slot is free for the next episode now
    return slots, {e: [np.asarray(x) for x in v] for e, v in out.items()}


def test_episode_alone_equals_episode_among_seven_others_in_another_slot(params, engine):
    """Exact mode: same tokens and log-probs bitwise whatever the slot, the slot-mates (admitted
    and ending at other times) and the chunking."""
    episodes = {0: 14, **{i: 2 + (5 * i) % 11 for i in range(1, 12)}}
    alone_slots, alone = _run(params, engine, {0: 14}, [0], chunk=64)  # slot 0, one call
    plan = [*range(1, 9), 0, *range(9, 12)]  # episode 0 waits for a freed slot
    crowd_slots, crowd = _run(params, engine, episodes, plan)
    assert alone_slots[0] == 0 and crowd_slots[0] != 0
    assert alone[0][0].size == 14 or alone[0][0][-1] == 3
    for a, b in zip(alone[0], crowd[0], strict=True):
        np.testing.assert_array_equal(a, b)
    assert (crowd[0][3] == 1).all()


def test_waiting_slot_is_untouched_and_eviction_recompute_continues_bitwise(params, engine):
    """A slot given no budget comes out of ``generate`` unchanged (cache included); appending an
    observation to its kept cache, or re-prefilling its whole context into another slot after
    eviction, continue with the same tokens (same parameters: exact prefill == cached K/V)."""
    state = engine.init()
    for s in range(SLOTS):
        state = engine.insert(engine.prefill(params, _prompt(s), version=0), state, s)
    keys = _keys(list(range(SLOTS)))
    state, _ = engine.generate(params, state, keys, [3] * SLOTS, version=0)
    before = jax.device_get(engine.take(state, 2))
    remaining = [3] * SLOTS
    remaining[2] = 0  # slot 2 waits on its environment
    state, span = engine.generate(params, state, keys, remaining, version=0)
    after = jax.device_get(engine.take(state, 2))
    for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True):
        if x.ndim == 5:  # KV cache: the write sink (slot max_seq_len) is never read
            x, y = x[..., : CFG.max_seq_len, :], y[..., : CFG.max_seq_len, :]
        np.testing.assert_array_equal(x, y)
    assert engine.records(state, span)[2].tokens.size == 0
    obs = np.array([7, 8, 9, 10], np.int32)
    copy = jax.tree.map(jax.numpy.copy, state)
    # kept: append the observation to the slot's own row and cache
    kept = engine.insert(engine.prefill(params, obs, version=0, row=engine.take(state, 2)), state, 2)
    # evicted: slot 2 went to someone else; the episode comes back in slot 6 from host tokens
    host = np.asarray(after.tokens[0, : int(after.length[0])])
    evicted = engine.insert(engine.prefill(params, np.concatenate([host, obs]), version=0), copy, 6)
    only = lambda s: [5 if i == s else 0 for i in range(SLOTS)]
    kk = keys.at[6].set(keys[2])
    kept, span_k = engine.generate(params, kept, keys, only(2), version=0)
    evicted, span_e = engine.generate(params, evicted, kk, only(6), version=0)
    rk, re_ = engine.records(kept, span_k)[2], engine.records(evicted, span_e)[6]
    assert rk.tokens.size == engine.chunk
    for a, b in zip(rk[:5], re_[:5], strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_slot_and_budget_shape_are_clear_errors(params, engine):
    state = engine.init()
    with pytest.raises(ValueError, match="slot=8 is out of range"):
        engine.take(state, SLOTS)
    with pytest.raises(ValueError, match="remaining has shape"):
        engine.generate(params, state, _keys([0] * SLOTS), [1, 2], version=0)
    with pytest.raises(ValueError, match="engine.slots=0"):
        Engine(engine.sampler, slots=0)


def test_warm_up_compiles_every_program_a_run_needs(params, engine):
    """After ``warm_up`` no prefill width, insert, take or generate compiles again (a real-time
    run must not stall on compilation)."""
    from agentjax.sampling import engine as engine_lib
    from agentjax.sampling import sampler as sampler_lib

    engine.warm_up(params)
    fns = (sampler_lib._extend, sampler_lib._generate, engine_lib._insert, engine_lib._take)
    before = [f._cache_size() for f in fns]
    state = engine.init()
    for n in range(1, CFG.max_seq_len + 1, 5):
        row = engine.prefill(params, _prompt(n)[:1].repeat(n), version=0)
        state = engine.insert(engine.prefill(params, [5], version=0, row=row), state, n % SLOTS)
        state = engine.insert(engine.take(state, 0), state, 1)
    state, span = engine.generate(params, state, _keys(list(range(SLOTS))), [2] * SLOTS, version=0)
    assert [f._cache_size() for f in fns] == before
