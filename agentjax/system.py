"""The training system: warm start, then RL through the scheduler, with evaluation and checkpoints.

The one place that knows every component (``launch/train.py`` calls :func:`train`):

    tasks (GRPO groups) -> Scheduler (sync | async | windowed FIFO, staleness manager)
      -> executor (scheduler.clock) -> SamplerWorker (slot engine or lock-step Rollout over host envs)
      -> completed trajectories (journaled) -> learner batch -> jitted train step -> params v+1
      -> weight sync to the sampler (placement) -> ... ; held-out greedy evaluation every k steps.

With ``scheduler.clock='virtual'`` (the default) everything runs on a virtual clock (simulated
tool latency and generation cost, :class:`BatchingExecutor`), so a run is a pure function of its
config and seed; it checkpoints (orbax train state + scheduler snapshot) and ``resume=True``
continues exactly where the last checkpoint left off. With ``'real'`` the sampler and the learner
run on their own threads in wall-clock time (:class:`RealtimeExecutor`: overlapped in the async
modes); threads hold its work in flight, so its checkpoints store a redo record instead of a
snapshot, and ``resume=True`` continues from the checkpoint, sampling the unresolved tasks again
(:mod:`agentjax.workdir`). The run's parts and
mutable state live in :mod:`agentjax.runstate`, its files and the resume reconciliation in
:mod:`agentjax.workdir`; this module only composes them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from agentjax import loopparts, runclock, runconfig
from agentjax import workdir as files
from agentjax.learner import checkpoint as ckpt
from agentjax.learner import resume as durable
from agentjax.learner.sft import demo_rows, sft_train
from agentjax.learner.step import init_train_state
from agentjax.policy.model import abstract_params, init_params
from agentjax.runstate import (
    Parts,
    RunState,
    build,
    evaluate_heldout,
    task_dataset,
)
from agentjax.runsummary import progress_line, run_header_line, summarise_run
from agentjax.sampling.queue import Clock
from agentjax.sampling.replay import read_schedule
from agentjax.sampling.scheduler import Scheduler
from agentjax.sampling.worker import SamplerWorker
from agentjax.sharding import multihost, param_shardings
from agentjax.tasks import model as task_model


def warm_start(parts: Parts, params, log, mesh) -> tuple[Any, dict]:
    ws = parts.run.warm_start
    if ws.steps == 0:
        return params, {}
    eps = parts.suite.demonstrations(ws.episodes, seed=parts.run.seed * 7919)
    rows = demo_rows([e.pairs for e in eps], parts.codec, parts.model.max_seq_len)
    demo_success = float(np.mean([e.success for e in eps]))
    params, losses = sft_train(
        params,
        parts.model,
        rows,
        steps=ws.steps,
        batch_size=ws.batch_size,
        learning_rate=ws.learning_rate,
        seed=parts.run.seed,
        log_every=max(ws.steps // 5, 1),
        log=log,
        place=lambda b: multihost.shard_batch(b, mesh),  # rows split over data x fsdp
    )
    return params, {
        "warm_start/nll_first": losses[0],
        "warm_start/nll_last": losses[-1],
        "warm_start/demo_train_success": demo_success,
    }


def _scheduler(parts: Parts, worker: SamplerWorker, r: RunState, tasks, executor, version=0) -> Scheduler:
    """A fresh scheduler at ``version`` (the learner's job returns version numbers: they are its
    parameters) on ``executor`` (the run clock's)."""
    run = parts.run
    return Scheduler(
        tasks,
        worker,
        r.learner,
        version,
        config=run.scheduler,
        staleness_config=run.admission,
        batch_size=run.rl.batch_size,
        group_size=run.rl.group_size,
        executor=executor,
        retry=loopparts.retry_policy(run),
        version=version,
    )


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
    if multihost.is_distributed() and run.scheduler.clock == Clock.REAL:
        raise runconfig.ConfigError(
            "scheduler.clock='real' runs one process: with --num_processes > 1 every process "
            "must take the same scheduling decisions, which only the virtual clock guarantees; "
            "pass --config.scheduler.clock=virtual"
        )
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
        schedule = read_schedule(replay, files.config_record(run))
    parts = build(run)  # ... and so does a model too small for the task
    lock = None
    if jax.process_index() == 0:  # the process that writes the files: before any work, not at a write
        n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract_params(parts.model)))
        files.check_workdir(workdir, files.needed_bytes(n))
        lock = files.RunLock(workdir).acquire(log)  # one run per workdir
        log(run_header_line(parts, n, workdir))
    try:
        return _train(run, cfg, parts, workdir, resume=resume, replay=replay, schedule=schedule, log=log)
    finally:
        if lock is not None:
            lock.release()


def _train(run, cfg, parts: Parts, workdir: str, *, resume, replay, schedule, log) -> dict:
    """:func:`train` once the config (``run``, parsed from ``cfg``), the parts and the workdir are
    checked (and locked)."""
    os.makedirs(workdir, exist_ok=True)
    r = RunState(parts, workdir, log)
    clock = runclock.choose(run.scheduler.clock, schedule, replay or "")
    ckdir = os.path.join(workdir, "checkpoints")
    refdir = os.path.join(workdir, "reference")
    params0 = _initial_params(parts, r.placement)
    worker = r.worker
    last_eval = resumed_at = None
    if resume:
        fresh = lambda t, version, ex: _scheduler(parts, worker, r, t, ex, version)  # noqa: E731
        header, scheduler, tasks, last_eval = files.resume_run(r, params0, ckdir, clock, fresh)
        resumed_at = scheduler.steps
        if run.loss.kl_coef:
            r.ref_params = ckpt.restore_checkpoint(refdir, params0, step=0).state
        done = os.path.join(workdir, "summary.json")
        if scheduler.steps >= run.rl.steps and os.path.exists(done):
            log(f"the run finished at step {scheduler.steps}; nothing to do ({done} unchanged)")
            with open(done) as f:
                return json.load(f)
    else:
        if os.path.isdir(ckdir) and ckpt.latest_step(ckdir) is not None:
            raise ckpt.CheckpointError(
                f"{ckdir} already holds checkpoints: pass --resume to continue, or use a new --workdir"
            )
        for stale in (r.metrics_path, r.journal.path) if r.writer else ():
            if os.path.exists(stale):
                os.remove(stale)
        if os.path.isdir(refdir) and r.writer:  # left by a run that never reached a checkpoint
            shutil.rmtree(refdir)
        if r.writer:  # launch.eval --workdir evaluates this run with this config
            files.write_run_config(workdir, cfg)
        if parts.policy.hf_path and r.writer:  # what launch.export needs besides the weights
            task_model.save_source(parts.policy, os.path.join(workdir, task_model.SOURCE_DIR))
        demo = parts.suite.baseline()
        log(f"demonstrator held-out success {demo:.3f} (scripted, {len(parts.heldout)} tasks)")
        params, ws = warm_start(parts, params0, log, r.placement.learner_mesh)
        e0 = evaluate_heldout(r, multihost.local_view(params), 0)
        log(f"warm start held-out success {e0['eval/success']:.3f}")
        header = {
            "demonstrator_success": demo,
            **ws,
            "rl_start_success": e0["eval/success"],
            "versions": resolved_versions(),
        }
        if r.writer:
            files.write_rows(r.metrics_path, [{"step": 0, "header": header, **e0}])
        r.state = r.on_mesh(init_train_state(params, r.tx, run.seed))
        if run.loss.kl_coef:  # KL to the RL phase's starting policy, saved for --resume
            r.ref_params = r.state.params
            ckpt.save_checkpoint(refdir, 0, r.ref_params)
        tasks = iter(task_dataset(parts))
        scheduler = _scheduler(parts, worker, r, tasks, clock.executor())
    r.attach(scheduler.version, [i for i, _ in scheduler.finished_trajectories(include_paused=True)])
    start = (scheduler.steps, time.perf_counter())  # the ETA's pace: this process's steps
    while scheduler.steps < run.rl.steps:
        nxt = min((scheduler.steps // run.log_every + 1) * run.log_every, run.rl.steps)
        before = scheduler.steps
        scheduler.run(nxt)
        r.journal_rounds(scheduler.finished_trajectories())
        if scheduler.steps == before:
            log("task source exhausted")
            break
        rows, r.rows = r.rows, []
        step = scheduler.steps
        if step % run.rl.eval_every == 0 or step == run.rl.steps:
            last_eval = evaluate_heldout(r, multihost.local_view(r.state.params), step)
            rows.append({"step": step, **last_eval})
        if r.writer:
            files.write_rows(r.metrics_path, rows)
        log(progress_line(rows, scheduler, r, last_eval, start))
        if run.checkpoint_every and (step % run.checkpoint_every == 0 or step == run.rl.steps):
            os.makedirs(ckdir, exist_ok=True)
            blob = clock.checkpoint_blob(scheduler, tasks, r.index_base)
            if r.writer:
                files.atomic_write(durable.snapshot_path(ckdir, step), blob)
            ckpt.save_checkpoint(
                ckdir,
                step,
                r.state,
                keep=2,
                metadata={
                    "header": header,
                    "journaled": r.journal_count,
                    "data_iterator": tasks.get_state(),
                    "config": files.config_record(run),
                },
            )
            kept = ckpt.all_steps(ckdir)  # collective: orbax syncs every process here
            if r.writer:
                durable.prune_snapshots(ckdir, kept)  # with their checkpoints
    runlog = scheduler.finish()
    summary = summarise_run(r, scheduler, runlog, header, last_eval)
    summary.update(clock.finish(scheduler, workdir, files.config_record(run), resumed_at))
    if worker.exchange is not None:  # several processes: how the rounds were split
        summary["processes"] = worker.exchange.report()
    if worker.pool is not None:  # the slot engine's environment pool, measured on real events
        summary["engine"] = worker.engine_report()
        worker.pool.close()
    if r.writer:
        files.atomic_write(os.path.join(workdir, "summary.json"), json.dumps(summary, indent=1).encode())
    return summary


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
