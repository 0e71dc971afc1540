"""Mistral tool calls: v0.3's ``[TOOL_CALLS] [{..., "id": ...}]`` with its 9-character call ids in
the tool message, and the newer ``[TOOL_CALLS]name[ARGS]{...}`` (``mistral_args``), through the
real templates' tool parts (tests/policy/test_toolformats.py) and a tiny BPE tokenizer built here.

Mistral v0.3's template refuses a tool message without the 9-character id of the call it
answers: the chat codec gives it the id of the reply's call (the one the model wrote, or one
derived from the reply), in the rollout and in the warm start's demonstrations alike."""

import jax
import pytest

from agentjax.envs.protocol import StepResult, ToolCallError
from agentjax.learner.sft import demo_rows
from agentjax.policy.chat import PROBE_ID, load_chat_tokenizer
from agentjax.policy.chat_codec import ChatCodec
from agentjax.tasks.codefix import TOOLS
from agentjax.toolcall import calls as toolcalls
from agentjax.toolcall import formats as toolformats
from tests.policy.test_toolformats import _openai_call, _tiny_dir

pytest.importorskip("transformers.utils.chat_parsing", reason="transformers >= 5 parses these formats")
USER = [{"role": "user", "content": "fix clamp"}]


def _codec(tmp_path, fmt, **kw):
    tok, chat = load_chat_tokenizer(_tiny_dir(tmp_path, fmt))
    return tok, chat, ChatCodec(tok, chat, tools=TOOLS, tool_format=fmt, **kw)


def test_the_tool_message_carries_the_id_of_the_call_it_answers(tmp_path):
    tok, chat, codec = _codec(tmp_path, "mistral")
    plain, result = "read m/core.py", "def clamp(x): ..."
    reply = toolcalls.render(plain, "mistral", TOOLS)
    cid = toolformats.call_id(reply)
    assert f'"id": "{cid}"' in reply and len(cid) == 9 and cid.isalnum() and cid != PROBE_ID
    msgs = [
        *USER,
        {"role": "assistant", "content": "", "tool_calls": [_openai_call(plain, reply)]},
        {"role": "tool", "content": result, "tool_call_id": cid},
    ]
    full = chat.render(msgs, tools=list(TOOLS))  # the template itself, ids checked by it
    head = chat.render(USER, tools=list(TOOLS), add_generation_prompt=True) + reply + chat.end_of_turn
    assert full.startswith(head) and f'"call_id": "{cid}"' in full
    ids = codec.action_ids(plain)
    assert codec.observation(result, after=ids) == tok.encode(full[len(head) :])
    assert codec.observation(result) != codec.observation(result, after=ids)  # not the probe's id
    # a model that writes its own id gets that id back
    own = '[TOOL_CALLS] [{"name": "read", "arguments": {"path": "a"}, "id": "Zx9Yw8Vu7"}]'
    assert '"call_id": "Zx9Yw8Vu7"' in tok.decode(
        codec.observation("x", after=tok.encode(own)), skip_specials=False
    )
    # and one that writes none, an id derived from its reply (the same every time)
    bare = '[TOOL_CALLS] [{"name": "read", "arguments": {"path": "a"}}]'
    assert toolformats.call_id(bare) == toolformats.call_id(bare) != toolformats.call_id(bare + " ")
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="length 9"):  # why the id is needed
        chat.render([*msgs[:2], {"role": "tool", "content": result}])


def test_demonstrations_answer_each_call_with_its_id(tmp_path):
    tok, _, codec = _codec(tmp_path, "mistral")
    rows = demo_rows([[("fix clamp", "read m/core.py"), ("def clamp", "test")]], codec, 8192)
    text = tok.decode(rows["tokens"][0][rows["positions"][0] < 8192].tolist(), skip_specials=False)
    cid = toolformats.call_id(toolcalls.render("read m/core.py", "mistral", TOOLS))
    assert f'"id": "{cid}"' in text and f'"call_id": "{cid}"' in text


def test_the_rollout_gives_the_tool_message_the_id_of_the_reply_it_answers(tmp_path):
    from agentjax.policy.config import ModelConfig
    from agentjax.policy.model import init_params
    from agentjax.sampling.episode import EpisodeSpec
    from agentjax.sampling.queue import Caps
    from agentjax.sampling.rollout import Rollout
    from agentjax.sampling.sampler import Sampler

    class Echo:
        def reset(self, task, seed):
            return "fix clamp"

        def step(self, action_text):
            return StepResult("ok", 0.0, False)

    tok, _, codec = _codec(tmp_path, "mistral", raw_replies=True)  # any reply reaches the env
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                         head_dim=16, d_ff=64, max_seq_len=2048)  # fmt: skip
    params = init_params(config, jax.random.key(0))
    caps = Caps(max_tool_calls=2, max_action_tokens=8, max_obs_tokens=400)
    ro = Rollout(Sampler(config, stop_tokens=(codec.stop,)), codec, caps, [EpisodeSpec(Echo(), 0, 0, "t0")])
    ro.start(params, 0)
    (traj,) = ro.advance(params, 0, jax.random.key(1))
    first = traj.turns[0]
    assert first.observation.tolist() == codec.observation("ok", after=first.action.tolist())
    assert first.observation.tolist() != codec.observation("ok")


def test_mistral_args_calls_parse_with_transformers_and_round_trip(tmp_path):
    tok, chat, codec = _codec(tmp_path, "mistral_args")
    assert toolcalls.parse('[TOOL_CALLS]read[ARGS]{"path": "a"}', "mistral_args", TOOLS) == "read a"
    with_id = 'Reading. [TOOL_CALLS]read[CALL_ID]abc123XYZ[ARGS]{"path": "a"}'
    assert toolcalls.parse(with_id, "mistral_args", TOOLS) == "read a"
    assert toolformats.call_id(with_id) == "abc123XYZ"
    assert toolcalls.has_call(with_id, "mistral_args") and not toolcalls.has_call("read a", "mistral_args")
    for reply, match in (
        ("just text", "no mistral_args tool call"),
        ('[TOOL_CALLS]read[ARGS]{"path": ', "does not parse"),
        ('[TOOL_CALLS]rm[ARGS]{"path": "a"}', "unknown tool 'rm'"),
        ('[TOOL_CALLS]read[ARGS]{"file": "a"}', "unknown arguments"),
    ):
        with pytest.raises(ToolCallError, match=match):
            toolcalls.parse(reply, "mistral_args", TOOLS)
    plain = "write m/core.py\nx = 1\n"
    reply = toolcalls.render(plain, "mistral_args", TOOLS)
    assert reply == '[TOOL_CALLS]write[ARGS]{"path": "m/core.py", "body": "x = 1"}'
    ids = codec.action_ids(plain)
    assert ids[-1] == codec.stop and codec.action_text(ids) == plain.strip("\n")
