"""The built-in dataset task: JSONL prompts, a verifier named by import path, a held-out split,
faults attributed like the built-ins; trained by launch.train from a random init."""

import json

import pytest

from agentjax import tasks
from agentjax.envs.protocol import Label
from agentjax.policy.config import ConfigError
from agentjax.run import config as runconfig
from agentjax.tasks.dataset import VERIFIER_VERSION, DatasetEnv, Item
from configs import smoke
from examples.dataset_verifiers import write_pick_dataset
from tests.runs import read_metrics, train_dataset_task

VERIFIER = "examples.dataset_verifiers:first_word"


def _broken(record, reply):
    raise RuntimeError("the grader's database is down")


def test_replies_are_judged_and_faults_attributed():
    recs = {"train": [{"prompt": "first red blue", "answer": "red"}]}
    env = DatasetEnv(recs, lambda r, reply: 0.5 if reply == "almost" else float(reply == r["answer"]))
    item = Item("train", 0, "t0")
    for reply, label, reward in (
        ("red", Label.PASS, 1.0),
        ("almost", Label.FAIL, 0.5),
        ("  ", Label.AGENT_ERROR, 0.0),
    ):
        assert env.reset(item, 0) == "first red blue"
        v = env.step(reply).verdict
        assert (v.label, v.reward) == (label, reward), reply
    env = DatasetEnv(recs, _broken)  # the verifier's failure is not the agent's: masked, retried
    env.reset(item, 0)
    res = env.step("red")
    assert res.verdict.label is Label.INFRA_FAULT and res.verdict.trained_reward is None
    assert "database is down" in res.verdict.evidence["verifier_error"]


def _cfg(**kwargs):
    c = smoke.get_config()
    c.task.name = "dataset"
    c.task.kwargs = kwargs
    return runconfig.parse(c)


def test_bad_dataset_settings_are_named(tmp_path):
    path = tmp_path / "d.jsonl"
    write_pick_dataset(path)
    for kwargs, match in (
        ({}, r"task.name='dataset' needs task.kwargs.path"),
        ({"path": str(tmp_path / "none.jsonl"), "verifier": VERIFIER}, r"task.kwargs.path=.* is not a file"),
        (
            {"path": str(path), "verifier": "examples.dataset_verifiers:nope"},
            r"task.kwargs.verifier=.* no attribute",
        ),
    ):
        with pytest.raises(ConfigError, match=match):
            tasks.make(_cfg(**kwargs))
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{"answer": 1}\n')
    with pytest.raises(ConfigError, match=r"line 2 has no string 'prompt'"):
        tasks.make(_cfg(path=str(tmp_path / "bad.jsonl"), verifier=VERIFIER))
    suite = tasks.make(_cfg(path=str(path), verifier=VERIFIER))
    assert len(suite.heldout) == 16 and len(suite.records["train"]) == 60 - 16  # last 16 lines held out
    held = {r["prompt"] for r in suite.records["heldout"]}
    assert not held & {r["prompt"] for r in suite.records["train"]}


def test_a_jsonl_dataset_learns_from_a_random_init(tmp_path):
    """Warm start on the dataset's answers, then RL on the verifier's rewards: held-out success
    >= 25 points over the random init's (measured here on the same split and seed)."""
    import jax

    from agentjax.evaluation.checkpoint import heldout_figures
    from agentjax.evaluation.common import run_parts
    from agentjax.policy.model import init_params

    path = tmp_path / "pick.jsonl"
    write_pick_dataset(path)
    wd = tmp_path / "run"
    train_dataset_task(
        wd,
        VERIFIER,
        f"--config.task.kwargs.path={path}",
        "--config.task.eval_tasks=16",
        "--config.warm_start.steps=100",
        "--config.rl.steps=2",
        "--config.rl.eval_every=2",
    )
    rows = read_metrics(wd)
    start = rows[0]["header"]["rl_start_success"]
    final = [r for r in rows if "eval/success" in r][-1]
    assert final["eval/n"] == 16
    cfg = json.load(open(wd / "run_config.json"))
    parts = run_parts(cfg, None)
    random_init = heldout_figures(parts, init_params(parts.model, jax.random.key(0)), 0, False)["greedy"]
    assert max(start, final["eval/success"]) >= random_init["eval/success"] + 0.25, (
        random_init,
        start,
        final,
    )


def test_a_multi_turn_dataset_calls_its_tool_reads_the_result_and_is_verified(tmp_path):
    """Records declaring a tool (``lookup``, by import path): the trained policy's episodes call
    it, the tool's result is the next observation the model reads, and the reply after it is the
    answer the verifier judges (journaled with the calls made)."""
    import collections

    from agentjax.evaluation.common import run_parts
    from agentjax.learner.journal import Journal
    from examples.dataset_verifiers import COLOURS, write_lookup_dataset

    path = tmp_path / "lookup.jsonl"
    write_lookup_dataset(path)
    wd = tmp_path / "run"
    train_dataset_task(
        wd,
        VERIFIER,
        f"--config.task.kwargs.path={path}",
        "--config.task.kwargs.max_turns=3",
        "--config.task.eval_tasks=8",
        "--config.warm_start.steps=200",
        "--config.rl.steps=2",
        "--config.rl.eval_every=2",
    )
    tok = run_parts(json.load(open(wd / "run_config.json")), None).codec.tokenizer
    trajs = Journal(wd / "journal.bin").read()
    called = [t for t in trajs if t.reward_evidence.get("tool_calls")]
    assert len(called) >= len(trajs) // 2, collections.Counter(t.label for t in trajs)
    for t in called:
        calls = t.reward_evidence["tool_calls"]  # the calls that ran, each turn's result read next
        assert len(t.turns) == len(calls) + 1, (calls, len(t.turns))
        for turn, call in zip(t.turns, calls, strict=False):
            name, thing = call.split()
            assert name == "lookup" and tok.decode(turn.observation, skip_specials=True) == COLOURS[thing]
        assert t.verifier_version == VERIFIER_VERSION  # the episode ended on the env's verdict
    judged = [t for t in called if "reply" in t.reward_evidence]  # the answer, verified
    assert len(judged) >= len(called) // 2 and all(t.label in ("pass", "fail") for t in judged)
    assert any(t.label == "pass" for t in judged), collections.Counter(t.label for t in called)
    final = [r for r in read_metrics(wd) if "eval/success" in r][-1]
    assert final["eval/success"] > 0, final
