"""Builds, loads and calls the fixed-order CPU kernels of exact mode (``ordered.cc``).

``exact_kernels="ordered"`` (and ``"auto"`` on CPU) computes every contraction and every long
row sum in float32 with an order that the kernel's own code fixes per output element (see the
C++ file's header): the result is a function of the element's own row and column, whatever the
batch, the thread split or the SIMD width. XLA cannot reorder what happens inside a custom call,
and a custom call is a fusion boundary, so LLVM cannot contract a multiply outside it with an add
inside it either.

The library is compiled on first use with the system's C++ compiler (``$CXX``, else ``c++`` /
``g++``) against jaxlib's FFI headers, for the host CPU (``-march=native``), and cached under
``$AGENTJAX_CACHE`` (default ``~/.cache/agentjax``) keyed by the source, the flags, jaxlib's
version and the CPU's feature flags. :func:`available` says whether it could be built; the
error message says why not.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

SOURCE = pathlib.Path(__file__).with_name("ordered.cc")
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-std=c++17", "-shared", "-fPIC")
_TARGETS = {
    "agentjax_ordered_dot": "AgentjaxOrderedDot",
    "agentjax_ordered_rms_norm": "AgentjaxOrderedRmsNorm",
    "agentjax_ordered_softmax": "AgentjaxOrderedSoftmax",
    "agentjax_ordered_swiglu": "AgentjaxOrderedSwiglu",
}
LOG_SOFTMAX, SOFTMAX, EXP_SHIFTED = 0, 1, 2  # agentjax_ordered_softmax's modes


class OrderedKernelsUnavailable(RuntimeError):
    """The fixed-order kernels could not be built or loaded on this machine."""


def _cpu_flags() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str:
    for cxx in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cxx and shutil.which(cxx):
            return cxx
    raise OrderedKernelsUnavailable("no C++ compiler found ($CXX, c++, g++, clang++)")


def _build() -> pathlib.Path:
    cxx = _compiler()
    import jaxlib

    # extra flags, e.g. -mno-avx512f to build another instruction-set path (the tests do)
    flags = (*FLAGS, *os.environ.get("AGENTJAX_ORDERED_CFLAGS", "").split())
    key = hashlib.sha256(
        "\n".join([SOURCE.read_text(), cxx, " ".join(flags), jaxlib.__version__, _cpu_flags()]).encode()
    ).hexdigest()[:16]
    cache = pathlib.Path(os.environ.get("AGENTJAX_CACHE", pathlib.Path.home() / ".cache" / "agentjax"))
    lib = cache / f"ordered-{key}.so"
    if lib.exists():
        return lib
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = pathlib.Path(tmp) / lib.name
        cmd = [cxx, *flags, f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", str(out), "-lpthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OrderedKernelsUnavailable(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        os.replace(out, lib)  # atomic: concurrent builders agree on the file
    return lib


@functools.cache
def _load() -> str:
    """Builds and registers the kernels once per process; returns '' or why they are unavailable."""
    if platform.system() != "Linux":
        return f"the ordered kernels are built for Linux only (this is {platform.system()})"
    try:
        lib = ctypes.cdll.LoadLibrary(str(_build()))
    except Exception as e:  # no compiler, no writable cache, a library that does not load: say why
        return f"{type(e).__name__}: {e}"
    for name, symbol in _TARGETS.items():
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    return ""


def available() -> bool:
    return not _load()


def require() -> None:
    """Raises :class:`OrderedKernelsUnavailable` (with the reason) unless the kernels loaded."""
    if why := _load():
        raise OrderedKernelsUnavailable(
            f"ModelConfig.exact_kernels='ordered' needs the fixed-order CPU kernels: {why}. "
            "Use exact_kernels='exact_sum' (float64, any CPU or GPU) or 'auto'."
        )


def dot(a: jax.Array, b: jax.Array) -> jax.Array:
    """float32 ``a @ b`` for ``a [Ba, M, K]``, ``b [Bb, K, N]`` (``Ba, Bb`` equal or 1), each
    element an FMA chain over ``k = 0..K-1`` (zero terms change nothing)."""
    require()
    batch = max(a.shape[0], b.shape[0])
    out = jax.ShapeDtypeStruct((batch, a.shape[1], b.shape[2]), jnp.float32)
    call = jax.ffi.ffi_call("agentjax_ordered_dot", out, vmap_method="sequential")
    return call(a.astype(jnp.float32), b.astype(jnp.float32))


def _f32_like(x):
    return jax.ShapeDtypeStruct(x.shape, jnp.float32)


def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    """float32 ``x * (1 / sqrt(mean(x^2) + eps)) * scale`` over the last axis."""
    require()
    call = jax.ffi.ffi_call("agentjax_ordered_rms_norm", _f32_like(x), vmap_method="sequential")
    return call(x.astype(jnp.float32), scale.astype(jnp.float32), eps=np.float32(eps))


def softmax(z: jax.Array, mode: int) -> jax.Array:
    """Over the last axis, float32: ``LOG_SOFTMAX``, ``SOFTMAX`` or ``EXP_SHIFTED``
    (``exp(z - max z)``, -inf giving 0)."""
    require()
    call = jax.ffi.ffi_call("agentjax_ordered_softmax", _f32_like(z), vmap_method="sequential")
    return call(z.astype(jnp.float32), mode=np.int32(mode))


def swiglu(g: jax.Array, u: jax.Array) -> jax.Array:
    """float32 ``g / (1 + exp(-g)) * u``, elementwise."""
    require()
    call = jax.ffi.ffi_call("agentjax_ordered_swiglu", _f32_like(g), vmap_method="sequential")
    return call(g.astype(jnp.float32), u.astype(jnp.float32))
