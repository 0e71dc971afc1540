"""The TPU ahead-of-time tests (tests/sharding/tpu_aot_cases.py) in a process of their own.

libtpu and jaxlib's CPU compiler do not share a process safely: once the pod tests had loaded
libtpu, a later CPU compile in the same pytest process aborted it (SIGABRT, jax 0.10.2), taking
every remaining test with it. The cases therefore run in a child pytest; their failures (names and
tracebacks) are this test's failure message.
"""

import os
import subprocess
import sys

import pytest

CASES = os.path.join(os.path.dirname(__file__), "tpu_aot_cases.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.slow


def test_tpu_aot_cases_pass_in_their_own_process():
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", CASES]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{out[-12000:]}"
    assert " passed" in out and " skipped" not in out, out[-4000:]
