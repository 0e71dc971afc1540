"""Hardening of the sandbox and its attribution (issue #14): secrets stay in, the workspace quota
holds, and nothing the agent controls (source text, directory tree, results pipe, process
behaviour) can turn its run into an ``infra_fault``. Every test here failed on the code before."""

import json
import math
import os
import random
import shutil

import pytest

from agentjax.envs import accounting, codefix, faults, sandbox
from agentjax.envs.codefix import scan, verifier
from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.envs.codefix.workspace import Quota, make_workspace, remove_workspace
from agentjax.envs.protocol import Label, format_tool_call
from tests.envs.sandbox_results import sandbox_result

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)",
)
CANARY = "AGENTJAX_TEST_SECRET_7f3a9c"
AGENT_SIDE = {
    Label.PASS,
    Label.FAIL,
    Label.REWARD_HACK,
    Label.AGENT_TIMEOUT,
    Label.AGENT_OOM,
    Label.AGENT_CPU,
    Label.AGENT_ERROR,
    Label.AGENT_QUOTA,
}

_LEAK = r"""for f in /proc/1/environ /proc/self/environ /proc/$PPID/environ; do
  echo "== $f"; tr '\0' '\n' < "$f"
done
echo "== env"; env
for p in /proc/[0-9]*; do echo "== $p"; tr '\0' '\n' < "$p/environ" 2>/dev/null; done
cat /proc/1/cmdline | tr '\0' ' '
"""


@needs_sandbox
def test_trainer_secrets_never_reach_an_agent_tool_call(monkeypatch):
    monkeypatch.setenv(CANARY, "s3cr3t-token-value")
    env = CodefixEnv(EnvConfig(max_obs_chars=100_000))
    try:
        env.reset("clamp", 0)
        obs = env.step(format_tool_call("run", body=_LEAK)).observation
    finally:
        env.close()
    assert "== /proc/1/environ" in obs and "== env" in obs and "PATH=" in obs  # the probe ran
    assert CANARY not in obs and "s3cr3t-token-value" not in obs
    assert os.environ[CANARY] == "s3cr3t-token-value"  # still set on the host side


# ------------------------------------------------------------------ workspace quota


@needs_sandbox
@pytest.mark.parametrize(
    "what, cmd",
    [
        ("bytes", "for i in 1 2 3 4 5 6 7 8; do head -c 15000000 /dev/zero > big$i; done; echo done"),
        ("inodes", "seq 1 100000 | sed 's/^/f/' | xargs touch; echo done"),
    ],
)
def test_one_tool_call_cannot_exceed_the_workspace_quota(what, cmd):
    quota = Quota(bytes=24 << 20, inodes=600)
    env = CodefixEnv(EnvConfig(quota=quota))
    try:
        env.reset("clamp", 0)
        root = os.path.dirname(env.workspace)
        assert os.path.ismount(root)  # its own filesystem, not the host disk
        step = env.step(format_tool_call("run", body=cmd))
        usage = os.statvfs(root)
        used_bytes = (usage.f_blocks - usage.f_bfree) * usage.f_frsize
        assert used_bytes <= quota.bytes and usage.f_files - usage.f_ffree <= quota.inodes
        assert "No space left on device" in step.observation
    finally:
        env.close()
    assert step.done and step.verdict.label is Label.AGENT_QUOTA and step.verdict.trained_reward == 0.0
    ev = step.verdict.evidence
    assert ev["attribution"].startswith(f"workspace_quota: {what} exhausted"), ev["attribution"]
    assert ev["quota"]["bytes_limit"] == quota.bytes and ev["quota"][f"{what}_free"] == 0
    assert not os.path.exists(root)  # unmounted and removed


# ------------------------------------------------------------------ attribution by evidence


def test_pathological_source_is_flagged_not_infra(tmp_path):
    task = codefix.load_task("clamp")
    tree = str(tmp_path / "tree")
    shutil.copytree(task.repo_dir, tree)
    ((rel, text),) = task.reference.items()
    for bad in ("1" + "+1" * 100_000, "-" * 100_000 + "1", "x" + "[0]" * 60_000):
        with open(os.path.join(tree, rel), "w") as f:
            f.write(f"{text}\nX = {bad}\n")
        v = codefix.verify(task, tree)  # RecursionError / MemoryError in the scan before
        assert v.label is Label.REWARD_HACK, v.evidence["attribution"]
        assert "unscannable" in v.evidence["attribution"]


def _deep(root, depth):
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            new = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
        os.close(os.open("x.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_deep_tree_is_flagged_and_removed_without_a_quota_mount():
    task = codefix.load_task("clamp")
    ws = make_workspace(task)  # a plain directory: the rmtree fallback path
    _deep(os.path.join(ws, "mathx"), 1_100)
    v = codefix.verify(task, ws)
    assert v.label is Label.REWARD_HACK and "too_deep:mathx/d/d" in v.evidence["attribution"]
    assert remove_workspace(ws) is None and not os.path.exists(os.path.dirname(ws))


@needs_sandbox
def test_agent_built_deep_tree_never_wedges_the_env():
    env = CodefixEnv()
    try:
        env.reset("clamp", 0)
        first = env.workspace
        mk = "p=mathx; i=0; while [ $i -lt 1100 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && echo ok"
        assert env.step(format_tool_call("run", body=mk)).observation.strip() == "ok"
        final = env.step("submit")
        assert final.verdict.label is Label.REWARD_HACK, final.verdict.evidence["attribution"]
        env.reset("clamp", 1)  # cleanup of the deep tree must not raise; a fresh workspace
        assert not os.path.exists(first) and env.cleanup_failures == []
        assert env.step("run echo alive").observation.strip() == "alive"
    finally:
        env.close()


_SWARM = """import os, time
cpu = min(os.sched_getaffinity(0))
for _ in range(40):
    if os.fork() == 0:
        os.sched_setaffinity(0, {cpu})
        while True:  # every task wakes at the same instant and spins 2 ms on one CPU
            time.sleep(0.1 - time.time() % 0.1)
            end = time.thread_time() + 0.002
            while time.thread_time() < end:
                pass
time.sleep(3600)
"""


@needs_sandbox
def test_process_swarm_cannot_fake_host_starvation():
    limits = sandbox.Limits(wall_s=3.0, cpu_s=4)
    r = sandbox.run(["/usr/bin/python3", "-c", _SWARM], limits=limits)
    # the swarm fools every in-run measure: summed run-queue wait >> wall, host pressure high
    assert r.timed_out and r.cpu_s < limits.cpu_s
    assert accounting.starvation_suspected(r.starved_s, r.runq_wait_s, r.psi_cpu_some_s, r.wall_s)
    # ... but the canary started after the kill ran freely: the agent's own timeout
    assert r.host_canary_cpu_s >= accounting.CANARY_MIN_SHARE * accounting.CANARY_WINDOW_S
    label, why = faults.attribute(r, limits)
    assert label is Label.AGENT_TIMEOUT, why


# ------------------------------------------------------------------ the results pipe


_ok_result = sandbox_result  # a clean run with the given fields replaced


def decide_bytes(task, data, res=None):
    return verifier.decide(
        task.cases,
        res or _ok_result(),
        verifier.parse_records(data),
        hack_flags=(),
        quarantined=frozenset(),
        limits=sandbox.Limits(),
        env_fingerprint="f",
        nonce="n",
    )


HOSTILE_LINES = [
    b"[" * 100_000,  # RecursionError in json.loads before
    b'{"kind": "case", "id": ["h0"], "value": 1}',  # unhashable id: TypeError before
    b'{"kind": {"a": 1}}',
    b'{"kind": "report", "nodeid": {"a": 1}, "outcome": [1]}',
    b'{"kind": "case", "id": "h0", "value": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"kind": "case", "id": "h0", "exc": {"x": 1}}',
    b"\xff\xfe\x00garbage",
    b"NaN",
    b'{"kind": "end", "rc": 1e999}',
    b"x" * 200_000,
]


@pytest.mark.parametrize("line", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_hostile_results_pipe_is_never_infra(line):
    task = codefix.load_task("clamp")
    v = decide_bytes(task, b'{"kind": "ready", "pid": 2}\n' + line + b"\n")
    assert v.label in AGENT_SIDE - {Label.PASS}, v.evidence["attribution"]
    if not line.startswith(b'{"kind": "end"'):  # a well-formed record; the rest is tampering
        assert v.label is Label.REWARD_HACK and v.evidence["anomalies"]


# ------------------------------------------------------------------ fuzz: total functions


def _random_json(rng, depth=0):
    kind = rng.randrange(8 if depth < 70 else 5)
    if kind == 0:
        return rng.choice([None, True, False, 0, -1, 1 << 70, 1.5, float("inf"), "h0", "x"])
    if kind == 1:
        return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(6)))
    if kind == 2:
        return rng.choice(["ready", "case", "report", "collect_error", "end", "garbage"])
    if kind in (3, 4):
        return rng.randrange(-5, 5)
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = ["kind", "id", "value", "exc", "nodeid", "outcome", "rc", "t", "d", "!"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def _random_line(rng):
    choice = rng.randrange(6)
    if choice == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(80)))
    if choice == 1:
        n = rng.randrange(1, 3000)
        return rng.choice([b"[", b"{", b'{"a":']) * n + rng.choice([b"", b"]" * n])
    rec = _random_json(rng)
    if choice >= 3 and isinstance(rec, dict):
        rec["kind"] = rng.choice(["ready", "case", "report", "collect_error", "end"])
        rec.setdefault("id", rng.choice(["h0", "h1", "canary_must_pass", "canary_impossible", 3]))
    text = json.dumps(rec, allow_nan=True).encode()
    if rng.random() < 0.2:
        cut = rng.randrange(len(text) + 1)
        text = text[:cut]
    return text


def test_fuzz_results_parser_always_gives_a_verdict():
    rng = random.Random(14)
    task = codefix.load_task("clamp")
    res_variants = [
        _ok_result(),
        _ok_result(returncode=1),
        _ok_result(returncode=137),
        _ok_result(stdout="test_x PASSED"),
        _ok_result(returncode=152, cpu_s=9.0),
    ]
    labels = set()
    for i in range(400):
        # the runner's "ready" comes first, before any agent code runs; the agent can only append
        lines = [b'{"kind": "ready", "pid": 2}', *(_random_line(rng) for _ in range(rng.randrange(12)))]
        v = decide_bytes(task, b"\n".join(lines), res=res_variants[i % len(res_variants)])
        assert v.label in AGENT_SIDE, (i, v.label, v.evidence["attribution"], lines)
        assert not math.isnan(v.reward) and v.trained_reward is not None
        labels.add(v.label)
    assert {Label.REWARD_HACK, Label.AGENT_CPU} <= labels  # the fuzz reached several verdicts


def test_fuzz_static_scan_is_total():
    rng = random.Random(1414)
    atoms = [
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "-",
        "+",
        "not ",
        "lambda:",
        "x",
        "1",
        ".a",
        ",",
        ":",
        "\n",
        " ",
        "'",
        '"',
        "\\",
        "\x00",
        "import os\n",
        "def __eq__(s,o): return 1\n",
        "if 1:\n" + " " * 4,
        "@d\n",
        "*",
        "**",
        "yield ",
        "await ",
        "f'{",
        "}'",
        "#",
    ]
    for i in range(300):
        n = rng.choice([10, 200, 5000, 60_000])
        if rng.random() < 0.3:
            src = rng.choice(atoms) * n + rng.choice(atoms) * rng.randrange(n)
        elif rng.random() < 0.5:
            src = "".join(rng.choice(atoms) for _ in range(n))
        else:
            src = "".join(chr(rng.randrange(1, 0x11000)) for _ in range(n // 10))
        data = src.encode("utf-8", "surrogatepass")
        flags = scan.source_flags(b"", data)
        assert isinstance(flags, list) and all(isinstance(f, str) for f in flags), i
