"""Checkpoints with orbax: atomic, sharded, restorable onto another mesh, never silently fresh.

    save_checkpoint(workdir, step, {"params": params, "opt": opt_state, "rng": key},
                    metadata={"data_iter": it_state, "queue": queue_state}, keep=3)
    state, metadata, step = restore_checkpoint(workdir, target, shardings=new_shardings)

``state`` is any pytree of arrays (jax arrays of any sharding, numpy arrays, typed PRNG keys,
Python scalars, optax NamedTuples); it is written as a sharded tensorstore (OCDBT) array store in
which every process writes its own shards. ``metadata`` is JSON (data-iterator state, queue state,
config echo). Orbax writes each step into a temporary directory and renames it when complete, so
a crash mid-save leaves the previous step as the latest. Restoring onto a different mesh is
resharding on read: pass the target shardings. Every failure to restore raises
:class:`CheckpointError` naming the path; :func:`latest_step` is how a caller decides whether
to resume, explicitly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

import jax
import orbax.checkpoint as ocp

_STATE, _META = "state", "metadata"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or restored; the message names the path."""


class Restored(NamedTuple):
    state: Any
    metadata: dict
    step: int


def _manager(directory: str | os.PathLike, *, keep: int | None = None, create: bool = False):
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=create, enable_async_checkpointing=False)
    handlers = {_STATE: ocp.StandardCheckpointHandler(), _META: ocp.JsonCheckpointHandler()}
    return ocp.CheckpointManager(Path(directory).absolute(), options=options, item_handlers=handlers)


def all_steps(directory: str | os.PathLike) -> list[int]:
    """Steps with a complete (committed) checkpoint in ``directory``, ascending; [] if none."""
    if not Path(directory).is_dir():
        return []
    with _manager(directory) as mgr:
        return sorted(mgr.all_steps())


def latest_step(directory: str | os.PathLike) -> int | None:
    """Newest complete step in ``directory``, or None; unfinished temporary saves don't count."""
    steps = all_steps(directory)
    return steps[-1] if steps else None


def saved_arrays(directory: str | os.PathLike, step: int | None = None) -> dict[str, dict]:
    """Per saved array (by key path): ``shape``, ``dtype`` and on-disk ``chunk_shape``.

    The chunk shape is the shard shape each device wrote (the sharded layout), e.g.
    ``(2, 4, 32)`` for a ``[2, 32, 32]`` weight saved sharded 8 ways on its middle axis.
    """
    root = Path(directory).absolute()
    steps = all_steps(root)
    step = steps[-1] if step is None and steps else step
    if step not in steps:
        raise CheckpointError(f"{root / str(step)} is not a complete checkpoint; steps: {steps}")
    with _manager(root) as mgr:
        meta = mgr.item_metadata(step)[_STATE]
    tree = meta.tree if hasattr(meta, "tree") else meta
    flat = jax.tree.flatten_with_path(tree, is_leaf=lambda m: hasattr(m, "shape"))[0]
    return {
        jax.tree_util.keystr(kp): {
            "shape": tuple(m.shape),
            "dtype": str(m.dtype),
            "chunk_shape": tuple(getattr(getattr(m, "storage", None), "chunk_shape", None) or ()),
        }
        for kp, m in flat
        if hasattr(m, "shape")
    }


def save_checkpoint(
    directory: str | os.PathLike, step: int, state, *, metadata: dict | None = None, keep: int | None = None
) -> Path:
    """Writes ``state`` (and JSON ``metadata``) as ``directory/<step>``; returns that path.

    Blocks until the step is committed. ``keep``: keep only the newest ``keep`` steps (None keeps
    all). Saving a step that already exists is an error (a resumed run must restore, not redo).
    """
    path = Path(directory).absolute() / str(step)
    try:
        json.dumps(metadata or {})
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: metadata must be JSON-serialisable: {e}") from e
    if keep is not None and keep < 1:
        raise CheckpointError(f"{path}: keep={keep} is invalid; keep >= 1 or None (keep all)")
    try:
        with _quiet_orbax(), _manager(directory, keep=keep, create=True) as mgr:
            if step in mgr.all_steps():
                raise CheckpointError(f"{path} already exists; refusing to overwrite step {step}")
            args = ocp.args.Composite(
                **{_STATE: ocp.args.StandardSave(state), _META: ocp.args.JsonSave(metadata or {})}
            )
            if not mgr.save(step, args=args, force=True):
                raise CheckpointError(f"{path}: orbax declined to save step {step}")
            mgr.wait_until_finished()
    except CheckpointError:
        raise
    except Exception as e:  # a full disk, a permission error, ...: one error naming the step
        raise CheckpointError(
            f"cannot save {path}: {_short(e)} (the previous checkpoint is still the latest)"
        ) from None
    return path


_OS_CAUSES = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied")


def _short(e: BaseException) -> str:
    """The root cause of an orbax/tensorstore error on one line: the OS cause first if one is
    named anywhere in it, then at most 200 characters of the message."""
    while e.__cause__ is not None or e.__context__ is not None:
        e = e.__cause__ or e.__context__
    msg = " ".join(str(e).split())
    cause = next((c for c in _OS_CAUSES if c in msg), None)
    head = f"{type(e).__name__}: {msg[:200]}{' ...' if len(msg) > 200 else ''}"
    return f"{cause} ({head})" if cause else head


class _QuietOrbaxErrors(logging.Filter):
    """Drops orbax's own ERROR records (one per background thread, with tracebacks) while a save
    runs: its failure is raised once, as a CheckpointError carrying the cause."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and "orbax" in record.pathname)


@contextlib.contextmanager
def _quiet_orbax():
    loggers = [logging.getLogger(), logging.getLogger("absl")]
    f = _QuietOrbaxErrors()
    for lg in loggers:
        lg.addFilter(f)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(f)


def _abstract(x, sharding=None):
    """ShapeDtypeStruct of a target leaf (array or ShapeDtypeStruct), with ``sharding`` if given."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        return x  # Python scalars, None: restored as saved
    sharding = sharding if sharding is not None else getattr(x, "sharding", None)
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def _single_device_target(mgr, step: int, path: Path):
    """A target built from the saved array metadata: every array whole on the first device."""
    meta = mgr.item_metadata(step)[_STATE]
    if meta is None:
        raise CheckpointError(f"{path}: no readable '{_STATE}' metadata")
    tree = meta.tree if hasattr(meta, "tree") else meta
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one) if hasattr(m, "shape") else m, tree
    )


def restore_checkpoint(
    directory: str | os.PathLike, target=None, *, step: int | None = None, shardings=None
) -> Restored:
    """Restores ``(state, metadata, step)``; the newest step unless ``step`` is given.

    Args:
      directory: the checkpoint root given to :func:`save_checkpoint`.
      target: a pytree with the saved structure whose leaves are arrays or
        ``jax.ShapeDtypeStruct`` (e.g. ``abstract_params(config)``): restored leaves take their
        shape, dtype and sharding. None restores every array whole onto the first device.
      step: the step to restore; None means the newest complete one.
      shardings: optional pytree of ``jax.sharding.Sharding`` (same structure as ``target``)
        overriding the target's shardings: this is how a checkpoint saved on one mesh is
        restored onto another (e.g. ``param_shardings(target, new_mesh, rules)``).
    Raises:
      CheckpointError: no checkpoint, a missing step, or one that cannot be read (corrupt,
        incomplete, or a structure that does not match ``target``); never returns a fresh state.
    """
    root = Path(directory).absolute()
    if not root.is_dir():
        raise CheckpointError(f"cannot resume: checkpoint directory {root} does not exist")
    with _manager(root) as mgr:
        steps = sorted(mgr.all_steps())
        if not steps:
            raise CheckpointError(f"cannot resume: no complete checkpoint in {root}")
        step = steps[-1] if step is None else step
        path = root / str(step)
        if step not in steps:
            raise CheckpointError(
                f"cannot resume: {path} is not a complete checkpoint; available steps: {steps}"
            )
        try:
            if target is None:
                abstract = _single_device_target(mgr, step, path)
            elif shardings is None:
                abstract = jax.tree.map(_abstract, target)
            else:
                abstract = jax.tree.map(_abstract, target, shardings)
            args = ocp.args.Composite(
                **{_STATE: ocp.args.StandardRestore(abstract), _META: ocp.args.JsonRestore()}
            )
            out = mgr.restore(step, args=args)
        except CheckpointError:
            raise
        except Exception as e:  # orbax/tensorstore raise many types; all mean "unreadable"
            msg = str(e) if len(str(e)) < 600 else str(e)[:600] + " ..."
            raise CheckpointError(f"cannot restore {path}: {type(e).__name__}: {msg}") from e
    return Restored(out[_STATE], dict(out[_META] or {}), step)
