"""The main job: warm start + RL on the built-in default (or any config), with a report.

    python -m launch.train                                        # configs/default.py
    python -m launch.train --config=configs/sync_exact.py --workdir=/tmp/run
    python -m launch.train --config.rl.steps=200 --resume         # continue the last checkpoint

Multi-host (TPU pods, GPU clusters): pass --coordinator_address/--num_processes/--process_id, or
nothing where JAX can detect them (e.g. Cloud TPU); each process runs this same command.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app, flags


def _cpu_only_host() -> None:
    """A host with no TPU, GPU or ROCm device files can only run on the CPU; without this, JAX's
    backend probe prints libtpu's failed initialisation on every run (the tpu extra is installed).
    An explicit ``JAX_PLATFORMS`` wins. Runs before anything imports jax."""
    import glob  # noqa: PLC0415

    devices = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/kfd")
    if "JAX_PLATFORMS" not in os.environ and not any(glob.glob(d) for d in devices):
        os.environ["JAX_PLATFORMS"] = "cpu"


_cpu_only_host()

from launch import configflag  # noqa: E402

_DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")


_CONFIG = configflag.define(_DEFAULT)  # a config that cannot be loaded: one line, exit 2
_WORKDIR = flags.DEFINE_string("workdir", "workdir/default", "Where metrics, checkpoints and the report go.")
_RESUME = flags.DEFINE_bool("resume", False, "Continue exactly from the latest checkpoint in --workdir.")
_REPLAY = flags.DEFINE_string(
    "replay", None, "Workdir of a finished scheduler.clock=real run (same flags): re-execute its schedule."
)
_COORD = flags.DEFINE_string("coordinator_address", None, "jax.distributed coordinator host:port.")
_NPROC = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-host).")
_PID = flags.DEFINE_integer("process_id", None, "This process's index (multi-host).")


def _host_devices(n: int) -> None:
    """Asks XLA for ``n`` host-platform devices (CPU-only hosts); must run before JAX starts."""
    flag = "--xla_force_host_platform_device_count"
    if n and flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}={int(n)}".strip()


def main(argv):
    del argv
    cfg = configflag.value(_CONFIG)
    _host_devices(cfg.get("placement", {}).get("host_devices", 0))
    import jax

    if _COORD.value or _NPROC.value:
        if os.environ.get("JAX_PLATFORMS", "") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives
        peer_timeout = cfg.get("placement", {}).get("peer_timeout_s", 300.0)
        # A dead process: the others stop with PeerError after peer_timeout_s where they wait for
        # its trajectories, and the coordination service aborts them after twice that where they
        # wait in a collective (its heartbeat stopped).
        jax.distributed.initialize(
            coordinator_address=_COORD.value,
            num_processes=_NPROC.value,
            process_id=_PID.value,
            heartbeat_timeout_seconds=max(int(2 * peer_timeout), 1),
        )
        from launch.compile_cache import cache_process_local_programs  # noqa: PLC0415

        if not cache_process_local_programs() and jax.process_index() != 0:
            print("compilation cache: this JAX caches process 0's programs only", flush=True)
    from agentjax.learner.checkpoint import CheckpointError
    from agentjax.learner.journal import JournalError
    from agentjax.policy.config import ConfigError
    from agentjax.run import loop
    from agentjax.run.files import WorkdirError
    from agentjax.sampling.replay import ScheduleError
    from agentjax.sharding.exchange import PeerError

    logging.getLogger("absl").setLevel(logging.WARNING)
    if jax.process_index() == 0:  # the run header (system.train) follows: model, devices, schedule
        print(f"config: {flags.FLAGS['config'].config_filename}", flush=True)
    try:
        summary = loop.train(
            cfg,
            _WORKDIR.value,
            resume=_RESUME.value,
            replay=_REPLAY.value,
            log=lambda s: print(s, flush=True),
        )
    except ConfigError as e:
        print(f"invalid config: {e}", file=sys.stderr)
        return 2
    except WorkdirError as e:  # not writable, too little space, or another live run holds it
        print(f"workdir error: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        return 3
    except JournalError as e:  # a full disk while journaling: nothing committed was lost
        print(f"journal error: {e}", file=sys.stderr)
        return 3
    except ScheduleError as e:
        print(f"replay error: {e}", file=sys.stderr)
        return 2
    except PeerError as e:  # another process of a multi-process run died or hangs
        print(f"peer error: {e}", file=sys.stderr)
        return 4
    if cfg.get("report", True) and jax.process_index() == 0:
        from agentjax import report  # matplotlib: only where a report is written

        declared = (cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)).get("targets", {})
        path = report.write_report(_WORKDIR.value, targets=declared)  # this config's (--resume too)
        print(f"report: {path}")
    from agentjax.report.common import eval_set  # noqa: PLC0415

    final = summary.get("final_eval") or {}
    print(
        f"{eval_set(summary['header'])} success "
        f"{final.get('eval/success', float('nan')):.3f} "
        f"(warm start {summary['header'].get('rl_start_success', float('nan')):.3f}, "
        f"demonstrator {summary['header'].get('demonstrator_success', float('nan')):.3f})"
    )
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=configflag.parse_flags)
