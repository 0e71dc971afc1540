"""A run's files in its workdir: metrics rows, the journal, atomic writes, the stored config, and
the resume that reconciles checkpoint, scheduler snapshot, metrics and journal before changing
anything.

What the scheduler part of a checkpoint holds, and how a resume rebuilds the scheduler from it,
depends on the clock (:mod:`agentjax.runclock`: a snapshot restored exactly on the virtual
clock, a redo record sampled again in real time)."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
from typing import Any

from agentjax.diagnostics import tbevents
from agentjax.learner import checkpoint as ckpt
from agentjax.learner import resume as durable
from agentjax.learner.journal import Journal
from agentjax.learner.step import init_train_state
from agentjax.run import config as runconfig
from agentjax.run import loopparts
from agentjax.run.build import Composed, task_dataset
from agentjax.sampling import snapshot
from agentjax.sampling.scheduler import Scheduler
from agentjax.tasks import model as task_model
from agentjax.trajectory import TrajectoryMeta


class WorkdirError(RuntimeError):
    """A workdir that cannot hold a run (not writable, too little free space) or that another
    live run holds; the message names the workdir and what to do."""


LOCK_NAME = "run.lock"
HEADROOM_BYTES = 64 << 20  # metrics, journal, event files and the report, at least


def needed_bytes(n_params: int, keep: int = 2) -> int:
    """The disk a run needs at least: ``keep`` checkpoints and one being written, each the float32
    parameters and the optimizer's two moments, plus :data:`HEADROOM_BYTES`."""
    return (keep + 1) * 3 * 4 * int(n_params) + HEADROOM_BYTES


def check_workdir(workdir: str, need: int) -> None:
    """Raises :class:`WorkdirError` unless ``workdir`` exists (or can be made), takes a write and
    an fsync, and has ``need`` bytes free: a run finds out at start, not at its first checkpoint."""
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise WorkdirError(f"--workdir={workdir} cannot be created: {e.strerror or e}") from None
    probe = os.path.join(workdir, f".write-probe.{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"agentjax")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise WorkdirError(
            f"--workdir={workdir} is not writable ({e.strerror or e}); "
            "make it writable or pass another --workdir"
        ) from None
    free = shutil.disk_usage(workdir).free
    if free < need:
        raise WorkdirError(
            f"--workdir={workdir} has {free / 2**20:.1f} MiB free but this run needs at least "
            f"{need / 2**20:.1f} MiB (checkpoints of the parameters and optimizer state, metrics, "
            "journal); free some space or pass another --workdir"
        )


class RunLock:
    """One run per workdir: an exclusive ``flock`` on ``<workdir>/run.lock``, which holds the
    owner's pid. The kernel drops the lock when its process dies, so a lock left by a killed run
    is taken over (and said so); a live owner makes :meth:`acquire` refuse, naming its pid."""

    def __init__(self, workdir: str):
        self.path, self._fd = os.path.join(workdir, LOCK_NAME), None

    def acquire(self, log=lambda s: None) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WorkdirError(
                f"--workdir={os.path.dirname(self.path)} is in use by another run (pid {owner}, lock "
                f"{self.path}); wait for it to finish, stop it, or pass another --workdir"
            ) from None
        stale = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        if stale:  # its owner died without releasing it (SIGKILL, a crash): the kernel freed it
            log(f"took over the stale lock {self.path} of pid {stale} (not running)")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # released: the next run finds no stale owner
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def write_rows(path: str, rows: list[dict]) -> None:
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())
    tbevents.write_rows(os.path.join(os.path.dirname(path), "tb"), rows)  # TensorBoard scalars


def atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


RUN_CONFIG = "run_config.json"  # the config as given (file + flags), for launch.eval --workdir


def write_run_config(workdir: str, cfg) -> None:
    """``<workdir>/run_config.json``: the config a run was started with, before parsing (so
    ``runconfig.parse`` reads it back as it read the original)."""
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    atomic_write(os.path.join(workdir, RUN_CONFIG), json.dumps(d, indent=1, default=str).encode())


def config_record(run: runconfig.RunConfig) -> dict:
    """The parsed run config as JSON (stored with every checkpoint; --resume compares it)."""
    return json.loads(json.dumps(dataclasses.asdict(run), default=str))


def snapshot_intact(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            snapshot.loads(f.read(), source=path)
        return True
    except (OSError, snapshot.SnapshotError):
        return False


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """A run's files in its workdir, written by this process (several processes: process 0; the
    others get :class:`PeerFiles`, chosen once by :func:`run_files`)."""

    workdir: str

    @property
    def metrics(self) -> str:
        return os.path.join(self.workdir, "metrics.jsonl")

    @property
    def journal(self) -> str:
        return os.path.join(self.workdir, "journal.bin")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.workdir, "checkpoints")

    @property
    def reference(self) -> str:
        return os.path.join(self.workdir, "reference")

    @property
    def demos(self) -> str:
        """The warm start's demonstration rows the RL loss's ``loss.demo_coef`` term trains on."""
        return os.path.join(self.workdir, "demos.npz")

    def clear_stale(self) -> None:
        """A fresh run's start: metrics and journal of an earlier run that never reached a
        checkpoint, its reference policy and demonstration rows, are removed."""
        for stale in (self.metrics, self.journal, self.demos):
            if os.path.exists(stale):
                os.remove(stale)
        if os.path.isdir(self.reference):
            shutil.rmtree(self.reference)

    def write_config(self, cfg) -> None:
        write_run_config(self.workdir, cfg)

    def write_bytes(self, path: str, data: bytes) -> None:
        atomic_write(path, data)

    def append_rows(self, rows: list[dict]) -> None:
        write_rows(self.metrics, rows)

    def append_journal(self, journal: Journal, records: list) -> None:
        journal.append(records)

    def journaled(self, meta: dict, held: int) -> int:
        """The journal records a checkpoint committed (``held``: those the journal holds)."""
        return meta["journaled"]

    def prune_snapshots(self, kept) -> None:
        durable.prune_snapshots(self.checkpoints, kept)  # with their checkpoints

    def save_source(self, policy) -> None:
        """What ``launch.export`` needs besides the weights (a HF policy's files)."""
        if policy.hf_path:
            task_model.save_source(policy, os.path.join(self.workdir, task_model.SOURCE_DIR))

    def cut_back(self, text: str, torn: bool, journal: Journal, scan, journaled: int, log) -> None:
        """A resume's repair: the metrics cut back to ``text`` and the journal to ``journaled``
        records (dropping a torn tail)."""
        with open(self.metrics) as f:
            if f.read() != text:
                atomic_write(self.metrics, text.encode())
        if torn:
            log(f"repaired {self.metrics}: dropped a torn last line")
        if scan.torn:
            log(f"repaired {journal.path}: dropped a torn tail at byte {scan.valid_bytes}")
        journal.truncate(journaled)


@dataclasses.dataclass(frozen=True)
class PeerFiles(RunFiles):
    """Another process (process 0) writes the workdir: this one reads it, every write is a no-op."""

    def clear_stale(self) -> None:
        pass

    def write_config(self, cfg) -> None:
        pass

    def write_bytes(self, path: str, data: bytes) -> None:
        pass

    def append_rows(self, rows: list[dict]) -> None:
        pass

    def append_journal(self, journal: Journal, records: list) -> None:
        pass

    def prune_snapshots(self, kept) -> None:
        pass

    def save_source(self, policy) -> None:
        pass

    def cut_back(self, text: str, torn: bool, journal: Journal, scan, journaled: int, log) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class ShardFiles(PeerFiles):
    """Another process writes the workdir, but the trajectories this one sampled stay here
    (several processes on the real clock): it journals them to its own ``journal.p<k>.bin``."""

    process: int = 1

    @property
    def journal(self) -> str:
        return os.path.join(self.workdir, f"journal.p{self.process}.bin")

    def append_journal(self, journal: Journal, records: list) -> None:
        journal.append(records)

    def journaled(self, meta: dict, held: int) -> int:
        """A checkpoint counts process 0's journal only: this shard is kept whole (never cut
        back) and a resumed run appends to it."""
        return held


def run_files(workdir: str, process_index: int, shard: bool = False) -> RunFiles:
    """The run's files, chosen once: process 0 writes them, every other process reads; with
    ``shard`` (trajectories stay where they were sampled) each journals its own."""
    if process_index == 0:
        return RunFiles(workdir)
    return ShardFiles(workdir, process_index) if shard else PeerFiles(workdir)


class JournalWriter:
    """Appends every newly completed trajectory once to the crash-safe journal; ``count``: the
    records in it (a checkpoint's "journaled"). ``index_base``: the submissions before a
    real-time resume, whose scheduler counts from 0 again (journal submit indices go on)."""

    def __init__(self, files: RunFiles, count: int = 0, index_base: int = 0):
        self.journal, self.files = Journal(files.journal), files
        self.count, self.index_base = count, index_base
        self._journaled: set[int] = set()

    def start(self, journaled) -> None:
        """The submissions in ``journaled`` (those a fresh or restored scheduler already holds)
        count as journaled."""
        self._journaled = set(journaled)

    def record(self, finished) -> None:
        """Appends the newly completed trajectories of ``finished`` ((index, trajectory) pairs)."""
        done = [t for i, t in finished if i not in self._journaled]
        self._journaled.update(t.submit_index for t in done)
        done = [t for t in done if not isinstance(t, TrajectoryMeta)]  # held by another process
        if self.index_base:
            done = [dataclasses.replace(t, submit_index=t.submit_index + self.index_base) for t in done]
        self.files.append_journal(self.journal, done)
        self.count += len(done)


@dataclasses.dataclass(frozen=True)
class Resumed:
    """What a resume restored: the run's header, its scheduler and task source, the last eval,
    the train state, and the journal's position."""

    header: dict
    scheduler: Scheduler
    tasks: Any
    last_eval: dict | None
    train: Any
    journal: JournalWriter


def resume_run(c: Composed, files: RunFiles, params0, tx, clock, fresh_scheduler, learner, log) -> Resumed:
    """Restores the newest checkpoint after checking that everything agrees (see
    :mod:`agentjax.learner.resume`); only then cuts the metrics and journal back to it.

    ``clock`` (:mod:`agentjax.run.clock`) rebuilds the scheduler from the checkpoint's blob: the
    snapshot restored (virtual clock, with ``learner`` as its Train command's job), or
    ``fresh_scheduler(tasks, version, executor)`` at the checkpoint's version sampling its redo
    record first (real time)."""
    run, ckdir = c.parts.run, files.checkpoints
    steps = ckpt.all_steps(ckdir)
    if not steps:
        raise ckpt.CheckpointError(f"--resume: no checkpoint under {ckdir}")
    step = steps[-1]
    restored = ckpt.restore_checkpoint(ckdir, init_train_state(params0, tx, run.seed), step=step)
    meta = restored.metadata
    durable.check_config(meta.get("config"), config_record(run), f"checkpoint step {step} ({ckdir})")
    # The files the run only reads or cuts are checked before a scheduler (and its threads) exists.
    text, torn = durable.metrics_lines(files.metrics, step)
    journal = Journal(files.journal)
    scan = journal.scan()
    journaled = files.journaled(meta, len(scan.records))
    if len(scan.records) < journaled:
        cut = f" (a torn record at byte {scan.valid_bytes} of {scan.total_bytes})" if scan.torn else ""
        hint = durable.journal_hint(ckdir, step, steps, len(scan.records), snapshot_intact)
        raise ckpt.CheckpointError(
            f"cannot resume from step {step}: {journal.path} holds {len(scan.records)} intact "
            f"records{cut} but the checkpoint journaled {journaled}: committed trajectories "
            f"were lost. {hint}"
        )
    path = durable.snapshot_path(ckdir, step)
    tasks = iter(task_dataset(c.parts))
    tasks.set_state(meta["data_iterator"])
    try:
        with open(path, "rb") as f:
            blob = f.read()
        restore = lambda blob, tasks, ex, source: Scheduler.restore(  # noqa: E731
            blob, tasks, c.worker, learner, skip_drawn=False, executor=ex, source=source,
            retry=loopparts.retry_policy(run),
        )  # fmt: skip
        resumed = clock.resume(blob, path, step, tasks, fresh_scheduler, restore)
    except (OSError, snapshot.SnapshotError) as e:
        hint = durable.previous_step_hint(ckdir, step, steps, snapshot_intact)
        raise ckpt.CheckpointError(f"cannot resume from step {step}: {e}. {hint}") from None
    # Everything agrees: cut what was written after the checkpoint (and any torn tail).
    files.cut_back(text, torn, journal, scan, journaled, log)
    evals = [json.loads(ln) for ln in text.splitlines()]
    evals = [x for x in evals if "eval/success" in x and x["step"] > 0]
    log(f"resumed from step {step} ({ckdir})")
    return Resumed(
        meta["header"],
        resumed.scheduler,
        resumed.tasks,
        evals[-1] if evals else None,
        restored.state,
        JournalWriter(files, journaled, resumed.index_base),
    )
