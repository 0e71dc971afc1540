"""The drivers' parity fixture: every rollout driver yields the same trajectory.

Lock-step :class:`~agentjax.sampling.rollout.Rollout` and the slot engine's
:class:`~agentjax.sampling.engine_rollout.EngineRollout` generate differently (one batch in
lock-step vs slots admitted as they free, environments stepped inline vs on a pool) and keep
each episode's record through the same :mod:`agentjax.sampling.episode`. In exact mode an
episode's record is then the same bits whichever driver ran it::

    want = lockstep(sampler, codec, caps, make_specs(), params, version, rng)
    got = on_engine(engine, codec, caps, make_specs(), params, version, rng, pool)
    assert_same_trajectories(got, want)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentjax.sampling.engine_rollout import EngineRollout
from agentjax.sampling.rollout import Rollout
from agentjax.trajectory import Trajectory

TURN_FIELDS = ("context", "action", "logp", "logp_raw", "version", "observation", "routes")


def lockstep(sampler, codec, caps, specs, params, version: int, rng, **kw) -> list[Trajectory]:
    """Every episode of ``specs`` run to its end by lock-step Rollout, in episode order."""
    r = Rollout(sampler, codec, caps, specs, **kw)
    r.start(params, version)
    return sorted(r.advance(params, version, rng), key=lambda t: t.submit_index)


def on_engine(engine, codec, caps, specs, params, version: int, rng, pool, **kw) -> list[Trajectory]:
    """Every episode of ``specs`` run to its end on the slot engine, in episode order."""
    return EngineRollout(engine, codec, caps, specs, **kw).run(params, version, rng, pool)


def assert_same_trajectory(a: Trajectory, b: Trajectory) -> None:
    """The two records of one episode are the same: outcome, rewards and every turn's tokens,
    log-probs, versions, observation and routes, bitwise."""
    assert (a.task_id, a.stop_reason, a.final_reward, a.label) == (
        b.task_id,
        b.stop_reason,
        b.final_reward,
        b.label,
    )
    assert a.rewards == b.rewards and len(a.turns) == len(b.turns)
    for x, y in zip(a.turns, b.turns, strict=True):
        for f in TURN_FIELDS:
            u, v = getattr(x, f), getattr(y, f)
            assert (u is None) == (v is None), f
            if u is not None:
                np.testing.assert_array_equal(u, v, err_msg=f)


def assert_same_trajectories(got: Sequence[Trajectory], want: Sequence[Trajectory]) -> None:
    assert [t.task_id for t in got] == [t.task_id for t in want]
    for a, b in zip(got, want, strict=True):
        assert_same_trajectory(a, b)
