"""The compact ``edit`` tool (str-replace in the sandbox), the ``editor`` demonstrator built on it,
and ``codefix.tools`` (the tool schemas a model is offered)."""

import os
import shutil

import pytest

from agentjax.envs.codefix import agents, edits
from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.envs.codefix.generated import store
from agentjax.envs.protocol import Label, format_tool_call
from agentjax.toolcall import calls as toolcalls

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)


@needs_sandbox
def test_edit_replaces_exactly_one_occurrence_inside_the_sandbox():
    task = store.tasks(1, "train", 0)[0]  # arithmetic/count_between: `n -= 1` for `n += 1`
    path = f"{task.package}/core.py"
    env = CodefixEnv(EnvConfig(max_steps=8))
    host_file = "/tmp/agentjax-edit-host-target.txt"
    with open(host_file, "w") as f:
        f.write("x = 1\n")
    try:
        env.reset(task, 0)
        before = env.step(format_tool_call("read", path)).observation
        missing = env.step(format_tool_call("edit", path, "no such text", body="y"))
        assert "occurs 0 times" in missing.observation and "[exit 1]" in missing.observation
        twice = env.step(format_tool_call("edit", path, "return", body="yield"))  # not unique: unchanged
        assert "must occur exactly once" in twice.observation
        assert env.step(format_tool_call("read", path)).observation == before
        # a symlink out of the workspace is followed inside the sandbox only (host file untouched)
        env.step(f"run ln -s {host_file} {task.package}/evil.py")
        env.step(format_tool_call("edit", f"{task.package}/evil.py", "x = 1", body="x = 2"))
        with open(host_file) as f:
            assert f.read() == "x = 1\n"
    finally:
        env.close()
        os.remove(host_file)


@needs_sandbox
def test_editor_fixes_with_one_edit_and_its_wrong_share_fails():
    tasks = store.tasks(12, "train", 0)
    env = CodefixEnv(EnvConfig(max_steps=6))
    labels, n_edit = [], 0
    try:
        for task in tasks:
            actions = agents.editor(task)
            assert actions[0].startswith("read ") and actions[-1] == "submit" and len(actions) == 3
            n_edit += actions[1].startswith("edit ")
            _, final = agents.play(env, task, agents.editor)
            labels.append(final.verdict.label)
            ref = edits.edit_call(task, task.reference)
            if ref is not None:  # the reference as one edit passes
                _, ok = agents.play(env, task, lambda t, ref=ref: ["read x", ref, "submit"])
                assert ok.verdict.label is Label.PASS, task.name
    finally:
        env.close()
    assert n_edit >= 10  # nearly every generated fix is one line replaced or lines inserted
    assert Label.PASS in labels and Label.FAIL in labels  # imperfect: some known-wrong fixes
    assert not {Label.REWARD_HACK} & set(labels)


def test_edit_renders_as_hermes_json_and_parses_back():
    from agentjax.tasks.codefix import TOOLS

    plain = format_tool_call("edit", "pkg/core.py", "n -= 1", body="n += 1")
    reply = toolcalls.render(plain, "hermes", TOOLS)
    assert '"old": "n -= 1"' in reply and '"body": "n += 1"' in reply
    assert toolcalls.parse(reply, "hermes", TOOLS) == plain


def test_codefix_tools_offers_a_subset_and_refuses_unknown_or_no_submit():
    from agentjax.run import config as runconfig
    from agentjax.run.sections import CodefixSection

    CodefixSection(tools=("read", "edit", "test", "submit")).check()
    with pytest.raises(runconfig.ConfigError, match="codefix.tools"):
        CodefixSection(tools=("read", "frobnicate", "submit")).check()
    with pytest.raises(runconfig.ConfigError, match="submit"):
        CodefixSection(tools=("read", "edit")).check()


@pytest.mark.parametrize("seed", [0, 5])
def test_editor_writes_the_shortest_unique_span_and_it_rewrites_the_fix_exactly(seed):
    """Every reference and known-wrong fix of generated tasks (both splits, two generator seeds):
    the ``edit`` call, applied with the sandbox tool's own rule (``old`` must occur exactly once,
    then str-replace), rewrites the file into the fix; ``old`` is a few words, never the whole
    changed line unless it has to be (a short edit is fewer tokens to copy)."""
    from agentjax.toolcall.text import parse_tool_call

    made = shorter = total = 0
    for split in ("train", "heldout"):
        for task in store.tasks(40, split, seed):
            for fix in (task.reference, task.wrong):
                if not fix:
                    continue
                total += 1
                call = edits.edit_call(task, fix)
                if call is None:
                    continue
                made += 1
                c = parse_tool_call(call)
                rel, old = c.args[0], " ".join(c.args[1:])
                text = edits.read_pristine(task, rel)
                assert c.name == "edit" and text.count(old) == 1, call
                assert text.replace(old, c.body) == fix[rel], call
                line = next(ln for ln in text.splitlines() if old in ln)
                shorter += len(old) < len(line.strip())
    assert made >= 0.9 * total  # a patch only where no single-line span is unique
    assert shorter >= 0.8 * made  # the span, not the line
