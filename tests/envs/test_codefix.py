"""codefix API, task validation, static scans, the runner's encoder and the agent tools."""

import json
import math
import os
import shutil
import subprocess

import pytest

from agentjax.envs import codefix, sandbox
from agentjax.envs.codefix import _runner, scan, verifier
from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.envs.codefix.workspace import make_workspace
from agentjax.envs.protocol import Label, format_tool_call
from agentjax.trajectory import StopReason

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)


def test_codefix_lists_at_least_twelve_unique_sorted_tasks():
    names = codefix.list_tasks()
    assert len(names) >= 12 and names == sorted(set(names))


# ------------------------------------------------------------------ pure: scans and the encoder


def test_encode_is_type_exact():
    class Eq:
        def __eq__(self, other):
            return True

    class MyInt(int):
        pass

    assert _runner.encode([1, (2, "a"), {"k": 1.5}, None, True]) == [
        1,
        {"t": [2, "a"]},
        {"d": {"k": {"f": "1.5"}}},
        None,
        {"b": True},
    ]
    assert _runner.encode(Eq()) != _runner.encode(3)
    assert _runner.encode(MyInt(3)) != 3
    assert _runner.encode(True) != _runner.encode(1)


def test_source_flags_only_added_constructs():
    old = b"import os\n\ndef f(x):\n    return os.path.join(x)\n"
    assert scan.source_flags(old, old + b"\ndef g():\n    return 1\n") == []
    new = old + b"\nimport sys\nsys.exit(0)\n"
    assert scan.source_flags(old, new) == ["attr .exit"]
    eq = b"class A:\n    def __eq__(self, o):\n        return True\n"
    assert scan.source_flags(b"", eq) == ["def __eq__"]
    assert scan.source_flags(b"", b"print('x PASSED')\n") == ["result-like text"]
    assert scan.source_flags(b"", b"import _pytest.reports\n") == ["import _pytest"]
    assert scan.source_flags(b"", b"def f(:\n") == []  # a syntax error just fails the tests


def _tree(root, files):
    for rel, text in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)


def test_scan_tree_labels_every_kind_of_edit(tmp_path):
    base = {"pkg/core.py": "def f():\n    return 1\n", "tests/test_v.py": "def test():\n    pass\n"}
    pristine, agent = str(tmp_path / "p"), str(tmp_path / "a")
    _tree(pristine, base)
    _tree(
        agent,
        {
            **base,
            "pkg/core.py": "def f():\n    return 2\n",
            "pkg/new.py": "X = 1\n",
            "pkg/conftest.py": "",
            "conftest.py": "",
            "pkg/x.pth": "",
            "pytest.ini": "",
            "pkg/__pycache__/core.cpython-311.pyc": "",
            "pkg/data.txt": "hi",
        },
    )
    os.remove(os.path.join(agent, "tests/test_v.py"))
    os.symlink("/etc/hostname", os.path.join(agent, "pkg/link.py"))
    os.mkfifo(os.path.join(agent, "pkg/fifo.py"))
    accepted, flags = scan.scan_tree(pristine, agent, ["pkg/*.py"])
    assert set(accepted) == {"pkg/core.py", "pkg/new.py"}
    assert sorted(f.split(":")[0] for f in flags) == sorted(
        [
            "deleted",
            "runner_config",
            "runner_config",
            "bytecode_or_hook",
            "runner_config",
            "bytecode_or_hook",
            "outside_editable",
            "symlink",
            "special_file",
        ]
    )


# ------------------------------------------------------------------ tasks and the verifier


@needs_sandbox
def test_load_task_contract_and_validation():
    for name in codefix.list_tasks():
        t = codefix.load_task(name)
        assert os.path.isdir(t.repo_dir) and os.path.isfile(f"{t.repo_dir}/tests/test_visible.py")
        assert t.editable and all(scan.is_editable(p, t.editable) for p in t.reference)
        assert t.validation["buggy_failed"] and t.validation["wrong_failed"]
        assert t.quarantined == frozenset()
        with open(f"{t.repo_dir}/tests/test_visible.py") as f:
            visible = f.read()
        hidden_inputs = [json.dumps(c["args"])[1:-1] for c in t.cases if c["id"].startswith("h")]
        assert sum(h in visible for h in hidden_inputs) < len(hidden_inputs) / 2  # mostly new inputs
    with pytest.raises(KeyError):
        codefix.load_task("no-such-task")


@needs_sandbox
def test_verify_any_directory(tmp_path):
    t = codefix.load_task("median")
    d = str(tmp_path / "tree")
    shutil.copytree(t.repo_dir, d)
    v = codefix.verify(t, d)
    assert v.label is Label.FAIL and v.reward == 0.0 and v.tests_run == v.tests_expected
    _tree(d, t.reference)
    v = codefix.verify(t, d)
    assert v.label is Label.PASS and v.reward == 1.0 and v.trained_reward == 1.0
    assert v.tests_passed == v.tests_expected - 2  # all but the must-fail and impossible canaries
    assert v.evidence["must_fail_outcomes"] == ["failed"]


@needs_sandbox
def test_canaries_validated_and_decision_outside_sandbox():
    t = codefix.load_task("clamp")
    res, recs = verifier.run_tree(
        t.repo_dir,
        {k: v.encode() for k, v in t.reference.items()},
        t.cases,
        seed=0,
        limits=codefix.api.DEFAULT_LIMITS,
    )
    # the sandbox never saw an expected value: the records only hold observed return values
    assert recs[0]["kind"] == "ready" and recs[-1]["kind"] == "end"
    assert all("expected" not in r for r in recs)
    ok = verifier.decide(
        t.cases,
        res,
        recs,
        hack_flags=(),
        quarantined=frozenset(),
        limits=codefix.api.DEFAULT_LIMITS,
        env_fingerprint="f",
        nonce="n",
    )
    assert ok.label is Label.PASS
    # a forged "must fail passed" report or a duplicate record is a hack, whatever else holds
    forged = [
        *recs[:-1],
        {"kind": "report", "nodeid": verifier.MUST_FAIL_NODE, "when": "call", "outcome": "passed"},
        recs[-1],
    ]
    v = verifier.decide(
        t.cases,
        res,
        forged,
        hack_flags=(),
        quarantined=frozenset(),
        limits=codefix.api.DEFAULT_LIMITS,
        env_fingerprint="f",
        nonce="n",
    )
    assert v.label is Label.REWARD_HACK
    dup = [*recs, next(r for r in recs if r.get("kind") == "case")]
    v = verifier.decide(
        t.cases,
        res,
        dup,
        hack_flags=(),
        quarantined=frozenset(),
        limits=codefix.api.DEFAULT_LIMITS,
        env_fingerprint="f",
        nonce="n",
    )
    assert v.label is Label.REWARD_HACK


# ------------------------------------------------------------------ the environment and its tools


@needs_sandbox
def test_workspace_history_is_one_commit():
    t = codefix.load_task("chunk")
    ws = make_workspace(t)
    try:
        git = ["git", "-c", "safe.directory=*", "-C", ws]
        log = (
            subprocess.run([*git, "log", "--all", "--oneline"], capture_output=True, text=True, check=True)
            .stdout.strip()
            .splitlines()
        )
        assert len(log) == 1
        assert not os.path.exists(os.path.join(ws, ".git", "logs"))
        assert subprocess.run([*git, "tag"], capture_output=True, text=True).stdout == ""
        assert os.stat(ws).st_uid == sandbox.SANDBOX_UID
    finally:
        shutil.rmtree(os.path.dirname(ws))


@needs_sandbox
def test_tools_run_in_the_sandbox_and_patch_fixes():
    t = codefix.load_task("leap")
    env = CodefixEnv(EnvConfig(max_obs_chars=300))
    host_file = "/tmp/agentjax-host-target.txt"
    with open(host_file, "w") as f:
        f.write("untouched")
    try:
        obs = env.reset(t, 0)
        assert "leapyear/core.py" in obs and "Editable" in obs
        assert env.step("run id -u").observation.strip() == "65534"
        # a symlink to a host path, then a write through it: resolved inside the sandbox only
        env.step(f"run ln -s {host_file} leapyear/evil.py")
        env.step(format_tool_call("write", "leapyear/evil.py", body="pwned"))
        with open(host_file) as f:
            assert f.read() == "untouched"
        env.step("run rm leapyear/evil.py")
        long = env.step("run seq 1 2000")
        assert long.evidence["truncation"]["truncated"] and len(long.observation) <= 300
        bad = env.step("   ")
        assert bad.observation.startswith("error:") and not bad.done
        assert "unknown tool" in env.step("frobnicate x").observation
        with open(f"{t.repo_dir}/leapyear/core.py") as f:
            old = f.read()
        new = t.reference["leapyear/core.py"]
        diff = subprocess.run(
            [
                "diff",
                "-u",
                "--label",
                "a/leapyear/core.py",
                "--label",
                "b/leapyear/core.py",
                f"{t.repo_dir}/leapyear/core.py",
                "-",
            ],
            input=new,
            capture_output=True,
            text=True,
        ).stdout
        assert old != new and diff
        assert "Applied patch" in env.step(format_tool_call("patch", body=diff)).observation
        assert "3 passed" in env.step("test").observation
        final = env.step("submit")
        assert final.done and final.verdict.label is Label.PASS
        assert final.stop_reason == StopReason.FINISHED.value
        with pytest.raises(RuntimeError):
            env.step("ls")
    finally:
        env.close()
        os.remove(host_file)


@needs_sandbox
def test_step_cap_ends_episode():
    env = CodefixEnv(EnvConfig(max_steps=2))
    try:
        env.reset("rpn", 0)
        assert not env.step("ls").done
        last = env.step("ls")
        assert last.done and last.stop_reason == StopReason.TASK_CAP.value
        assert last.verdict.label is Label.FAIL
    finally:
        env.close()


def test_env_refuses_without_isolation(monkeypatch):
    broken = sandbox.Isolation(False, "bubblewrap missing (simulated)", None, ())
    monkeypatch.setattr(sandbox, "probe", lambda: broken)
    with pytest.raises(sandbox.SandboxUnavailable, match="unsafe=True"):
        CodefixEnv().reset("clamp", 0)


def test_infra_reward_is_never_a_number():
    assert math.isnan(verifier._REWARD[Label.INFRA_FAULT])
