"""Sample episodes: a few evaluation trajectories rendered as decoded text, with their verdicts."""

import json

import numpy as np

from agentjax.diagnostics import episodes
from agentjax.policy.codec import Codec
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.trajectory import StopReason, Trajectory, Turn

TOK = WordTokenizer(["fix", "the", "bug", "in", "f", "ls", "tests", "pass", "fail", "submit"])
CODEC = Codec(TOK)


def _episode(task_id, label, reward, actions=("ls", "submit"), obs="tests fail"):
    turns, ctx = [], np.asarray(CODEC.prompt("fix the bug in f"), np.int32)
    for a in actions:
        act = np.asarray(CODEC.action_ids(a), np.int32)
        ob = np.asarray(CODEC.observation(obs), np.int32)
        z = np.zeros(act.size, np.float32)
        turns.append(Turn(ctx, act, z, z, np.zeros(act.size, np.int32), ob))
        ctx = np.concatenate([ctx, act, ob])
    stop = StopReason.INFRA_FAULT if reward is None else StopReason.FINISHED
    return Trajectory(task_id, "default", turns, stop, final_reward=reward, label=label)


def test_an_episode_renders_as_its_decoded_prompt_actions_and_observations():
    """Prompt and observations without their turn markers; actions as written (tool markers
    kept, the stop token not), unparsed."""
    text = episodes.render(_episode("t0", "fail", 0.0, actions=("<tool> ls </tool>", "submit")), CODEC)
    assert text.splitlines() == [
        "[prompt] fix the bug in f",
        "[action 1] <tool> ls </tool>",
        "[observation 1] tests fail",
        "[action 2] submit",
        "[observation 2] tests fail",
    ]


def test_a_long_episode_keeps_its_head_and_tail_within_the_bound():
    text = episodes.render(_episode("t0", "fail", 0.0, actions=("ls",) * 200), CODEC, max_chars=300)
    assert len(text) < 300 + 60 and "characters cut" in text
    assert text.startswith("[prompt] fix the bug in f") and text.endswith("[observation 200] tests fail")


def test_samples_show_each_verdict_first_then_task_order_bounded_and_json_ready():
    trajs = [
        _episode("a", "fail", 0.0),
        _episode("b", "fail", 0.0),
        _episode("c", "pass", 1.0),
        _episode("d", "infra_fault", None),
        _episode("e", "pass", 1.0),
    ]
    got = episodes.samples(trajs, CODEC, k=3)
    assert [s["task_id"] for s in got] == ["a", "c", "d"]  # one of each label
    assert [(s["label"], s["reward"], s["stop"]) for s in got] == [
        ("fail", 0.0, "finished"),
        ("pass", 1.0, "finished"),
        ("infra_fault", None, "infra_fault"),
    ]
    assert got[1]["text"].startswith("[prompt] fix the bug in f")
    assert json.loads(json.dumps(got)) == got
    same = [_episode(i, "pass", 1.0) for i in "vwxyz"]
    assert [s["task_id"] for s in episodes.samples(same, CODEC, k=2)] == ["v", "w"]
    assert episodes.samples([], CODEC) == []
