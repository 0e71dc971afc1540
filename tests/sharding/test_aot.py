"""The TPU ahead-of-time tests (tests/sharding/tpu_aot_cases.py) in a process of their own:
libtpu and jaxlib's CPU compiler did not share the suite's process safely (a later CPU compile
aborted it, jax 0.10.2). The cases' failures (names and tracebacks) are this test's message."""

import os

import pytest

from tests.runs import run_cases_in_own_process

pytestmark = pytest.mark.slow


def test_tpu_aot_cases_pass_in_their_own_process():
    run_cases_in_own_process(os.path.join(os.path.dirname(__file__), "tpu_aot_cases.py"))
