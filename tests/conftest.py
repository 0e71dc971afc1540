"""Test-wide setup: 8 fake CPU devices, the tests' compile options and a persistent compilation
cache (set before jax loads).

The suite's programs are tiny, so compiling them costs far more than running them: tests compile
with LLVM's optimisation level 0 (``TEST_XLA_FLAGS``, also given to the launchers the tests start,
``tests/runs.py``), which halves the suite's CPU time. XLA's own passes and the exact-mode kernels
(custom calls built separately) are the same; what a test compares it computes under the same
flags on both sides. Users, benchmarks and ``launch`` run XLA's defaults.
"""

import os

from tests.runs import TEST_XLA_FLAGS  # imports no jax

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count=8 {TEST_XLA_FLAGS}"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

_cache = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".jax_cache")
jax.config.update("jax_compilation_cache_dir", _cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """After each test module: drop JAX's in-memory executables (recompiles hit the persistent
    cache), so one pytest process does not accumulate every program of the suite."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory):
    """The tiny Qwen3 HF directory of ``launch/make_tiny_hf.py`` (BPE trained on codefix)."""
    from launch import make_tiny_hf  # noqa: PLC0415

    return make_tiny_hf.make(tmp_path_factory.mktemp("tiny_qwen3"))
