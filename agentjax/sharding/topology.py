"""TPU topologies without a TPU: abstract devices, per-chip HBM, meshes and disjoint slices.

With ``libtpu`` installed, :func:`topology_devices` gives the abstract devices of a TPU slice
(``jax.experimental.topologies``); :func:`topology_mesh` builds a mesh over them. Part of
:mod:`agentjax.podcheck.aot` (which re-exports every name here).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import jax
from jax.sharding import Mesh

from agentjax.sharding.mesh import MESH_AXES, make_mesh

GiB = 1 << 30
# HBM per chip, by ``device.device_kind`` (Google Cloud TPU documentation).
HBM_BYTES: dict[str, int] = {
    "TPU v4": 32 * GiB,
    "TPU v5 lite": 16 * GiB,  # v5e
    "TPU v5": 95 * GiB,  # v5p
    "TPU v6 lite": 32 * GiB,  # v6e (Trillium)
}
LIBTPU_HINT = (
    "AOT compilation for TPU needs libtpu matched to jax: pip install 'agentjax[tpu]' "
    f"(libtpu==0.0.42.* for jax 0.10.2; installed jax is {jax.__version__})"
)


class TopologyUnavailable(RuntimeError):
    """The TPU topology cannot be built here (usually: libtpu is missing or mismatched)."""


def topology_devices(name: str) -> list:
    """The abstract devices (one per chip) of TPU topology ``name``, e.g. ``"v5e:16x16"``."""
    # libtpu takes /tmp/libtpu_lockfile for the process's lifetime; abstract topologies do not
    # need the TPU: entry points set ALLOW_MULTIPLE_LIBTPU_LOAD=1 (see ``offline_compile_setup``).
    try:
        from jax.experimental import topologies

        desc = topologies.get_topology_desc(topology_name=name, platform="tpu")
    except Exception as e:  # libtpu missing, mismatched, or an unknown topology name
        raise TopologyUnavailable(
            f"cannot build TPU topology {name!r}: {type(e).__name__}: {e}\n{LIBTPU_HINT}"
        ) from e
    return list(desc.devices)


def chip_hbm_bytes(device) -> int:
    """HBM bytes of one chip of ``device``'s kind (from :data:`HBM_BYTES`)."""
    kind = device.device_kind
    if kind not in HBM_BYTES:
        raise KeyError(f"no HBM size for device kind {kind!r}; known: {sorted(HBM_BYTES)}")
    return HBM_BYTES[kind]


def resolve_mesh_shape(shape: Mapping[str, int], n_devices: int) -> dict[str, int]:
    """Mesh axis sizes with one ``-1`` entry filled so the product is ``n_devices``."""
    sizes = {a: int(shape.get(a, 1)) for a in MESH_AXES}
    free = [a for a, s in sizes.items() if s == -1]
    if len(free) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got {free}")
    rest = math.prod(s for s in sizes.values() if s != -1)
    if free:
        if n_devices % rest:
            raise ValueError(f"mesh {sizes}: {n_devices} devices are not divisible by {rest}")
        sizes[free[0]] = n_devices // rest
    if math.prod(sizes.values()) != n_devices:
        raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices, have {n_devices}")
    return sizes


def split_devices(devices: Sequence, n_sampler: int | None = None) -> tuple[list, list]:
    """Disjoint ``(learner, sampler)`` slices: the first and last devices (halves by default)."""
    n_sampler = len(devices) // 2 if n_sampler is None else n_sampler
    if not 0 < n_sampler < len(devices):
        raise ValueError(f"n_sampler={n_sampler} must be in 1..{len(devices) - 1}")
    return list(devices[: len(devices) - n_sampler]), list(devices[len(devices) - n_sampler :])


# Kinds whose compiler accepts a program on part of a slice. v5e (and, we assume, v6e) reject it
# ("On platforms with limited ICI routing device assignment should include all slice devices"):
# there, disaggregated learner and sampler are two slices, each compiled as its own topology.
PARTIAL_SLICE_KINDS = ("TPU v4", "TPU v5")


def half_topology(name: str) -> str:
    """The topology with half the chips: the largest dimension halved (v5e:16x16 -> v5e:8x16)."""
    kind, dims = name.split(":")
    d = [int(x) for x in dims.split("x")]
    i = d.index(max(d))
    if d[i] % 2:
        raise ValueError(f"topology {name!r} cannot be halved")
    d[i] //= 2
    return f"{kind}:{'x'.join(map(str, d))}"


def disaggregated_devices(topology: str) -> tuple[list, list, str]:
    """``(learner, sampler, where)`` devices: halves of one slice where the chip kind allows it
    (:data:`PARTIAL_SLICE_KINDS`), else two slices of :func:`half_topology` (over DCN)."""
    devices = topology_devices(topology)
    if devices[0].device_kind not in PARTIAL_SLICE_KINDS:
        try:  # a slice within one host (v5e:2x2) has no half-shaped slice; its halves compile
            half = half_topology(topology)
            halves = topology_devices(half)
            return halves, halves, f"two {half} slices"
        except (ValueError, TopologyUnavailable):
            pass
    learner, sampler = split_devices(devices)
    return learner, sampler, f"halves of one {topology} slice"


def topology_mesh(devices: Sequence, shape: Mapping[str, int]) -> Mesh:
    """A :func:`make_mesh` mesh over ``devices``; one axis may be ``-1`` (the rest)."""
    return make_mesh(resolve_mesh_shape(shape, len(devices)), devices)


def offline_compile_setup() -> None:
    """Process setup for compiling TPU programs on a host without a TPU; call it from an entry
    point's ``main`` before any compilation (the library never changes process state itself):
    other processes' libtpu may coexist with ours, and executables for abstract devices stay out
    of the persistent compilation cache (they cannot be loaded back)."""
    import jax  # noqa: PLC0415

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    jax.config.update("jax_enable_compilation_cache", False)
