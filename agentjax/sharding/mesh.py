"""Meshes from config: axes ``data``, ``fsdp``, ``tensor`` and ``expert``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

MESH_AXES = ("data", "fsdp", "tensor", "expert")


def make_mesh(shape: Mapping[str, int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh with the four named axes (missing ones have size 1).

    Built with ``jax.sharding.Mesh`` (Auto axes): ``jax.make_mesh`` defaults to Explicit axes in
    this JAX, which would demand ``out_sharding`` on every sharded contraction.
    """
    unknown = sorted(set(shape) - set(MESH_AXES))
    if unknown:
        raise ValueError(f"unknown mesh axes {unknown}; allowed: {list(MESH_AXES)}")
    sizes = [int(shape.get(a, 1)) for a in MESH_AXES]
    if any(s < 1 for s in sizes):
        raise ValueError(f"mesh axis sizes must be >= 1, got {dict(zip(MESH_AXES, sizes, strict=True))}")
    devices = list(jax.devices() if devices is None else devices)
    if math.prod(sizes) != len(devices):
        raise ValueError(
            f"mesh shape {dict(zip(MESH_AXES, sizes, strict=True))} needs {math.prod(sizes)} devices, "
            f"got {len(devices)}"
        )
    return Mesh(np.asarray(devices).reshape(sizes), MESH_AXES)
