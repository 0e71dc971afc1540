"""Pod readiness from this host: compile the learner and sampler for a TPU topology and check fit.

    python -m launch.compile_check --config=configs/compile_check.py --topology=v5e:16x16

Prints, per placement (colocated, disaggregated) and per step (train, prefill, decode), the
per-chip argument / output / temporary / generated-code bytes, the chip's HBM and the headroom,
the collectives in the compiled program, and the weight-sync bytes between disjoint slices.
Exits 1 naming the largest buffers when something does not fit, 2 when no TPU compiler is
available (libtpu missing: ``pip install 'agentjax[tpu]'``) or the config is invalid.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host runs nothing; libtpu only compiles

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentjax.policy.presets import n_params, preset  # noqa: E402
from agentjax.sharding import aot  # noqa: E402
from agentjax.sharding.mesh import MESH_AXES  # noqa: E402
from agentjax.sharding.rules import ShardingRules  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", "configs/compile_check.py")
_TOPOLOGY = flags.DEFINE_string("topology", None, "TPU topology, e.g. v5e:16x16 (else config's)")


def rules_from(d) -> ShardingRules:
    """ShardingRules from a ``{logical: "axis" | "a,b" | ""}`` dict."""
    parse = lambda v: None if not v else v if "," not in v else tuple(v.split(","))
    return ShardingRules({k: parse(v) for k, v in dict(d).items()})


def run(cfg, topology: str | None = None) -> int:
    """Compiles every placement in ``cfg``; prints the tables; returns the exit status."""
    topology = topology or cfg.topology
    try:
        devices = aot.topology_devices(topology)
    except aot.TopologyUnavailable as e:
        print(f"compile_check: {e}", file=sys.stderr)
        return 2
    try:
        rows = tuple(a.strip() for a in cfg.activation_rows.split(",") if a.strip())
        if set(rows) - set(MESH_AXES):
            raise ValueError(f"activation_rows={cfg.activation_rows!r}: unknown mesh axes "
                             f"{sorted(set(rows) - set(MESH_AXES))}; allowed: {list(MESH_AXES)}")
        model = aot.with_remat(preset(cfg.preset), cfg.remat).replace(activation_rows=rows)
    except (KeyError, ValueError) as e:
        print(f"compile_check: {e}", file=sys.stderr)
        return 2
    work = aot.Workload(
        train_batch=cfg.train.batch, train_seq=cfg.train.seq_len,
        microbatches=cfg.train.microbatches, sample_batch=cfg.sample.batch,
        prompt_len=cfg.sample.prompt_len, cache_len=cfg.sample.cache_len,
    )
    optimizer = optax.adamw(cfg.optimizer.learning_rate,
                            mu_dtype=getattr(jnp, cfg.optimizer.mu_dtype))
    print(f"{cfg.preset}: {n_params(model) / 1e9:.2f}B parameters; {topology}: {len(devices)} "
          f"chips of {devices[0].device_kind} ({aot.chip_hbm_bytes(devices[0]) / aot.GiB:.0f} GiB)")
    print(f"train {work.train_batch} x {work.train_seq} tokens ({work.microbatches} microbatches); "
          f"sample {work.sample_batch} x prompt {work.prompt_len}, cache {work.cache_len}")
    print(f"model: remat={model.remat!r}, activation rows over mesh axes "
          f"{model.activation_rows or 'none (unconstrained)'}")
    failed = []
    for placement in [p.strip() for p in cfg.placements.split(",") if p.strip()]:
        l_dev, s_dev = devices, None
        if placement == "disaggregated":
            l_dev, s_dev, where = aot.disaggregated_devices(topology)
            print(f"disaggregated: learner and sampler on {where}")
        report = aot.check_placement(
            model, l_dev, placement, work, learner_mesh=dict(cfg.mesh), sampler_devices=s_dev,
            sampler_mesh=dict(cfg.sampler_mesh), rules=rules_from(cfg.rules),
            sampler_rules=rules_from(cfg.sampler_rules), optimizer=optimizer,
        )
        print(aot.format_report(report), flush=True)
        failed += [f"{placement}/{s.name}" for s in report.steps if not s.fits]
    if failed:
        print(f"compile_check: DOES NOT FIT on {topology}: {', '.join(failed)} (see the largest "
              "buffers above; try a larger fsdp/tensor degree, microbatches, remat or shorter "
              "sequences)", file=sys.stderr)
        return 1
    print(f"compile_check: everything fits on {topology}")
    return 0


def main(argv):
    del argv
    sys.exit(run(_CONFIG.value, _TOPOLOGY.value))


if __name__ == "__main__":
    app.run(main)
