"""A HF policy in the rollout: chat-template turns, and a malformed tool call is an agent_error."""

import jax
import numpy as np

from agentjax.envs.protocol import StepResult
from agentjax.policy.chat import load_chat_tokenizer
from agentjax.policy.chat_codec import ChatCodec
from agentjax.policy.hf import load_hf_checkpoint
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.queue import Caps
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler
from agentjax.tasks.codefix import TOOLS


class _Echo:
    """Never reached by a malformed call; counts the steps it is given."""

    steps = 0

    def reset(self, task, seed):
        return f"task {task}"

    def step(self, action_text):
        self.steps += 1
        return StepResult(observation="ok", reward=0.0, done=False)


def test_random_hf_policy_replies_are_agent_errors_with_the_parse_error(tiny_hf_dir):
    tok, chat = load_chat_tokenizer(tiny_hf_dir)
    codec = ChatCodec(tok, chat, tools=TOOLS[:2])  # short prompt: two tool schemas
    config, params = load_hf_checkpoint(tiny_hf_dir, max_seq_len=512)
    envs = [_Echo() for _ in range(2)]
    specs = [EpisodeSpec(e, i, i, task_id=f"t{i}") for i, e in enumerate(envs)]
    caps = Caps(max_tool_calls=3, max_action_tokens=6, max_obs_tokens=400)
    ro = Rollout(Sampler(config, stop_tokens=(codec.stop,)), codec, caps, specs)
    ro.start(params, 0)
    trajs = ro.advance(params, 0, jax.random.key(0))
    assert len(trajs) == 2 and all(e.steps == 0 for e in envs)
    for t in trajs:
        assert t.stop_reason.value == "agent_error" and t.label == "agent_error"
        assert t.final_reward == 0.0 and "tool_call" in t.reward_evidence["tool_call_error"]
        assert len(t.turns) == 1 and t.turns[0].action.size == 6
        # the prompt is the template's rendering: system with the tools, user turn, generation prompt
        assert tok.decode(t.turns[0].context.tolist()).endswith(
            "task 0<|im_end|>\n<|im_start|>assistant\n"
        ) or tok.decode(t.turns[0].context.tolist()).endswith("task 1<|im_end|>\n<|im_start|>assistant\n")
    assert np.all([t.num_action_tokens == 6 for t in trajs])
