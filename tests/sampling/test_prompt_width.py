"""The prompt is not an observation: ``caps.max_obs_tokens`` cuts observations, never the task's
prompt (system prompt, tool schemas, task), on both rollout drivers; and the warm start's rows cut
their inputs by the same rule, so a model is trained on exactly the inputs it samples from.

(Before: the prompt was cut to ``max_obs_tokens + 2`` tokens. configs/codefix_learn.py's ~700-token
ChatML prompt lost its task text to a 512-token cap in every rollout while the warm start trained on
the whole prompt, and every sampled first action was garbage: RL start 0.000.)"""

import jax
import numpy as np
import pytest

from agentjax.envs import minirepo
from agentjax.learner.sft import demo_rows
from agentjax.policy import init_params
from agentjax.policy.codec import Codec, fit
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool
from agentjax.sampling.episode import EpisodeSpec, input_widths
from agentjax.sampling.queue import Caps
from agentjax.sampling.sampler import Sampler
from agentjax.testing.drivers import assert_same_trajectory, lockstep, on_engine
from agentjax.testing.models import tiny_dense

TOK = WordTokenizer(minirepo.vocabulary())
CODEC = Codec(TOK)
CFG = tiny_dense(vocab_size=TOK.vocab_size, max_seq_len=128, exact_tile=8)
ENV = minirepo.EnvConfig(max_steps=3)


def _specs(n):
    return [
        EpisodeSpec(
            minirepo.MinirepoEnv(ENV), minirepo.generate(i, "train"), 50 + i, task_id=f"t{i}", submit_index=i
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("obs_tokens", [1, 3])
def test_a_prompt_longer_than_an_observation_reaches_the_model_whole_on_both_drivers(obs_tokens):
    caps = Caps(max_tool_calls=3, max_action_tokens=4, max_obs_tokens=obs_tokens)
    prompts = [CODEC.prompt(minirepo.MinirepoEnv(ENV).reset(s.task, s.seed)) for s in _specs(3)]
    assert min(map(len, prompts)) > obs_tokens + 2  # the case that was cut
    sampler, params = Sampler(CFG, stop_tokens=(TOK.eos_id,)), init_params(CFG, jax.random.key(1))
    ref = lockstep(sampler, CODEC, caps, _specs(3), params, 0, jax.random.key(3))
    with EnvPool(2, "thread") as pool:
        got = on_engine(
            Engine(sampler, slots=2, chunk=2), CODEC, caps, _specs(3), params, 0, jax.random.key(3), pool
        )
    for a, b, p in zip(got, ref, prompts, strict=True):
        assert_same_trajectory(a, b)
        np.testing.assert_array_equal(a.turns[0].context, p)  # whole, not head + tail
        for t in a.turns:  # observations are still cut to the cap (+2 turn markers)
            assert t.observation.size <= obs_tokens + 2


def test_warm_start_rows_cut_prompt_and_observations_like_the_rollout():
    caps = Caps(max_tool_calls=3, max_action_tokens=4, max_obs_tokens=5)
    widths = input_widths(caps, 64)
    assert widths == (60, 7)
    obs = " ".join(["ok"] * 40)  # an observation of 40 words, far over the cap
    task = " ".join(["fix"] * 70)  # a prompt over the prompt width (64 - one action)
    rows = demo_rows([[(task, "ls"), (obs, "submit")]], CODEC, 128, widths)
    p, _ = fit(CODEC.prompt(task), widths[0], CODEC.keep_tail)
    a = CODEC.action_ids("ls")
    o, cut = fit(CODEC.observation(obs, after=a), widths[1], CODEC.keep_tail)
    want = p + a + o + CODEC.action_ids("submit")
    assert cut > 0 and len(p) == widths[0]
    np.testing.assert_array_equal(rows["tokens"][0, : len(want)], want)
    mask = rows["loss_mask"][0, : len(want)]
    assert mask.sum() == len(a) + len(CODEC.action_ids("submit")) and mask[len(p)] == 1


def test_the_training_loops_warm_start_rows_match_the_rollouts_inputs():
    """``loop.warm_start_rows`` (what ``launch.train``'s warm start trains on): a demonstration
    replayed through the lock-step rollout's own cut gives the same prompt and observations."""
    from agentjax.run.loop import warm_start_rows

    caps = Caps(max_tool_calls=3, max_action_tokens=4, max_obs_tokens=2)
    spec = _specs(1)[0]
    env = minirepo.MinirepoEnv(ENV)
    pairs = [(env.reset(spec.task, spec.seed), "ls")]
    pairs.append((env.step("ls").observation, "submit"))
    rows = warm_start_rows([pairs], CODEC, caps, CFG.max_seq_len)
    prompt = CODEC.prompt(pairs[0][0])
    a = CODEC.action_ids("ls")
    obs = CODEC.observation(pairs[1][0], after=a)
    assert len(obs) > caps.max_obs_tokens + 2 < len(prompt)  # both over an observation's width
    want = prompt + a + fit(obs, caps.max_obs_tokens + 2, CODEC.keep_tail)[0] + CODEC.action_ids("submit")
    np.testing.assert_array_equal(rows["tokens"][0, : len(want)], want)
