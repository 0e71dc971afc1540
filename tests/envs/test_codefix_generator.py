"""Generated codefix tasks: determinism, the (family, template) split, validation, the real verifier."""

import dataclasses
import os
import shutil

import pytest

from agentjax import tasks as task_registry
from agentjax.envs.codefix import api
from agentjax.envs.codefix.agents import oracle, play
from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.envs.codefix.generated import catalogue, check, render, store, templates
from agentjax.envs.codefix.generated.templates import Site, Template
from agentjax.envs.protocol import Label
from agentjax.policy.config import ConfigError
from agentjax.run import config as runconfig
from configs import codefix_generated

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTJAX_CACHE", str(tmp_path / "cache"))  # never a stale validation


def _files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def test_same_seed_gives_byte_identical_task_files_and_another_seed_differs(tmp_path):
    a, b, c = (store.draw(8, "train", seed)[0] for seed in (0, 0, 1))
    for t in a:
        store.write_task(t, str(tmp_path / "a"))
    for t in b:
        store.write_task(t, str(tmp_path / "b"))
    files_a = _files(tmp_path / "a")
    assert files_a and files_a == _files(tmp_path / "b")
    assert [dataclasses.asdict(t) for t in a] == [dataclasses.asdict(t) for t in b]
    assert [dataclasses.asdict(t)["files"] for t in a] != [dataclasses.asdict(t)["files"] for t in c]


def _pairs_drawn(split, seeds=(0, 1, 2), n=40):
    return {(t.family, t.template) for s in seeds for t in store.draw(n, split, s)[0]}


def test_split_is_by_family_and_template_disjoint_and_every_family_on_both_sides():
    split = templates.split_of(catalogue.registry())
    train, held = _pairs_drawn("train"), _pairs_drawn("heldout")
    assert not train & held
    assert all(split[p] == "train" for p in train) and all(split[p] == "heldout" for p in held)
    assert {f for f, _ in train} == {f for f, _ in held} == set(templates.FAMILIES)
    assert held == {p for p, s in split.items() if s == "heldout"}  # every held-out pair is used
    per_family = {
        f: sum(1 for (g, _), s in split.items() if g == f and s == "train") for f in templates.FAMILIES
    }
    assert min(per_family.values()) >= 2  # several templates per family to train on


def test_split_leak_check_catches_a_split_by_task_instead_of_by_pair(monkeypatch):
    """Mutation-style: a split that draws held-out TASKS from every pair must be caught."""
    every = templates.pairs(catalogue.registry())
    monkeypatch.setattr(store, "pairs_for", lambda split: every if split == "train" else every[::-1])
    assert _pairs_drawn("train", seeds=(0,)) & _pairs_drawn("heldout", seeds=(0,))


_STATEFUL = Template(
    name="stateful",
    domain="test",
    packages=("broken",),
    helpers="CALLS = []\n",
    core='''from .helpers import CALLS


def bump(x):
    """x + 1 (the reference depends on how often it was called: not reproducible)."""
    CALLS.append(x)
    return x @@op@@ len(CALLS)


def ident(x):
    return x
''',
    docs={"bump": "bump(x) is x + 1.", "ident": "ident(x) is x."},
    args={"bump": lambda r: [r.randint(0, 50)], "ident": lambda r: [r.randint(0, 9)]},
    sites={"op": Site("arithmetic", "bump", "+", ("-",))},
)
_UNCAUGHT = dataclasses.replace(
    _STATEFUL,
    name="uncaught",
    helpers="K = 1\n",
    core="from .helpers import K\n\n\ndef bump(x):\n    return x + K@@op@@\n\n\n"
    "def ident(x):\n    return x\n",
    sites={"op": Site("off_by_one", "bump", "", (" * 1",))},
)


def test_validation_drops_a_reference_that_fails_and_a_bug_no_test_catches(monkeypatch):
    task = render.render(_STATEFUL, "op", "train", 0, 0)
    assert any(r.startswith("reference_fails") for r in check.validate(task))
    dropped = render.render(_UNCAUGHT, "op", "train", 0, 0)
    assert isinstance(dropped, render.Dropped) and dropped.reason.startswith("bug_not_caught")
    # through the generator: both are dropped with their reason, never used
    reg = {"stateful": _STATEFUL, "uncaught": _UNCAUGHT}
    monkeypatch.setattr(catalogue, "registry", lambda: reg)
    monkeypatch.setattr(store, "pairs_for", lambda split: templates.pairs(reg))
    with pytest.raises(RuntimeError, match="only 0 of 2"):
        store.draw(2, "train", 0)
    monkeypatch.setattr(store, "MAX_DRAWS", 0)
    kept, why = [], []
    try:
        kept, why = store.draw(1, "train", 0)
    except RuntimeError as e:
        why = [str(e)]
    assert not kept and "reference_fails" in why[0] and "bug_not_caught" in why[0]


def test_every_known_wrong_fix_is_rejected_on_the_host():
    kept, dropped = store.draw(40, "heldout", 0)
    assert len(dropped) <= 4 and all(d.reason for d in dropped)
    for t in kept:
        assert check.validate(t) == []
        assert "hardcode_visible" in t.wrongs and len(t.wrongs) >= 2
        assert t.cases[0]["call"] == f"{t.package}:{t.fn}" and t.patch.startswith("--- a/")
        # a wrong fix that only swaps in another text at the site fails some hidden case
        for overlay in t.wrongs.values():
            assert check.failures({**t.files, **overlay}, t.package, t.cases)


def _tree(tmp_path, task, overlay, tag):
    d = str(tmp_path / tag)
    shutil.copytree(task.repo_dir, d)
    for rel, text in overlay.items():
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)
    return d


@needs_sandbox
def test_sample_through_the_real_verifier_reference_passes_bug_and_wrong_fixes_fail(tmp_path):
    held = store.tasks(6, "heldout", 0)
    sample = list({t.generated["family"]: t for t in held}.values())[:3]
    for t in sample:
        assert api.load_task(t.name) is t and os.path.isfile(os.path.join(t.generated["dir"], "fix.patch"))
        assert api.verify(t, _tree(tmp_path, t, t.reference, f"{t.name}-ref")).label is Label.PASS
        assert api.verify(t, _tree(tmp_path, t, {}, f"{t.name}-bug")).label is Label.FAIL
        for i, overlay in enumerate(t.generated["wrong_fixes"].values()):
            assert api.verify(t, _tree(tmp_path, t, overlay, f"{t.name}-w{i}")).label is Label.FAIL
        gone = _tree(tmp_path, t, t.reference, f"{t.name}-del")
        os.remove(os.path.join(gone, "tests", "test_visible.py"))
        assert api.verify(t, gone).label is Label.REWARD_HACK
    env = CodefixEnv(EnvConfig(max_steps=4))
    try:
        _, final = play(env, sample[0], oracle)  # the scripted demonstrator solves a generated task
    finally:
        env.close()
    assert final.verdict.label is Label.PASS
    assert [t.name for t in store.tasks(6, "heldout", 0)] == [t.name for t in held]  # cached


def _run(tmp_path, **kwargs):
    c = codefix_generated.get_config()
    c.model.hf_path = str(tmp_path)
    c.task.kwargs = kwargs
    return runconfig.parse(c)


def test_config_parses_with_128_heldout_and_bad_kwargs_fail_naming_the_field(tmp_path):
    run = _run(tmp_path, generated=256)
    assert run.task.name == "codefix" and run.task.eval_tasks >= 128
    assert codefix_generated.get_config().task.kwargs["generated"] > 0
    for kwargs, field in (
        ({"generated": -1}, "task.kwargs.generated"),
        ({"generated": 2, "demo_tasks": 0}, "task.kwargs.demo_tasks"),
        ({"generated": 2, "seed": "x"}, "task.kwargs.seed"),
        ({"generated": 2, "heldout_pairs": 3}, "task.kwargs"),
        ({"generated": 2, "eval_pairs": "test"}, "task.kwargs.eval_pairs"),
        ({"eval_pairs": "train"}, "task.kwargs.eval_pairs"),  # bundled tasks have no pairs
    ):
        with pytest.raises(ConfigError, match=field):
            task_registry.make(_run(tmp_path, **kwargs))


@needs_sandbox
def test_eval_pairs_train_evaluates_fresh_draws_of_the_training_pairs_and_says_so(tmp_path):
    c = codefix_generated.get_config()
    c.model.hf_path = str(tmp_path)
    c.task.eval_tasks, c.task.kwargs = 3, {"generated": 4, "eval_pairs": "train"}
    suite = task_registry.make(runconfig.parse(c))
    trained = {t.name for t in suite.train}
    assert len(suite.heldout) == 3 and not trained & {t.name for t in suite.heldout}
    assert all("-train" in t.name for t in suite.heldout)  # gen<seed>-train<i>-<family>-<template>
    assert suite.eval_set != "held-out"  # the log, header and report name what was evaluated
    c.task.kwargs = {"generated": 4}
    default = task_registry.make(runconfig.parse(c))
    assert all("-heldout" in t.name for t in default.heldout) and default.eval_set == "held-out"


def test_codefix_learn_config_is_the_real_time_slot_engine_run_on_generated_tasks(tmp_path):
    from configs import codefix_learn

    c = codefix_learn.get_config()
    c.model.hf_path = str(tmp_path)
    run = runconfig.parse(c)
    assert run.task.name == "codefix" and run.task.eval_tasks >= 128 and run.task.kwargs["generated"] > 0
    assert run.scheduler.clock == "real" and run.scheduler.engine_slots > 0
    assert run.model.tool_format == "hermes" and tuple(run.codefix.agents) == ("editor",)
    assert set(run.codefix.tools) == {"read", "edit", "patch", "test", "submit"}
    assert run.task.kwargs["rename"] > 0  # warm-start rows renamed (augment.rename)


@needs_sandbox
def test_the_imperfect_demonstrator_reads_patches_a_diff_and_passes_when_it_chose_the_fix():
    from agentjax.envs.codefix import agents, edits
    from agentjax.envs.codefix.env import CodefixEnv, EnvConfig

    tasks = store.tasks(4, "heldout", 0)
    env = CodefixEnv(EnvConfig(max_steps=6))
    try:
        for task in tasks:
            actions = agents.demonstrator(task)
            assert [a.split("\n")[0].split(" ")[0] for a in actions] == [
                "read",
                "test",
                "patch",
                "test",
                "submit",
            ]
            obs, final = agents.play(env, task, agents.demonstrator)
            assert "Applied patch" in obs[3]
            diff = actions[2].split("\n", 1)[1]
            right = diff == edits.unified_diff(task, task.reference)
            assert final.verdict.label == (Label.PASS if right else Label.FAIL), task.name
    finally:
        env.close()
    # the share it gets right, over many tasks' names (no sandbox): about DEMONSTRATOR_SUCCESS
    named = store.tasks(64, "train", 0)
    share = (
        sum(agents.demonstrator(t)[2] == "patch\n" + edits.unified_diff(t, t.reference) for t in named) / 64
    )
    assert 0.45 <= share <= 0.75
