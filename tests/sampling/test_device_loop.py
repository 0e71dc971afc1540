"""Episodes inside one jitted program (host callback for the environment) equal the host-stepped
Rollout's, bitwise in exact mode, for dense and MoE models."""

import jax
import numpy as np
import pytest

from agentjax.envs import minirepo
from agentjax.envs.protocol import InfraError
from agentjax.policy import init_params
from agentjax.policy.codec import Codec
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.sampling.device_loop import DeviceRollout
from agentjax.sampling.rollout import Caps, EpisodeSpec, Rollout
from agentjax.sampling.sampler import Sampler
from agentjax.testing.models import tiny_dense, tiny_moe
from agentjax.trajectory import StopReason

TOK = WordTokenizer(minirepo.vocabulary())
CAPS = Caps(max_tool_calls=4, max_action_tokens=4, max_obs_tokens=24)


class Broken(minirepo.MinirepoEnv):
    def step(self, action_text):  # a host failure, with its evidence (any other exception: the agent's)
        raise InfraError("sandbox died", {"host": "sandbox"})


def _specs(n, broken=()):
    return [
        EpisodeSpec(
            Broken() if i in broken else minirepo.MinirepoEnv(),
            minirepo.generate(i, "train"),
            i,
            task_id=f"t{i}",
            submit_index=i,
        )
        for i in range(n)
    ]


def _fields(t):
    out = [t.task_id, t.stop_reason, t.final_reward, t.label, t.rewards]
    for turn in t.turns:
        out += [
            turn.context.tolist(),
            turn.action.tolist(),
            turn.logp.tolist(),
            turn.logp_raw.tolist(),
            turn.version.tolist(),
            turn.observation.tolist(),
            None if turn.routes is None else turn.routes.tolist(),
        ]
    return out


@pytest.mark.parametrize("make", [tiny_dense, tiny_moe], ids=["dense", "moe"])
def test_device_loop_equals_host_rollout(make):
    cfg = make(vocab_size=TOK.vocab_size, max_seq_len=64, exact_tile=8)
    params = init_params(cfg, jax.random.key(0))
    sampler = Sampler(cfg, stop_tokens=(TOK.eos_id,))
    rng = jax.random.key(3)
    host = Rollout(sampler, Codec(TOK), CAPS, _specs(5, broken={2}), pad_to=8)
    host.start(params, version=4)
    want = sorted(host.advance(params, 4, rng), key=lambda t: t.task_id)
    got = DeviceRollout(sampler, Codec(TOK), CAPS, _specs(5, broken={2}), pad_to=8).run(params, 4, rng)
    assert [t.task_id for t in got] == [f"t{i}" for i in range(5)]
    for a, b in zip(got, want, strict=True):
        assert _fields(a) == _fields(b)
    assert got[2].stop_reason == StopReason.INFRA_FAULT and got[2].final_reward is None  # masked
    assert any(len(t.turns) > 1 for t in got)  # the loop really alternated with the environment
    assert all(np.all(turn.version == 4) for t in got for turn in t.turns)
