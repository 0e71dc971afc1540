"""launch.compile_cache: a process other than the first writes the cache entries of the programs on
its own devices (JAX writes from process 0 only), and still leaves programs that span processes
to process 0."""

import subprocess
import sys

import pytest

from tests.runs import ROOT, cli_env

_PROBE = """
import os, sys
import jax, jax.numpy as jnp
from jax._src import distributed

cache = sys.argv[1]
jax.config.update("jax_compilation_cache_dir", cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
distributed.global_state.process_id = 1  # what JAX's write rule reads; no coordinator needed
if sys.argv[2] == "install":
    from launch.compile_cache import cache_process_local_programs
    assert cache_process_local_programs()
    assert not cache_process_local_programs()  # installed once
jax.jit(lambda x: x * 3 + 1)(jnp.ones(5))  # on this process's one device
print(sorted(n for n in os.listdir(cache) if n.startswith("jit_")))
"""


@pytest.mark.parametrize("install", [True, False])
def test_a_non_zero_process_writes_its_own_programs_only_with_the_wrapper(tmp_path, install):
    cache = tmp_path / "cache"
    cache.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(cache), "install" if install else "plain"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    written = eval(out.stdout.strip().splitlines()[-1])
    assert any(n.startswith("jit__lambda") for n in written) == install, (written, out.stderr[-2000:])
