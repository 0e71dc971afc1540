"""safetensors files of a HF checkpoint: checked, read shard by shard onto devices, and written.

Reading goes through the ``safetensors`` library (``safe_open(..., framework="np")``, bfloat16
included): :class:`Checkpoint` maps every tensor name to its file, checks names, shapes and dtypes
before any data is read, and builds each (layer/expert-stacked, transposed) parameter with
``jax.make_array_from_callback`` so that each device reads only its own slice. :func:`write`
saves HF-named tensors (``safetensors.numpy.save_file``, ``format: pt`` metadata, as transformers
writes them), splitting into shards with an index when asked.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

SUPPORTED_DTYPES = ("F64", "F32", "F16", "BF16")
INDEX = "model.safetensors.index.json"


class Checkpoint:
    """The tensors of one checkpoint directory (every file opened and validated up front)."""

    def __init__(self, path: Path, where: dict[str, str], handles: dict, error):
        self.path, self._where, self._handles, self._error = path, where, handles, error
        self.names = set(where)

    def _slice(self, name: str):
        return self._handles[self._where[name]].get_slice(name)

    def check(self, names, transpose: bool, shape: tuple) -> set[str]:
        """Every tensor of one parameter exists with the shape and a dtype we read; returns them."""
        if isinstance(names, list):
            used: set[str] = set()
            for sub in names:
                used |= self.check(sub, transpose, shape[1:])
            return used
        if names not in self._where:
            raise self._error(f"{self.path}: tensor {names!r} is missing from the checkpoint")
        sl = self._slice(names)
        got, want = tuple(sl.get_shape()), tuple(shape[::-1] if transpose else shape)
        if got != want:
            raise self._error(
                f"{self.path / self._where[names]}: tensor {names!r} has shape "
                f"{got}; expected {want} from config.json"
            )
        if sl.get_dtype() not in SUPPORTED_DTYPES:
            raise self._error(
                f"{self.path / self._where[names]}: tensor {names!r} has dtype "
                f"{sl.get_dtype()}; supported: {list(SUPPORTED_DTYPES)}"
            )
        return {names}

    def _read(self, names, transpose: bool, index: tuple):
        if isinstance(names, list):
            return np.stack([self._read(n, transpose, index[1:]) for n in names[index[0]]])
        sl = self._slice(names)
        try:
            return sl[index[::-1]].T if transpose else sl[index]
        except SafetensorError as e:  # data shorter than its header says
            raise self._error(
                f"{self.path / self._where[names]}: cannot read tensor {names!r}: {e}"
            ) from None

    def array(self, names, transpose: bool, shape: tuple, sharding, dtype) -> jax.Array:
        """One parameter, each device's shard read straight from the files."""

        def shard(index):
            index = tuple(index) + (slice(None),) * (len(shape) - len(index))
            return np.asarray(self._read(names, transpose, index)).astype(dtype)

        return jax.make_array_from_callback(tuple(shape), sharding, shard)


def _open(file: Path, error):
    if not file.is_file():
        raise error(f"{file}: shard is missing (listed in {INDEX})")
    try:  # safetensors checks the header against the data on disk (offsets, sizes, dtypes)
        handle = safe_open(str(file), framework="np")
        names = list(handle.keys())
    except (SafetensorError, OSError) as e:
        raise error(f"{file}: not a readable safetensors file (truncated or corrupt): {e}") from None
    return handle, names


def open_checkpoint(path: Path, error) -> Checkpoint:
    """Opens every ``*.safetensors`` file of ``path`` (via the index when there is one)."""
    index = path / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise error(f"{index}: not a valid safetensors index ({e!r})") from None
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise error(f"{path}: no *.safetensors files (torch .bin checkpoints are not read)")
    where, handles = {}, {}
    for fname in files:
        file = path / fname
        handles[fname], names = _open(file, error)
        for name in names:
            where[name] = fname
    if weight_map is not None:
        for name, fname in weight_map.items():
            if where.get(name) != fname:
                raise error(f"{index}: tensor {name!r} is listed in {fname} but that file does not hold it")
    return Checkpoint(path, where, handles, error)


def write(out: Path, tensors: dict[str, np.ndarray], *, max_shard_bytes: int = 0) -> list[str]:
    """Writes ``tensors`` as ``model.safetensors`` (or numbered shards plus an index when their
    total exceeds ``max_shard_bytes`` > 0); returns the file names."""
    names = sorted(tensors)
    groups, cur, size = [], [], 0
    for name in names:
        nbytes = tensors[name].nbytes
        if cur and max_shard_bytes and size + nbytes > max_shard_bytes:
            groups.append(cur)
            cur, size = [], 0
        cur.append(name)
        size += nbytes
    groups.append(cur)
    if len(groups) == 1:
        files = ["model.safetensors"]
    else:
        files = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    for fname, group in zip(files, groups, strict=True):
        save_file(
            {n: np.ascontiguousarray(tensors[n]) for n in group}, str(out / fname), metadata={"format": "pt"}
        )
    if len(files) > 1:
        index = {
            "metadata": {"total_size": int(sum(t.nbytes for t in tensors.values()))},
            "weight_map": {n: f for f, g in zip(files, groups, strict=True) for n in g},
        }
        (out / INDEX).write_text(json.dumps(index, indent=2))
    return files


def flatten(names, value: np.ndarray, transpose: bool, out: dict) -> None:
    """The inverse of :meth:`Checkpoint.array`: one stacked parameter into HF-named tensors."""
    if isinstance(names, list):
        for i, sub in enumerate(names):
            flatten(sub, value[i], transpose, out)
        return
    out[names] = np.ascontiguousarray(value.T if transpose else value)
