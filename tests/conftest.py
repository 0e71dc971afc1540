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


import collections  # noqa: E402
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


# The files that take longest (serial seconds of the 2026-12-06 suite, most first). Each file runs
# on one worker (``--dist loadfile``); pytest-xdist hands files out in collection order
# (``--no-loadscope-reorder``), so the longest start first and the short ones fill in behind them
# instead of a multi-process file starting last and running alone at the end.
LONGEST_FIRST = (
    "test_multiprocess_realtime.py",
    "test_multiprocess.py",
    "test_system.py",
    "test_realtime.py",
    "test_features.py",
    "diagnostics/test_consistency.py",
    "test_codefix_training.py",
    "test_user_task.py",
    "test_dataset_task.py",
    "policy/test_pallas_exact.py",
    "test_configs.py",
    "test_feature_effects.py",
    "test_eval.py",
    "sharding/test_aot.py",
    "policy/test_blockwise.py",
)


def pytest_collection_modifyitems(items):
    """The files of :data:`LONGEST_FIRST` first, in its order, then the others, most tests first
    (a stable sort: every worker collects the same order, tests keep their order in a file)."""
    file = lambda it: it.nodeid.split("::")[0]  # noqa: E731
    count = collections.Counter(file(it) for it in items)

    def rank(it):
        path = file(it).removeprefix("tests/")
        known = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
        return (known, -count[file(it)], file(it))

    items.sort(key=rank)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """``AGENTJAX_TEST_CPU=path``: appends each test's CPU seconds (this process and the
    launchers it waited for: setup, call and teardown) and wall seconds to ``path``, one JSON line
    per test, so the suite's cost can be read by file (the wall clock of a loaded run is not)."""
    path = os.environ.get("AGENTJAX_TEST_CPU")
    if not path:
        yield
        return
    import json  # noqa: PLC0415
    import resource  # noqa: PLC0415
    import time  # noqa: PLC0415

    cpu = lambda: sum(  # noqa: E731
        r.ru_utime + r.ru_stime
        for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
    c0, t0 = cpu(), time.perf_counter()
    yield
    with open(path, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "cpu": cpu() - c0, "wall": time.perf_counter() - t0}) + "\n")
