"""The training loop: warm start, then RL through the scheduler, with evaluation and checkpoints.

The run package's flow, top to bottom (``launch/train.py`` calls :func:`train`):

    config.parse (the typed, checked RunConfig) -> build.build (task suite + policy)
      -> build.compose (placement, samplers, learner parts, rollout worker)
      -> warm start -> Scheduler (the pure machine's driver) on the run clock's executor
      -> Train commands -> LearnerJob: learner.learner_step (pure) -> weight sync + publish
      -> files (metrics, journal, checkpoints) -> summary.

With ``scheduler.clock='virtual'`` everything runs on a virtual clock, so a run is a pure
function of its config and seed and ``--resume`` continues it exactly; with ``'real'`` the
sampler and the learner run on their own threads in wall-clock time (:mod:`agentjax.run.clock`
holds what differs: executor, what a checkpoint stores for the scheduler, how a resume rebuilds
it, what the summary records).
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from agentjax.diagnostics import tbevents
from agentjax.learner import checkpoint as ckpt
from agentjax.learner import resume as durable
from agentjax.learner.sft import demo_rows, sft_train
from agentjax.learner.step import init_train_state
from agentjax.policy.model import abstract_params, init_params
from agentjax.run import clock as runclock
from agentjax.run import config as runconfig
from agentjax.run import files as runfiles
from agentjax.run import learner as lrn
from agentjax.run import loopparts
from agentjax.run.build import Composed, Parts, build, compose, evaluate_heldout, spreads, task_dataset
from agentjax.run.summary import generated_tokens_per_s, progress_line, run_header_line, summarise_run
from agentjax.sampling.episode import input_widths
from agentjax.sampling.queue import Clock
from agentjax.sampling.replay import read_schedule
from agentjax.sampling.scheduler import Scheduler
from agentjax.sharding import multihost, param_shardings
from agentjax.sharding.exchange import Channel
from agentjax.sharding.placement import SyncStats, sync_weights
from agentjax.tasks import model as task_model


class LearnerJob:
    """The scheduler's Train command's job: :func:`~agentjax.run.learner.learner_step`, then its
    effects: the weight sync onto the sampler's mesh, the publish to the rollout worker, the
    measured step time, the metrics row. Its fields change only through its own methods."""

    def __init__(self, c: Composed, state: lrn.LearnerState, wall0: float):
        self.c, self.state, self.wall0 = c, state, wall0
        self.sync = SyncStats()
        self.train_wall = 0.0  # measured learner step seconds (cost ledger)
        self.sampler_params, self.sampler_version = None, state.version
        self._rows: list[dict] = []
        self._publish(lrn.weights(c.learner, state), keep_from=None)

    def __call__(self, version: int, train) -> int:
        """One learner step from ``version`` (the scheduler's); returns the new version."""
        if version != self.state.version:
            raise RuntimeError(f"the scheduler is at version {version}, the learner at {self.state.version}")
        t0 = time.perf_counter()
        state, weights, row = lrn.learner_step(self.c.learner, self.state, train)
        jax.block_until_ready(state.train.step)  # measured: the ledger's training cost
        self.train_wall += time.perf_counter() - t0
        self.state = state
        self._publish(weights, keep_from=weights.version - self.c.parts.run.admission.max_version_gap - 1)
        gen = generated_tokens_per_s([b.trajectory for b in train.batch])
        self._rows.append({**row, **gen, "wall": time.perf_counter() - self.wall0})
        return state.version

    def _publish(self, w: lrn.Weights, keep_from: int | None) -> None:
        """Syncs ``w`` onto the sampler's mesh (``placement.sync_weights``: no-op colocated on
        one process, a gather onto every process on several; every ``sync_every`` steps
        disaggregated) and hands it to the worker as scheduler version ``w.version``."""
        placement = self.c.placement
        synced = self.sync.syncs
        self.sampler_params = sync_weights(placement, w.params, self.sampler_params, w.version, self.sync)
        if placement.colocated or self.sync.syncs > synced:
            self.sampler_version = w.version  # else the sampler keeps older weights (sync_every > 1)
        self.c.worker.publish(
            w.version,
            self.sampler_params,
            keep_from=keep_from,
            behaviour_version=self.sampler_version,
            env_rates=w.env_rates,
        )

    def take_rows(self) -> list[dict]:
        """The metrics rows of the steps since the last call."""
        rows, self._rows = self._rows, []
        return rows


def warm_start_rows(episodes, codec, caps, max_seq_len: int) -> dict:
    """The warm start's rows of ``episodes``, each prompt and observation cut as the rollout cuts
    them under ``caps`` (:func:`~agentjax.sampling.episode.input_widths`): the policy is trained on
    the inputs it will sample from."""
    return demo_rows(episodes, codec, max_seq_len, input_widths(caps, max_seq_len))


def warm_start(parts: Parts, params, log, mesh) -> tuple[Any, dict, list, dict | None]:
    """The supervised warm start on the suite's demonstrations: ``(params, header fields, curve,
    rows)``, ``curve`` the ``[step, loss]`` points of :func:`warm_start_curve` (TensorBoard's
    ``warm_start/nll``), ``rows`` the demonstration rows it trained on."""
    ws = parts.run.warm_start
    if ws.steps == 0:
        return params, {}, [], None
    eps = parts.suite.demonstrations(ws.episodes, seed=parts.run.seed * 7919)
    rows = warm_start_rows([e.pairs for e in eps], parts.codec, parts.run.caps, parts.model.max_seq_len)
    demo_success = float(np.mean([e.success for e in eps]))
    log_every = max(ws.steps // 5, 1)
    params, losses = sft_train(
        params,
        parts.model,
        rows,
        steps=ws.steps,
        batch_size=ws.batch_size,
        learning_rate=ws.learning_rate,
        seed=parts.run.seed,
        log_every=log_every,
        log=log,
        place=lambda b: multihost.shard_batch(b, mesh),  # rows split over data x fsdp
    )
    return (
        params,
        {
            "warm_start/nll_first": losses[0],
            "warm_start/nll_last": losses[-1],
            "warm_start/demo_train_success": demo_success,
        },
        warm_start_curve(losses, log_every),
        rows,
    )


WARM_START_POINTS = 1000  # at most about this many points of the warm start's loss curve


def warm_start_curve(losses: list[float], log_every: int) -> list[list]:
    """``[[step, loss], ...]`` of the warm start: every step printed (``log_every``, the last),
    and every step of a warm start up to :data:`WARM_START_POINTS` steps (a longer one every
    ``ceil(steps / WARM_START_POINTS)``-th step), so the curve is whole and its size bounded."""
    n = len(losses)
    stride = -(-n // WARM_START_POINTS)
    return [[s, losses[s]] for s in range(n) if s % stride == 0 or s % log_every == 0 or s == n - 1]


def train(
    cfg,
    workdir: str,
    *,
    resume: bool = False,
    replay: str | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Runs (or resumes) the configured training; returns the summary (also in summary.json).

    ``replay``: the workdir of a finished real-time run of the same config, whose recorded
    schedule this run re-executes (:mod:`agentjax.sampling.replay`)."""
    run = runconfig.parse(cfg)  # fails before any work on an invalid config
    if multihost.is_distributed() and run.scheduler.round_budget:
        raise runconfig.ConfigError(
            f"scheduler.round_budget={run.scheduler.round_budget} (partial rollout) runs one "
            "process: a paused episode's environment and KV cache stay on the process that "
            "sampled it, and its next round may fall to another; set round_budget to 0"
        )
    schedule = None
    if replay is not None:
        if run.scheduler.clock != Clock.REAL or resume:
            raise runconfig.ConfigError(
                "--replay re-executes a scheduler.clock='real' run: pass that run's flags "
                "(clock 'real'), without --resume"
            )
        schedule = read_schedule(replay, runfiles.config_record(run))
    parts = build(run)  # ... and so does a model too small for the task
    lock = channel = None
    if jax.process_index() == 0:  # the process that writes the files: before any work, not at a write
        n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract_params(parts.model)))
        runfiles.check_workdir(workdir, runfiles.needed_bytes(n))
        lock = runfiles.RunLock(workdir).acquire(log)  # one run per workdir
        log(run_header_line(parts, n, workdir))
    try:
        c = compose(parts)
        if spreads(run):  # the control plane of several processes on the real clock, beating
            channel = Channel.of_jax(c.exchange.wire, run.placement.peer_timeout_s).start()
        clock = runclock.choose(run.scheduler.clock, schedule, replay or "", channel)
        return _train(cfg, c, workdir, clock, resume=resume, log=log)
    finally:
        if channel is not None:
            channel.close()
        if lock is not None:
            lock.release()


def _train(cfg, c: Composed, workdir: str, clock, *, resume: bool, log) -> dict:
    """:func:`train` once the config, the parts and the workdir are checked (and locked)."""
    parts, run, worker = c.parts, c.parts.run, c.worker
    os.makedirs(workdir, exist_ok=True)
    files = runfiles.run_files(workdir, jax.process_index(), shard=spreads(run))
    wall0 = time.perf_counter()
    params0 = _initial_params(parts, c.placement)
    last_eval = resumed_at = None
    job: LearnerJob | None = None

    def learner(version: int, train) -> int:  # the job exists before the scheduler's first Train
        return job(version, train)

    def fresh(tasks, executor, version: int = 0) -> Scheduler:
        return Scheduler(
            tasks,
            worker,
            learner,
            version,
            config=run.scheduler,
            staleness_config=run.admission,
            batch_size=run.rl.batch_size,
            group_size=run.rl.group_size,
            executor=executor,
            retry=loopparts.retry_policy(run),
            version=version,
        )

    if resume:
        r = runfiles.resume_run(
            c, files, params0, c.learner.tx, clock, lambda t, v, ex: fresh(t, ex, v), learner, log
        )
        header, scheduler, tasks, last_eval, journal = r.header, r.scheduler, r.tasks, r.last_eval, r.journal
        resumed_at = scheduler.steps
        ref = ckpt.restore_checkpoint(files.reference, params0, step=0).state if run.loss.kl_coef else None
        demos = dict(np.load(files.demos)) if run.loss.demo_coef else None
        state = lrn.init_state(
            c.learner, multihost.globalize(r.train, c.placement.learner_mesh), scheduler.version, ref, demos
        )
        done = os.path.join(workdir, "summary.json")
        if scheduler.steps >= run.rl.steps and os.path.exists(done):
            log(f"the run finished at step {scheduler.steps}; nothing to do ({done} unchanged)")
            with open(done) as f:
                return json.load(f)
    else:
        header, state = _start(cfg, c, files, params0, log)
        journal = runfiles.JournalWriter(files)
        tasks = iter(task_dataset(parts))
        scheduler = fresh(tasks, clock.executor())
    job = LearnerJob(c, state, wall0)
    journal.start([i for i, _ in scheduler.finished_trajectories(include_paused=True)])
    start = (scheduler.steps, time.perf_counter())  # the ETA's pace: this process's steps
    while scheduler.steps < run.rl.steps:
        nxt = min((scheduler.steps // run.log_every + 1) * run.log_every, run.rl.steps)
        before = scheduler.steps
        scheduler.run(nxt)
        journal.record(scheduler.finished_trajectories())
        if scheduler.steps == before:
            log("task source exhausted")
            break
        rows = job.take_rows()
        step = scheduler.steps
        if step % run.rl.eval_every == 0 or step == run.rl.steps:
            last_eval = evaluate_heldout(c, multihost.local_view(job.state.train.params), step)
            rows.append({"step": step, **last_eval})
        files.append_rows(rows)
        log(progress_line(rows, scheduler, c, last_eval, start, wall0))
        if run.checkpoint_every and (step % run.checkpoint_every == 0 or step == run.rl.steps):
            _checkpoint(files, clock, scheduler, tasks, job, journal, header, step)
    runlog = scheduler.finish()
    summary = summarise_run(c, job, scheduler, runlog, header, last_eval)
    summary.update(clock.finish(scheduler, workdir, runfiles.config_record(run), resumed_at))
    if c.exchange is not None:  # several processes: how the work was split, the bytes exchanged
        summary["processes"] = c.exchange.report()
    if worker.pool is not None:  # the slot engine's environment pool, measured on real events
        summary["engine"] = worker.engine_report()
        worker.pool.close()
    files.write_bytes(os.path.join(workdir, "summary.json"), json.dumps(summary, indent=1).encode())
    return summary


def _start(cfg, c: Composed, files: runfiles.RunFiles, params0, log) -> tuple[dict, lrn.LearnerState]:
    """A fresh run's start: its files cleared and written, the warm start, the RL start's
    held-out evaluation; returns the run's header and the learner's first state."""
    parts, run = c.parts, c.parts.run
    if os.path.isdir(files.checkpoints) and ckpt.latest_step(files.checkpoints) is not None:
        raise ckpt.CheckpointError(
            f"{files.checkpoints} already holds checkpoints: pass --resume to continue, "
            "or use a new --workdir"
        )
    files.clear_stale()  # left by a run that never reached a checkpoint
    files.write_config(cfg)  # launch.eval --workdir evaluates this run
    files.save_source(parts.policy)  # a HF policy's files: what launch.export needs besides the weights
    demo = parts.suite.baseline()
    what = parts.suite.eval_set  # "held-out", or what the suite evaluates instead
    log(f"demonstrator {what} success {demo:.3f} (scripted, {len(parts.heldout)} tasks)")
    params, ws, curve, rows = warm_start(parts, params0, log, c.placement.learner_mesh)
    e0 = evaluate_heldout(c, multihost.local_view(params), 0)
    log(f"warm start {what} success {e0['eval/success']:.3f}")
    header = {
        "eval_set": what,
        "demonstrator_success": demo,
        **ws,
        "rl_start_success": e0["eval/success"],
        "versions": resolved_versions(),
    }
    row0 = {"step": 0, "header": header, **e0}
    if curve:  # TensorBoard's warm_start/nll, one point per warm-start step (tbevents)
        row0[tbevents.WARM_START_CURVE] = curve
    files.append_rows([row0])
    train0 = multihost.globalize(init_train_state(params, c.learner.tx, run.seed), c.placement.learner_mesh)
    ref = None
    if run.loss.kl_coef:  # KL to the RL phase's starting policy, saved for --resume
        ref = train0.params
        ckpt.save_checkpoint(files.reference, 0, ref)
    demos = None
    if run.loss.demo_coef:  # the RL loss's demonstration term trains on them; saved for --resume
        demos = rows
        buf = io.BytesIO()
        np.savez(buf, **rows)
        files.write_bytes(files.demos, buf.getvalue())
    return header, lrn.init_state(c.learner, train0, 0, ref, demos)


def _checkpoint(files, clock, scheduler, tasks, job: LearnerJob, journal, header: dict, step: int) -> None:
    """The train state (orbax), the scheduler's part (the clock's blob) and their metadata."""
    ckdir = files.checkpoints
    os.makedirs(ckdir, exist_ok=True)
    blob = clock.checkpoint_blob(scheduler, tasks, journal.index_base)
    files.write_bytes(durable.snapshot_path(ckdir, step), blob)
    ckpt.save_checkpoint(
        ckdir,
        step,
        job.state.train,
        keep=2,
        metadata={
            "header": header,
            "journaled": journal.count,
            "data_iterator": tasks.get_state(),
            "config": runfiles.config_record(job.c.parts.run),
        },
    )
    kept = ckpt.all_steps(ckdir)  # collective: orbax syncs every process here
    files.prune_snapshots(kept)


def resolved_versions() -> dict:
    """The resolved versions that decide a run's bits (same seed = same metrics only with these)."""
    import importlib.metadata as md  # noqa: PLC0415
    import platform  # noqa: PLC0415

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for name in ("jax", "jaxlib", "numpy", "ml_dtypes"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def _initial_params(parts: Parts, placement):
    """Random init, or the HF checkpoint read straight onto the learner mesh's shardings."""
    shardings = param_shardings(abstract_params(parts.model), placement.learner_mesh, placement.rules)
    if parts.policy.hf_path:  # each device reads its own slice (any number of processes)
        return task_model.load_params(parts.policy, shardings)
    params0 = init_params(parts.model, jax.random.key(parts.run.seed))  # each device fills its shards
    return multihost.to_global(jax.device_get(params0), shardings)  # over every process's devices
