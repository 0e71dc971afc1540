"""Ahead-of-time compilation for a TPU topology (v5e:2x2) with the real TPU compiler (libtpu).

Needs libtpu (``pip install -e '.[tpu]'``). Where it cannot load, every test here FAILS with the
reason; nothing is skipped. Not collected by a plain ``pytest``: tests/sharding/test_aot.py runs
this file in its own process, so libtpu never loads in the suite's process (once loaded, a later
CPU compile there aborted the whole run, jax 0.10.2). Run it alone with
``python -m pytest tests/sharding/tpu_aot_cases.py``.
"""

import jax
import jax.numpy as jnp
import pytest

from agentjax.podcheck import aot
from agentjax.sharding.rules import ShardingRules
from agentjax.testing.models import tiny_dense, tiny_moe
from configs.compile_check import get_config
from launch import compile_check

TOPOLOGY = "v5e:2x2"
WORK = aot.Workload(train_batch=8, train_seq=32, sample_batch=8, prompt_len=16, cache_len=32)
# tiny_dense: 20640 float32 parameters (see test_aot_accounting). On fsdp=2 x tensor=2 every
# matrix is split 4 ways and the 160 norm scales are whole: 5280 floats = 21120 bytes per chip.
TINY_PER_CHIP = 21120


@pytest.fixture(scope="module", autouse=True)
def offline_compile():
    """As the entry points do at start (aot.offline_compile_setup)."""
    import os

    from jax.experimental.compilation_cache import compilation_cache

    env = os.environ.get("ALLOW_MULTIPLE_LIBTPU_LOAD")
    aot.offline_compile_setup()
    compilation_cache.reset_cache()  # the flag is read once per process: make it take effect now
    yield
    if env is None:
        os.environ.pop("ALLOW_MULTIPLE_LIBTPU_LOAD", None)


@pytest.fixture(scope="module")
def devices():
    try:
        return aot.topology_devices(TOPOLOGY)
    except aot.TopologyUnavailable as e:
        pytest.fail(f"libtpu cannot load, so no TPU compilation can be checked: {e}")


def _check_real(step: aot.StepReport, n_chips: int):
    assert step.n_chips == n_chips
    assert step.hbm_bytes == 16 * aot.GiB  # v5e
    assert step.error is None, step.error
    # Temporaries may be 0: small programs keep them in on-chip VMEM, outside HBM.
    assert step.argument_bytes > 0 and step.output_bytes > 0 and step.code_bytes > 0
    assert step.temp_bytes >= 0
    assert 0 < step.peak_bytes <= step.hbm_bytes and step.fits


def test_topology_is_v5e_2x2(devices):
    assert len(devices) == 4
    assert {d.device_kind for d in devices} == {"TPU v5 lite"}


def test_disaggregated_devices_per_chip_kind(devices):
    # v5e rejects programs on part of a multi-host slice: two v5e:8x16 slices instead.
    learner, sampler, where = aot.disaggregated_devices("v5e:16x16")
    assert len(learner) == len(sampler) == 128 and where == "two v5e:8x16 slices"
    learner, sampler, where = aot.disaggregated_devices("v5p:4x4x4")  # 64 chips, one slice
    assert len(learner) == len(sampler) == 32 and not set(learner) & set(sampler)
    learner, sampler, _ = aot.disaggregated_devices(TOPOLOGY)  # one host: halves compile
    assert len(learner) == len(sampler) == 2 and not set(learner) & set(sampler)


def test_tiny_dense_colocated(devices):
    r = aot.check_placement(tiny_dense(), devices, "colocated", WORK, learner_mesh={"fsdp": 2, "tensor": 2})
    train, prefill, decode = r.steps
    for s in r.steps:
        _check_real(s, 4)
    # The real step's arguments: parameters, the AdamW moments (+ its int32 count), the KL
    # reference (aot.POD_LOSS) and the make_batch layout (5 [8, 32] and 4 [8] arrays of 4 bytes,
    # rows split over fsdp=2); TPU tiling only pads upwards.
    opt = 2 * TINY_PER_CHIP + 4
    assert train.argument_bytes >= 2 * TINY_PER_CHIP + opt + (5 * 32 + 4) * 4 * 4
    assert train.alias_bytes >= TINY_PER_CHIP + opt  # the train state is donated
    assert train.collectives["all-gather"] > 0  # FSDP gathers the weights
    # While sampling, the optimizer state and the reference parameters stay.
    assert decode.resident_bytes == prefill.resident_bytes == opt + TINY_PER_CHIP
    assert train.resident_bytes == 0
    assert r.weight_sync is None and r.fits
    # Roofline inputs: the learner's step does more matmul work than a decode step.
    assert train.flops > prefill.flops > decode.flops > 0 and decode.open_loops >= 1
    assert all(s.roofline_seconds > 0 for s in r.steps)


def test_tiny_moe_disaggregated(devices):
    r = aot.check_placement(
        tiny_moe(), devices, "disaggregated", WORK, learner_mesh={"fsdp": -1}, sampler_mesh={"expert": 2}
    )
    assert r.meshes["learner"]["fsdp"] == 2 and r.meshes["sampler"]["expert"] == 2
    for s in r.steps:
        _check_real(s, 2)
        assert s.resident_bytes == 0
    # tiny_moe: embed 2048 + final norm 32 + 2 layers of (attention 3072 + norms 64 + router 128
    # + 4 experts x 3 x 32x64) = 57760 float32 parameters; the sampler splits the experts.
    assert r.weight_sync["unique"] == 57760 * 4
    experts = 2 * 4 * 3 * 32 * 64
    assert r.weight_sync["received_per_chip"] == (57760 - experts // 2) * 4
    assert r.weight_sync["total"] == 2 * r.weight_sync["received_per_chip"]


def test_pod_config_row_constraint_compiles_and_saves_memory(devices):
    # The train step of the model as it runs on a pod (remat + rows split like the batch) on an
    # FSDP-only mesh: it compiles for the TPU and the row constraint lowers the per-chip HBM
    # traffic (the real make_train_step, 8 x 256 tokens: 174 -> 111 MB per chip; its peak
    # memory at this tiny size went up 7%: 10.3 -> 11.0 MB).
    mesh = aot.topology_mesh(devices, {"fsdp": 4})
    work = aot.Workload(train_batch=8, train_seq=256)

    def train(config):
        return aot.compile_train(config, mesh, ShardingRules(), work)[0]

    plain = train(tiny_dense())
    rows = train(aot.pod_config(tiny_dense(), remat="none"))
    pod = train(aot.pod_config(tiny_dense()))
    for s in (plain, rows, pod):
        _check_real(s, 4)
    assert rows.hbm_traffic < plain.hbm_traffic
    assert rows.flops == plain.flops  # the same arithmetic, placed differently


def test_loop_aware_flops_agree_unrolled_and_scanned_and_with_xla(devices):
    """The TPU compiler lowers matmuls to windowed convolutions (batched attention as
    base-dilated ones); counted as XLA counts them, the scanned and the unrolled forward have
    the same matmul FLOPs, and with no loop left they are most of XLA's own total (which adds
    elementwise work): measured 86%."""
    from agentjax.policy.model import forward
    from agentjax.sharding.roofline import hlo_cost

    rep = aot.replicated(aot.topology_mesh(devices, {"data": 4}))
    tok = jax.ShapeDtypeStruct((4, 256), jnp.int32)
    flops = {}
    for unroll in (1, 2):
        cfg = tiny_dense(layer_unroll=unroll)
        params = aot.abstract_params(cfg)
        fn = jax.jit(
            lambda p, t, cfg=cfg: forward(p, t, t, config=cfg)[0].sum(),
            in_shardings=(jax.tree.map(lambda _: rep, params), rep),
        )
        compiled = fn.lower(params, tok).compile()
        flops[unroll] = hlo_cost(compiled.as_text()).flops
        xla = compiled.cost_analysis()["flops"]
    assert flops[1] == flops[2] > 0
    assert 0.75 * xla < flops[2] <= xla  # the last compile is the unrolled one: no loop


def test_oom_is_reported_not_raised(devices):
    mesh = aot.topology_mesh(devices, {"data": 4})
    big = jax.ShapeDtypeStruct((5 * aot.GiB,), jnp.float32)  # 20 GiB on every 16 GiB chip
    rep = aot.replicated(mesh)
    r = aot.compile_step("huge", lambda x: x * 2, (big,), (rep,), rep)
    assert not r.fits
    assert r.error is not None or r.peak_bytes > r.hbm_bytes
    assert "DOES NOT FIT" in r.verdict() and "[0]" in r.verdict()  # names the argument


def _tiny_cfg():
    cfg = get_config()
    cfg.preset, cfg.placements = "tiny_dense", "colocated"
    cfg.mesh = dict(data=1, fsdp=2, tensor=2, expert=1)
    cfg.train = dict(batch=8, seq_len=32, microbatches=1)
    cfg.sample = dict(batch=8, prompt_len=16, cache_len=32)
    return cfg


def test_cli_prints_table_and_exits_zero(devices, capsys):
    assert compile_check.run(_tiny_cfg(), TOPOLOGY) == 0
    out = capsys.readouterr().out
    assert "everything fits on v5e:2x2" in out
    assert all(name in out for name in ("train", "prefill", "decode", "HBM", "AG="))
    assert "learner: make_train_step, loss grpo / filter icepop / kl_coef 0.001" in out
    assert "roofline train:" in out and "roofline tokens/s per chip: train " in out
    # The model runs as on a pod: per-layer remat, hidden rows split like the batch.
    assert "remat='layer', activation rows over mesh axes ('data', 'fsdp')" in out


def test_cli_rejects_unknown_activation_rows(devices, capsys):
    cfg = _tiny_cfg()
    cfg.activation_rows = "data,rows"
    assert compile_check.run(cfg, TOPOLOGY) == 2
    assert "unknown mesh axes ['rows']" in capsys.readouterr().err


def test_cli_rejects_unknown_mode_and_loss_field(devices, capsys):
    cfg = _tiny_cfg()
    cfg.modes = "fast,fastest"
    assert compile_check.run(cfg, TOPOLOGY) == 2
    assert (
        "mode='fastest' is invalid; allowed values: ['fast', 'exact_bf16', 'exact_f32', "
        "'exact_pallas_bf16', 'exact_pallas_f32']" in capsys.readouterr().err
    )
    cfg = _tiny_cfg()
    cfg.loss.filter = "sometimes"
    assert compile_check.run(cfg, TOPOLOGY) == 2
    assert "loss.filter='sometimes' is invalid" in capsys.readouterr().err


def test_cli_exits_nonzero_when_it_does_not_fit(devices, capsys, monkeypatch):
    big = aot.StepReport(
        "train",
        4,
        16 * aot.GiB,
        argument_bytes=17 * aot.GiB,
        largest=(("[1][0].mu['layers']['w_up']", 9 * aot.GiB),),
    )
    report = aot.PlacementReport("colocated", {"learner": {"fsdp": 4}, "sampler": {"fsdp": 4}}, (big,))
    monkeypatch.setattr(aot, "check_placement", lambda *a, **k: report)
    assert compile_check.run(_tiny_cfg(), TOPOLOGY) == 1
    out, err = capsys.readouterr()
    assert "DOES NOT FIT" in out and "mu['layers']['w_up'] (9.00 GiB)" in out
    assert "DOES NOT FIT on v5e:2x2: fast/colocated/train" in err


def test_the_exact_pallas_train_step_compiles_on_all_chips(devices):
    """Mosaic (interpret=False): the learner's real train step (make_train_step, the pod loss)
    in exact_pallas_f32 mode, tiny model, on all four chips of v5e:2x2 (fsdp 2 x tensor 2, rows
    over data x fsdp). Every pallas_call sits in a shard_map over the mesh (pallas_kernels.
    on_mesh); unwrapped, the partitioner refuses it ("Mosaic kernels cannot be automatically
    partitioned")."""
    from agentjax.podcheck import programs
    from agentjax.policy import pallas_kernels

    rules = ShardingRules()
    cfg = programs.mode_config(aot.pod_config(tiny_dense(), rules), "exact_pallas_f32")
    mesh = aot.topology_mesh(devices, {"fsdp": 2, "tensor": 2})
    with pallas_kernels.interpret_mode(False):
        report, _, _ = aot.compile_train(cfg, mesh, rules, WORK)
    _check_real(report, 4)
    assert report.collectives["all-gather"] > 0  # the weights gathered over fsdp for the kernels
