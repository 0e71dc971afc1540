"""What a run reports while and after it trains: the header, the progress line and
``summary.json``'s body, read from the run's parts, scheduler and learner job (never changed)."""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from agentjax.diagnostics.tbevents import GENERATED_PER_S
from agentjax.sharding import multihost


def run_header_line(parts, n_params: int, workdir: str) -> str:
    """What the run is, printed once before any work: model, parameters, devices, task, schedule."""
    run = parts.run
    s = run.scheduler
    model = parts.policy.hf_path or f"built-in d{parts.model.d_model} x{parts.model.n_layers} layers"
    dev = jax.devices()
    engine = f"slot engine {s.engine_slots} slots" if s.engine_slots else "lock-step rollout"
    return (
        f"run: {model}, {n_params / 1e6:.2f}M parameters | {len(dev)} {dev[0].platform} device(s), "
        f"{jax.process_count()} process(es) | task {run.task.name} | {s.mode.value} on the "
        f"{s.clock.value} clock, {engine} | loss {run.loss.name} | {run.rl.steps} steps | {workdir}"
    )


def generated_tokens_per_s(trajectories) -> dict:
    """``{"throughput/generated_tokens_per_s": x}``: the sampler's generation throughput on a
    step's batch, its action tokens over the generation seconds the rollout attributed to them
    (``timings["generation"]``: the slot engine splits each generate call's wall time over its
    slots by tokens made, lock-step Rollout by token budget; prefill and environment time are not
    in it). Measured on the wall clock (differs run to run); ``{}`` when no time was recorded."""
    secs = sum(float(t.timings.get("generation", 0.0)) for t in trajectories)
    tokens = sum(int(t.num_action_tokens) for t in trajectories)
    return {GENERATED_PER_S: tokens / secs} if secs > 0 and tokens else {}


def eta_s(step: int, start_step: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at this run's pace since it started (or resumed) at ``start_step``; None before
    its first step (no pace yet)."""
    done = step - start_step
    return None if done <= 0 else elapsed_s / done * max(total - step, 0)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    m, sec = divmod(round(seconds), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{sec:02d}s"


def progress_line(rows, scheduler, c, last_eval, start: tuple[int, float], wall0: float) -> str:
    """One line per logged step: step i/N, the last batch's figures, throughput, elapsed and ETA
    (``start``: the step and ``perf_counter`` at which this process's RL loop began; ``wall0``:
    the run's start)."""
    train_rows = [x for x in rows if "loss/total" in x]
    last = train_rows[-1] if train_rows else {}
    ev = f"{last_eval['eval/success']:.3f}" if last_eval else "  -  "
    what = "heldout" if c.parts.suite.eval_set == "held-out" else "eval"  # e.g. training-pair codefix
    recs = scheduler.records
    masked = sum(rec.terminal is not None and rec.terminal.value == "masked" for rec in recs)
    real = c.parts.run.scheduler.clock == "real"  # wall seconds; else virtual seconds
    now, total = time.perf_counter(), c.parts.run.rl.steps
    eta = eta_s(scheduler.steps, start[0], total, now - start[1])
    return (
        f"step {scheduler.steps:4d}/{total} | reward {last.get('batch/reward_mean', 0):.3f} | {what} {ev} | "
        f"gap {last.get('version_gap_mean', 0):.2f} | masked {masked / max(len(recs), 1):.3f} | "
        f"filter {last.get('masked/filter_icepop', last.get('masked/filter_kpop', 0)):.3f} | "
        f"{_dropped(recs)}"
        f"{len(recs) / max(scheduler.ex.now(), 1e-9):.2f} traj/{'s' if real else 'vs'} | "
        f"{_engine_figures(c.worker)}{now - wall0:.0f}s, ETA {_clock(eta)}"
    )


def _dropped(recs) -> str:
    """Dynamic sampling's share of submissions dropped as uniform groups ('' when none)."""
    n = sum(rec.terminal is not None and rec.terminal.value == "filtered" for rec in recs)
    return f"dropped {n / len(recs):.3f} | " if n else ""


def _engine_figures(worker) -> str:
    """The slot engine's throughput, slot occupancy and env-pool utilisation so far ('' without)."""
    if worker.engine is None or not worker.engine_totals:
        return ""
    e = worker.engine_report()
    return (
        f"engine {e['tokens_per_s']:.0f} tok/s occ {e['slot_occupancy']:.2f} "
        f"pool {e['env_pool'].get('utilisation', 0.0):.2f} | "
    )


def summarise_run(c, job, scheduler, runlog, header: dict, last_eval) -> dict:
    """``summary.json``'s body: the schedule's statistics, the cost ledgers (measured and
    virtual), retries, the environment pool, the final parameters' checksum, the weight syncs."""
    from agentjax.diagnostics.evaluate import undefined_metrics  # noqa: PLC0415
    from agentjax.diagnostics.metrics import (  # noqa: PLC0415
        cost_ledger,
        env_pool_report,
        measured_cost_ledger,
        summarise,
    )

    s = summarise(runlog, long_classes=None)  # fast-first bias over minirepo's own classes
    ledger = measured_cost_ledger(runlog.records, scheduler.traj, job.train_wall)
    virtual = cost_ledger(runlog.records, len(runlog.step_end_times), c.parts.run.scheduler.learner_step_time)
    pool = env_pool_report([iv for rec in runlog.records for iv in rec.env_intervals], 0.0, runlog.elapsed)
    return {
        "header": header,
        "final_eval": last_eval,
        # metrics left out of final_eval because they are undefined (never NaN), with the reason
        "undefined_metrics": undefined_metrics(last_eval or {}, "eval/"),
        "scheduler": _jsonable(s),
        "cost_ledger": _jsonable(ledger),
        "cost_ledger_virtual": _jsonable(virtual),
        # infra faults the retry policy sent back (resubmitted or queued to be)
        "retries": len(scheduler.state.retry_of) + len(scheduler.state.retry_queue),
        "env_pool": _jsonable(pool),
        "params_sha256": multihost.checksum(job.state.train.params),
        "process_count": jax.process_count(),
        "weight_sync": dataclasses.asdict(job.sync),
        "placement": placement_record(c.placement, job.sampler_params),
        "wall_seconds": time.perf_counter() - job.wall0,
    }


def placement_record(placement, sampler_params) -> dict:
    """Where the run's arrays are: the learner mesh's devices and the devices this process's
    sampler parameters really live on (ids)."""
    held = {d for x in jax.tree.leaves(sampler_params) for d in x.sharding.device_set}
    return {
        "kind": placement.kind.value,
        "learner_devices": sorted(d.id for d in placement.learner_mesh.devices.flat),
        "sampler_devices": sorted(d.id for d in held),
    }


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if dataclasses.is_dataclass(x):
        return _jsonable(dataclasses.asdict(x))
    return x if isinstance(x, (int, float, str, bool, type(None))) else str(x)
