"""Hardening of the sandbox and its attribution: secrets stay in, quotas hold, agents cannot fake
an infrastructure fault. Every test here failed on the code before issue #14."""

import os
import shutil

import pytest

from agentjax.envs.codefix.env import CodefixEnv, EnvConfig
from agentjax.envs.protocol import format_tool_call

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("setpriv") is None,
    reason="bubblewrap/setpriv not installed (apt-get install bubblewrap util-linux)")
CANARY = "AGENTJAX_TEST_SECRET_7f3a9c"

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
