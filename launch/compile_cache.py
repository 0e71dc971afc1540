"""Every process of a multi-process run writes its own programs to the persistent compilation cache.

JAX writes cache entries from process 0 only: on a shared file system (GCS) every process would
otherwise write the same SPMD program's entry at once. That is right for programs that span
processes, whose cache key is the same on every process. A program on one process's own devices
(here: each process's sampler, colocated or disaggregated, and its host-side helpers) has a key of
its own, because the key holds the devices: process 0 never computes it, so without this every
process but the first compiled its sampler again on every start and every ``--resume`` (on CPU
test runs, about half of a non-zero process's time).

:func:`cache_process_local_programs` lets a process write the entries of the programs whose
devices are all its own (``DeviceList.is_fully_addressable``); programs across processes keep
JAX's rule. It wraps a private JAX function: where that is missing (another JAX version) it
changes nothing and returns False (``launch.train`` then prints one line), and the run only
compiles more.
"""

from __future__ import annotations

import time
import warnings


def cache_process_local_programs() -> bool:
    """Installs the wrapper (call after ``jax.distributed.initialize``); True where it did."""
    from jax._src import compilation_cache, compiler, distributed  # noqa: PLC0415

    jax_write = getattr(compiler, "_compile_and_write_cache", None)
    if jax_write is None or not hasattr(compiler, "backend_compile_and_load"):
        return False
    if distributed.global_state.process_id == 0 or getattr(jax_write, "_agentjax", False):
        return False  # process 0 writes everything already; or installed before

    def write(backend, computation, executable_devices, compile_options, host_callbacks, module_name, key):
        if host_callbacks or not getattr(executable_devices, "is_fully_addressable", False):
            return jax_write(  # JAX's own rule: process 0 writes what spans processes
                backend, computation, executable_devices, compile_options, host_callbacks, module_name, key
            )
        start = time.monotonic()
        executable = compiler.backend_compile_and_load(
            backend, computation, executable_devices, compile_options, host_callbacks
        )
        seconds = time.monotonic() - start
        if seconds >= compiler.config.persistent_cache_min_compile_time_secs.value:
            try:
                compilation_cache.put_executable_and_time(key, module_name, executable, backend, int(seconds))
            except Exception as e:  # noqa: BLE001 - a cache that cannot be written costs a compile
                warnings.warn(
                    f"could not write the compilation cache entry of {module_name!r}: {e}", stacklevel=2
                )
        return executable

    write._agentjax = True
    compiler._compile_and_write_cache = write
    return True
