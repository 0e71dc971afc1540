"""The training system: warm start, then RL through the scheduler, with evaluation and checkpoints.

The one place that knows every component (``launch/train.py`` calls :func:`train`):

    tasks (GRPO groups) -> Scheduler (sync | async | windowed FIFO, staleness manager)
      -> BatchingExecutor -> SamplerWorker (batched multi-turn Rollout over host envs)
      -> completed trajectories (journaled) -> learner batch -> jitted train step -> params v+1
      -> weight sync to the sampler (placement) -> ... ; held-out greedy evaluation every k steps.

Everything runs on a virtual clock (simulated tool latency and generation cost), so a run is a
pure function of its config and seed; it checkpoints (orbax train state + scheduler snapshot) and
``resume=True`` continues exactly where the last checkpoint left off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import grain
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from agentjax import loopparts, runconfig, tasks
from agentjax.diagnostics import tbevents
from agentjax.diagnostics.evaluate import evaluate
from agentjax.learner import checkpoint as ckpt
from agentjax.learner import resume as durable
from agentjax.learner import versions as pv
from agentjax.learner.batching import make_batch
from agentjax.learner.journal import Journal
from agentjax.learner.sft import demo_rows, sft_train
from agentjax.learner.step import init_train_state, make_optimizer, make_train_step
from agentjax.policy.config import ModelConfig
from agentjax.policy.model import abstract_params, init_params
from agentjax.sampling import snapshot
from agentjax.sampling.context import make_context_policy
from agentjax.sampling.engine import Engine
from agentjax.sampling.envpool import EnvPool
from agentjax.sampling.precision import sampler_model, to_sampler
from agentjax.sampling.runlog import SchedulerConfig
from agentjax.sampling.sampler import Sampler
from agentjax.sampling.scheduler import Scheduler
from agentjax.sampling.transforms import Greedy, Temperature
from agentjax.sampling.worker import BatchingExecutor, SamplerWorker
from agentjax.sharding import multihost, param_shardings, shard_params
from agentjax.sharding.placement import SyncStats, make_placement, sync_weights
from agentjax.tasks import model as task_model
from agentjax.trajectory import Trajectory


@dataclasses.dataclass
class Parts:
    """What one run is built from (pure functions of the config): the task suite and the policy."""

    run: runconfig.RunConfig
    suite: tasks.TaskSuite
    policy: task_model.Policy
    fault_rates: dict = dataclasses.field(default_factory=dict)  # the rates new episodes get now

    @property
    def model(self) -> ModelConfig:
        return self.policy.config

    @property
    def tokenizer(self):
        return self.policy.tokenizer

    @property
    def codec(self):
        return self.policy.codec

    @property
    def heldout(self) -> list:
        return self.suite.heldout

    @property
    def make_env(self) -> Callable[[], Any]:
        """Training episodes' environment: with injected faults when the config asks for them
        (``fault_rates`` is read at each episode's start, so the noise curriculum moves it)."""
        return loopparts.noisy(self.suite.make_env, self.fault_rates) if self.fault_rates \
            else self.suite.make_env

    @property
    def make_eval_env(self) -> Callable[[], Any]:
        return self.suite.make_env  # held-out evaluation: never injected faults


def build(run: runconfig.RunConfig) -> Parts:
    """The task suite and the policy; a HF directory's files are all checked here (before training)."""
    suite = tasks.make(run)
    parts = Parts(run, suite, task_model.build(run.model, suite))
    env = suite.make_env()
    shortest = min(len(parts.codec.prompt(env.reset(t, 0))) for t in suite.heldout)
    if hasattr(env, "close"):
        env.close()
    if parts.model.max_seq_len < shortest + run.caps.max_action_tokens:  # no room for one whole action
        raise runconfig.ConfigError(
            f"model.max_seq_len={parts.model.max_seq_len} is too small for any episode: the shortest task "
            f"prompt is {shortest} tokens and one action up to caps.max_action_tokens="
            f"{run.caps.max_action_tokens}; must be >= {shortest + run.caps.max_action_tokens}")
    parts.fault_rates.update(loopparts.initial_rates(run))  # moved in place by the curriculum
    return parts


def task_dataset(parts: Parts) -> grain.MapDataset:
    """GRPO groups as a grain dataset (:meth:`TaskSuite.train_item`). Its iterator state
    checkpoints with the run (exact resume)."""
    return grain.MapDataset.range(1 << 40).map(parts.suite.train_item)


class _Run:
    """Mutable run state held by the learner closure (the scheduler only sees version numbers)."""

    def __init__(self, parts: Parts, workdir: str, log: Callable[[str], None]):
        self.parts, self.workdir, self.log = parts, workdir, log
        run = parts.run
        self.placement = make_placement(
            run.placement.kind, {k: v for k, v in run.placement.learner_mesh.items() if v},
            {k: v for k, v in run.placement.sampler_mesh.items() if v}, sync_every=run.placement.sync_every,
            devices=jax.devices(),
        )
        self.sync = SyncStats()
        self.tx = make_optimizer(run.optim)
        transform = None if run.rl.temperature == 1.0 else Temperature(run.rl.temperature)
        self.sampler = Sampler(sampler_model(parts.model, run.sampler), transform=transform,
                               stop_tokens=(parts.codec.stop,))
        self.greedy = Sampler(parts.model, transform=Greedy(), stop_tokens=(parts.codec.stop,))
        self.train_step = make_train_step(parts.model, run.loss, self.tx, transform=transform,
                                          grad_accum=run.optim.grad_accum, minibatches=run.optim.minibatches)
        # learner parameters of recent versions, for log-probs at each token's behaviour version
        self.slots = pv.slot_count(run.scheduler.max_version_gap, run.placement.sync_every) \
            if "train_v" in run.loss.needs else 0
        self.kept: dict = {}
        self.train_wall = 0.0  # measured learner step seconds (cost ledger)
        self.journal = Journal(os.path.join(workdir, "journal.bin"))
        self.metrics_path = os.path.join(workdir, "metrics.jsonl")
        self.state = None
        self.ref_params = None  # the frozen reference policy (the warm start) when loss.kl_coef > 0
        self.sampler_params = None
        self.rows: list[dict] = []
        self.wall0 = time.perf_counter()
        self._journaled: set[int] = set()
        self.curriculum, self.curriculum_state = loopparts.make_curriculum(run.curriculum), None
        self.journal_count = 0  # records in the journal (the checkpoint's "journaled")

    # -- learner, called by the scheduler ----------------------------------------------------
    def learner(self, version: int, batch) -> int:
        run = self.parts.run
        trajs: list[Trajectory] = [c.trajectory for c in batch]
        weights, fm = loopparts.fingerprint_weights(run, trajs, [c.weight for c in batch])
        arrays, bm = make_batch(trajs, weights, rows=learner_rows(run), length=self.parts.model.max_seq_len,
                                advantage=run.loss.advantage, rewards=loopparts.batch_rewards(run, trajs))
        bm = {**bm, **fm, **self.curriculum_step(trajs)}
        if not run.sampler.replay_routes and "routes" in arrays:  # R3 off: measured, not replayed
            arrays["sampler_routes"] = arrays.pop("routes")
        if multihost.is_multiprocess():  # data parallel over every process's devices
            arrays = multihost.shard_batch(arrays, self.placement.learner_mesh)
        behaviour = None
        if self.slots:
            pv.check_covered(self.kept, arrays["behaviour_version"], arrays["loss_mask"])
            behaviour = pv.slots(self.kept, self.slots, fallback=self.state.params)
        t0 = time.perf_counter()
        self.state, m = self.train_step(self.state, arrays, self.ref_params, behaviour)
        jax.block_until_ready(self.state.step)  # measured: the ledger's training cost
        self.train_wall += time.perf_counter() - t0
        new = version + 1
        if self.slots:
            self.kept = pv.keep(self.kept, new, self.state.params, oldest=new - self.slots + 1)
        synced = self.sync.syncs
        self.sampler_params = multihost.local_view(sync_weights(
            self.placement, to_sampler(self.state.params, run.sampler), self.sampler_params, new, self.sync))
        if self.placement.colocated or self.sync.syncs > synced:
            self.sampler_version = new  # else the sampler keeps older weights (sync_every > 1)
        self.worker.publish(new, self.sampler_params, keep_from=new - run.scheduler.max_version_gap - 1,
                            behaviour_version=self.sampler_version)
        gaps = [int(version - t.versions.min()) for t in trajs if t.num_action_tokens]
        row = {"step": new, **{k: float(v) for k, v in m.items()}, **bm,
               "labels": dict(_count(t.label for t in trajs)),
               "classes": dict(_count(t.task_class for t in trajs)),
               "version_gap_mean": float(np.mean(gaps)) if gaps else 0.0,
               "version_gap_max": int(max(gaps)) if gaps else 0,
               "weights_mean": float(np.mean([c.weight for c in batch])),
               "virtual_time": float(self.scheduler.ex.now()),
               "wall": time.perf_counter() - self.wall0}
        self.rows.append(row)
        return new

    def curriculum_step(self, trajs) -> dict:
        """Moves the noise curriculum once per step; new episodes get the new rates."""
        if self.curriculum is None:
            return {}
        if self.curriculum_state is None:
            self.curriculum_state = self.curriculum.init()
        self.curriculum_state = self.curriculum.update(self.curriculum_state, loopparts.success(trajs))
        self.parts.fault_rates.clear()
        self.parts.fault_rates.update(self.curriculum_state.rates)
        return {"curriculum/level": float(self.curriculum_state.level),
                **{f"curriculum/rate/{k}": float(v) for k, v in self.curriculum_state.rates.items()}}

    def journal_rounds(self):
        """Appends every newly completed trajectory to the crash-safe journal."""
        sch = self.scheduler
        done = [t for i, t in sorted(sch.traj.items()) if i not in self._journaled and i not in sch.paused]
        self._journaled.update(t.submit_index for t in done)
        self.journal.append(done)
        self.journal_count += len(done)


def learner_rows(run: runconfig.RunConfig) -> int:
    """Rows of the learner batch (one compiled shape): under ``keep_all`` an episode is one row;
    a context policy that rewrites the context makes each turn its own row (``to_rows``), and an
    episode has at most ``caps.max_tool_calls`` turns."""
    per_episode = 1 if run.context.policy == "keep_all" else run.caps.max_tool_calls
    return run.rl.batch_size * per_episode


def _count(xs):
    out: dict = {}
    for x in xs:
        out[str(x)] = out.get(str(x), 0) + 1
    return out


def _write_rows(path: str, rows: list[dict]) -> None:
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())
    tbevents.write_rows(os.path.join(os.path.dirname(path), "tb"), rows)  # TensorBoard scalars


def _eval(r: _Run, params, version: int) -> dict:
    p = r.parts
    return evaluate(r.greedy, p.codec, p.run.caps, params, version, p.heldout, p.make_eval_env,
                    audit_fn=p.suite.audit_fn, planted=p.suite.planted, seed=10_000)


def warm_start(parts: Parts, params, log) -> tuple[Any, dict]:
    ws = parts.run.warm_start
    if ws.steps == 0:
        return params, {}
    eps = parts.suite.demonstrations(ws.episodes, seed=parts.run.seed * 7919)
    rows = demo_rows([e.pairs for e in eps], parts.codec, parts.model.max_seq_len)
    demo_success = float(np.mean([e.success for e in eps]))
    params, losses = sft_train(params, parts.model, rows, steps=ws.steps, batch_size=ws.batch_size,
                               learning_rate=ws.learning_rate, seed=parts.run.seed,
                               log_every=max(ws.steps // 5, 1), log=log)
    return params, {"warm_start/nll_first": losses[0], "warm_start/nll_last": losses[-1],
                    "warm_start/demo_train_success": demo_success}


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _scheduler(parts: Parts, worker: SamplerWorker, r: _Run, tasks) -> Scheduler:
    run = parts.run
    s = run.scheduler
    return Scheduler(
        tasks, worker, r.learner, 0,
        config=SchedulerConfig(mode=s.mode, batch_size=run.rl.batch_size, num_slots=s.num_slots,
                               window=s.window if s.mode == "windowed_fifo" else None,
                               learner_step_time=s.learner_step_time),
        staleness_config=loopparts.staleness_config(run),
        executor=BatchingExecutor(), retry=loopparts.retry_policy(run),
    )


def config_record(run: runconfig.RunConfig) -> dict:
    """The parsed run config as JSON (stored with every checkpoint; --resume compares it)."""
    return json.loads(json.dumps(dataclasses.asdict(run), default=str))


def _snapshot_intact(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            snapshot.loads(f.read(), source=path)
        return True
    except (OSError, snapshot.SnapshotError):
        return False


def _resume(r: _Run, params0, ckdir: str):
    """Restores the newest checkpoint after checking that everything agrees (see
    :mod:`agentjax.learner.resume`); only then cuts the metrics and journal back to it."""
    run, log = r.parts.run, r.log
    steps = ckpt.all_steps(ckdir)
    if not steps:
        raise ckpt.CheckpointError(f"--resume: no checkpoint under {ckdir}")
    step = steps[-1]
    restored = ckpt.restore_checkpoint(ckdir, init_train_state(params0, r.tx, run.seed), step=step)
    meta = restored.metadata
    durable.check_config(meta.get("config"), config_record(run), f"checkpoint step {step} ({ckdir})")
    path = durable.snapshot_path(ckdir, step)
    tasks = iter(task_dataset(r.parts))
    tasks.set_state(meta["data_iterator"])
    try:
        with open(path, "rb") as f:
            blob = f.read()
        scheduler = Scheduler.restore(blob, tasks, r.worker, r.learner, skip_drawn=False,
                                      executor=BatchingExecutor(), source=path,
                                      retry=loopparts.retry_policy(run))
    except (OSError, snapshot.SnapshotError) as e:
        hint = durable.previous_step_hint(ckdir, step, steps, _snapshot_intact)
        raise ckpt.CheckpointError(f"cannot resume from step {step}: {e}. {hint}") from None
    text, torn = durable.metrics_lines(r.metrics_path, step)
    scan = r.journal.scan()
    if len(scan.records) < meta["journaled"]:
        raise ckpt.CheckpointError(
            f"cannot resume from step {step}: {r.journal.path} holds {len(scan.records)} intact "
            f"records but the checkpoint journaled {meta['journaled']}: committed trajectories "
            "were lost; start a new --workdir")
    # Everything agrees: cut what was written after the checkpoint (and any torn tail).
    with open(r.metrics_path) as f:
        if f.read() != text:
            _atomic_write(r.metrics_path, text.encode())
    if torn:
        log(f"repaired {r.metrics_path}: dropped a torn last line")
    if scan.torn:
        log(f"repaired {r.journal.path}: dropped a torn tail at byte {scan.valid_bytes}")
    r.journal.truncate(meta["journaled"])
    r.journal_count = meta["journaled"]
    r.state = restored.state
    evals = [json.loads(ln) for ln in text.splitlines()]
    evals = [x for x in evals if "eval/success" in x and x["step"] > 0]
    log(f"resumed from step {step} ({ckdir})")
    return meta["header"], scheduler, tasks, (evals[-1] if evals else None)


def train(cfg, workdir: str, *, resume: bool = False, log: Callable[[str], None] = print) -> dict:
    """Runs (or resumes) the configured training; returns the summary (also in summary.json)."""
    run = runconfig.parse(cfg)  # fails before any work on an invalid config
    parts = build(run)  # ... and so does a model too small for the task
    os.makedirs(workdir, exist_ok=True)
    r = _Run(parts, workdir, log)
    ckdir = os.path.join(workdir, "checkpoints")
    refdir = os.path.join(workdir, "reference")
    params0 = _initial_params(parts, r.placement)
    worker = SamplerWorker(r.sampler, parts.codec, run.caps, parts.make_env,
                           rng=jax.random.key(run.seed + 1),
                           gen_seconds_per_token=run.scheduler.gen_seconds_per_token,
                           context=make_context_policy(run.context.policy, run.context.arg))
    if run.scheduler.engine_slots:  # the slot engine; same trajectories as Rollout in exact mode
        worker.engine = Engine(r.sampler, run.scheduler.engine_slots, run.scheduler.engine_chunk)
        worker.pool = EnvPool(run.scheduler.env_workers, run.scheduler.env_pool)
    r.worker = worker
    last_eval = None
    if resume:
        header, scheduler, tasks, last_eval = _resume(r, params0, ckdir)
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
        for stale in (r.metrics_path, r.journal.path):
            if os.path.exists(stale):
                os.remove(stale)
        if os.path.isdir(refdir):  # a reference left by a run that never reached a checkpoint
            shutil.rmtree(refdir)
        if parts.policy.hf_path:  # what launch.export needs besides the weights
            task_model.save_source(parts.policy, os.path.join(workdir, task_model.SOURCE_DIR))
        demo = parts.suite.baseline()
        log(f"demonstrator held-out success {demo:.3f} (scripted, {len(parts.heldout)} tasks)")
        params, ws = warm_start(parts, params0, log)
        e0 = _eval(r, multihost.local_view(params), 0)
        log(f"warm start held-out success {e0['eval/success']:.3f}")
        header = {"demonstrator_success": demo, **ws, "rl_start_success": e0["eval/success"],
                  "versions": resolved_versions()}
        _write_rows(r.metrics_path, [{"step": 0, "header": header, **e0}])
        r.state = init_train_state(params, r.tx, run.seed)
        if multihost.is_multiprocess():
            r.state = multihost.replicate(r.state, r.placement.learner_mesh)
        if run.loss.kl_coef:  # KL to the RL phase's starting policy, saved for --resume
            r.ref_params = r.state.params
            ckpt.save_checkpoint(refdir, 0, r.ref_params)
        tasks = iter(task_dataset(parts))
        scheduler = _scheduler(parts, worker, r, tasks)
    r.scheduler = scheduler
    version = scheduler.version
    r.sampler_params = multihost.local_view(
        sync_weights(r.placement, to_sampler(r.state.params, run.sampler), None, version, r.sync))
    if r.slots:
        r.kept = pv.keep({}, version, r.state.params, oldest=version)
    r.sampler_version = version
    worker.publish(version, r.sampler_params)
    r._journaled = set(scheduler.traj)
    while scheduler.steps < run.rl.steps:
        nxt = min((scheduler.steps // run.log_every + 1) * run.log_every, run.rl.steps)
        before = scheduler.steps
        scheduler.run(nxt)
        r.journal_rounds()
        if scheduler.steps == before:
            log("task source exhausted")
            break
        rows, r.rows = r.rows, []
        step = scheduler.steps
        if step % run.rl.eval_every == 0 or step == run.rl.steps:
            last_eval = _eval(r, multihost.local_view(r.state.params), step)
            rows.append({"step": step, **last_eval})
        _write_rows(r.metrics_path, rows)
        log(_progress(rows, scheduler, r, last_eval))
        if run.checkpoint_every and (step % run.checkpoint_every == 0 or step == run.rl.steps):
            os.makedirs(ckdir, exist_ok=True)
            _atomic_write(durable.snapshot_path(ckdir, step), scheduler.snapshot())
            ckpt.save_checkpoint(ckdir, step, r.state, keep=2,
                                 metadata={"header": header, "journaled": r.journal_count,
                                           "data_iterator": tasks.get_state(),
                                           "config": config_record(run)})
            durable.prune_snapshots(ckdir, ckpt.all_steps(ckdir))  # with their checkpoints
    runlog = scheduler.finish()
    summary = summarise_run(r, runlog, header, last_eval)
    if worker.pool is not None:  # the slot engine's environment pool, measured on real events
        summary["engine"] = worker.engine_report()
        worker.pool.close()
    _atomic_write(os.path.join(workdir, "summary.json"), json.dumps(summary, indent=1).encode())
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
    mesh = placement.learner_mesh
    if parts.policy.hf_path:
        if multihost.is_multiprocess():
            rep = NamedSharding(mesh, PartitionSpec())
            shardings = jax.tree.map(lambda _: rep, abstract_params(parts.model))
        else:
            shardings = param_shardings(abstract_params(parts.model), mesh, placement.rules)
        return task_model.load_params(parts.policy, shardings)
    params0 = init_params(parts.model, jax.random.key(parts.run.seed))
    if multihost.is_multiprocess():
        return multihost.replicate(params0, mesh)
    return shard_params(params0, mesh, placement.rules)


def _progress(rows, scheduler, r: _Run, last_eval) -> str:
    train_rows = [x for x in rows if "loss/total" in x]
    last = train_rows[-1] if train_rows else {}
    ev = f"{last_eval['eval/success']:.3f}" if last_eval else "  -  "
    recs = scheduler.records
    masked = sum(rec.terminal is not None and rec.terminal.value == "masked" for rec in recs)
    return (f"step {scheduler.steps:4d} | reward {last.get('batch/reward_mean', 0):.3f} | heldout {ev} | "
            f"gap {last.get('version_gap_mean', 0):.2f} | masked {masked / max(len(recs), 1):.3f} | "
            f"filter {last.get('masked/filter_icepop', last.get('masked/filter_kpop', 0)):.3f} | "
            f"{len(recs) / max(scheduler.ex.now(), 1e-9):.2f} traj/vs | "
            f"{time.perf_counter() - r.wall0:.0f}s")


def summarise_run(r: _Run, runlog, header: dict, last_eval) -> dict:
    from agentjax.diagnostics.metrics import (  # noqa: PLC0415
        cost_ledger,
        env_pool_report,
        measured_cost_ledger,
        summarise,
    )

    s = summarise(runlog, long_classes=None)  # fast-first bias over minirepo's own classes
    ledger = measured_cost_ledger(runlog.records, r.scheduler.traj, r.train_wall)
    virtual = cost_ledger(runlog.records, len(runlog.step_end_times), r.parts.run.scheduler.learner_step_time)
    pool = env_pool_report([iv for rec in runlog.records for iv in rec.env_intervals], 0.0,
                           runlog.elapsed)
    return {"header": header, "final_eval": last_eval, "scheduler": _jsonable(s),
            "cost_ledger": _jsonable(ledger), "cost_ledger_virtual": _jsonable(virtual),
            # infra faults the retry policy sent back (resubmitted or queued to be)
            "retries": sum(len(getattr(r.scheduler, k, ())) for k in ("retry_of", "retry_queue")),
            "env_pool": _jsonable(pool),
            "params_sha256": multihost.checksum(r.state.params), "process_count": jax.process_count(),
            "weight_sync": dataclasses.asdict(r.sync), "wall_seconds": time.perf_counter() - r.wall0}


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
