"""Pod readiness from this host: compile the learner and sampler for a TPU topology and check fit.

    python -m launch.compile_check --config=configs/compile_check.py --topology=v5e:16x16

Compiles the real programs: the learner's ``make_train_step`` (``config.loss``, ``config.optim``,
``train.microbatches`` as gradient accumulation) and the sampler's prefill and decode, per kernel
mode in ``config.modes``. Prints, per placement (colocated, disaggregated) and per step (train,
prefill, decode), the per-chip argument / output / temporary / generated-code bytes, the chip's
HBM and the headroom, the collectives in the compiled program, the weight-sync bytes between
disjoint slices, and a roofline estimate (step time and tokens/s per chip; assumptions in
``agentjax/sharding/roofline.py``).
Modes ``exact_pallas_bf16`` / ``exact_pallas_f32`` (``--config.modes``) compile exact mode's
Pallas kernels (``exact_kernels="pallas"``) with Mosaic: traced with ``interpret=False`` here,
although this host's backend is the CPU.
Prints each attention kernel chosen (``policy/attention.py``: full scores, blockwise or exact
mode's) with its reason. Exits 1 naming the largest buffers when something does not fit, 2 when
no TPU compiler is available (libtpu missing: ``pip install 'agentjax[tpu]'``) or the config is invalid.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host runs nothing; libtpu only compiles

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentjax.learner.objective import LossConfig  # noqa: E402
from agentjax.learner.step import OptimConfig, make_optimizer  # noqa: E402
from agentjax.podcheck import aot, programs  # noqa: E402
from agentjax.policy import pallas_kernels  # noqa: E402
from agentjax.policy.attention import recorded_plans  # noqa: E402
from agentjax.policy.presets import n_params, preset  # noqa: E402
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
            raise ValueError(
                f"activation_rows={cfg.activation_rows!r}: unknown mesh axes "
                f"{sorted(set(rows) - set(MESH_AXES))}; allowed: {list(MESH_AXES)}"
            )
        model = aot.with_remat(preset(cfg.preset), cfg.remat).replace(
            activation_rows=rows,
            score_chunk=cfg.score_chunk,
            attention_kernel=cfg.attention.kernel,
            attention_block=cfg.attention.block,
            attention_blockwise_from=cfg.attention.blockwise_from,
        )
        modes = [m.strip() for m in cfg.modes.split(",") if m.strip()]
        models = {m: programs.mode_config(model, m) for m in modes}
        loss = LossConfig(**dict(cfg.loss))
        optimizer = make_optimizer(OptimConfig(**dict(cfg.optim)))
    except (KeyError, TypeError, ValueError) as e:
        print(f"compile_check: {e}", file=sys.stderr)
        return 2
    work = aot.Workload(
        train_batch=cfg.train.batch,
        train_seq=cfg.train.seq_len,
        microbatches=cfg.train.microbatches,
        sample_batch=cfg.sample.batch,
        prompt_len=cfg.sample.prompt_len,
        cache_len=cfg.sample.cache_len,
    )
    print(
        f"{cfg.preset}: {n_params(model) / 1e9:.2f}B parameters; {topology}: {len(devices)} "
        f"chips of {devices[0].device_kind} ({aot.chip_hbm_bytes(devices[0]) / aot.GiB:.0f} GiB)"
    )
    print(
        f"train {work.train_batch} x {work.train_seq} tokens ({work.microbatches} microbatches); "
        f"sample {work.sample_batch} x prompt {work.prompt_len}, cache {work.cache_len}"
    )
    print(
        f"model: remat={model.remat!r}, activation rows over mesh axes "
        f"{model.activation_rows or 'none (unconstrained)'}; learner log-probs "
        + (f"{model.score_chunk} tokens at a time" if model.score_chunk else "over whole rows")
    )
    print(
        f"learner: make_train_step, loss {loss.name} / filter {loss.filter} / kl_coef "
        f"{loss.kl_coef}; sampler: extend (prefill) and generate (decode)"
    )
    failed, shown = [], 0
    for mode, cfg_m in models.items():
        for placement in [p.strip() for p in cfg.placements.split(",") if p.strip()]:
            l_dev, s_dev = devices, None
            print(f"-- mode {mode}, {placement}")
            if placement == "disaggregated":
                l_dev, s_dev, where = aot.disaggregated_devices(topology)
                print(f"disaggregated: learner and sampler on {where}")
            with pallas_kernels.interpret_mode(False):  # Mosaic, not the host's interpreter
                report = aot.check_placement(
                    cfg_m,
                    l_dev,
                    placement,
                    work,
                    learner_mesh=dict(cfg.mesh),
                    sampler_devices=s_dev,
                    sampler_mesh=dict(cfg.sampler_mesh),
                    rules=rules_from(cfg.rules),
                    sampler_rules=rules_from(cfg.sampler_rules),
                    optimizer=optimizer,
                    loss=loss,
                )
            print(aot.format_report(report))
            plans = recorded_plans()
            for p in plans[shown:]:  # each distinct attention choice traced so far, once
                print(
                    f"attention ({p['where']}, {p['queries']} x {p['keys']}): {p['kernel']} - {p['reason']}"
                )
            shown = len(plans)
            print(tokens_per_second(report, work), flush=True)
            failed += [f"{mode}/{placement}/{s.name}" for s in report.steps if not s.fits]
    if failed:
        print(
            f"compile_check: DOES NOT FIT on {topology}: {', '.join(failed)} (see the largest "
            "buffers above; try a larger fsdp/tensor degree, microbatches, remat or shorter "
            "sequences)",
            file=sys.stderr,
        )
        return 1
    print(f"compile_check: everything fits on {topology}")
    return 0


def tokens_per_second(report, work: aot.Workload) -> str:
    """Roofline tokens/s per chip of each step (train and prefill: tokens in the batch; decode:
    one token per row per step)."""
    tokens = {
        "train": work.train_batch * work.train_seq,
        "prefill": work.sample_batch * work.prompt_len,
        "decode": work.sample_batch,
    }
    out = []
    for s in report.steps:
        if s.error is None and s.device_kind and s.roofline_seconds > 0:
            rate = tokens[s.name] / s.roofline_seconds / s.n_chips
            out.append(f"{s.name} {rate:,.0f}")
    return "roofline tokens/s per chip: " + (", ".join(out) or "-")


def main(argv):
    del argv
    aot.offline_compile_setup()  # process state: only an entry point changes it
    sys.exit(run(_CONFIG.value, _TOPOLOGY.value))


if __name__ == "__main__":
    app.run(main)
