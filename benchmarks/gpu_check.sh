#!/usr/bin/env bash
# The GPU half of the consistency contract (issue 3), as one short prepared run:
#   1. the consistency report with XLA's deterministic-ops flag (launch/consistency.py);
#   2. the bitwise exact-mode tests on the GPU backend;
#   3. our sampler's throughput on the GPU (no anchors: the targets are CPU ones);
#   4. the Pallas kernels' bitwise tests (Triton lowering, tests/policy/test_pallas_exact.py);
#   5. exact / fast cost (benchmarks/exact_cost.py, with a pallas column off the CPU).
# Usage: OUT=<dir> bash benchmarks/gpu_check.sh   (writes consistency_gpu.json, sampler_gpu.json,
# tests_gpu.log, tests_pallas_gpu.log under $OUT). Needs jax with a CUDA backend, absl-py and ml_collections.
set -uo pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true"
python3 -c "import jax; print(jax.__version__, jax.devices())" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
python3 -m launch.consistency --config=configs/consistency.py \
    --config.out="$OUT/consistency_gpu.json" || rc=1
# conftest.py defaults JAX_PLATFORMS to cpu; the export above keeps the GPU.
python3 -m pytest -q -p no:cacheprovider tests/diagnostics/test_consistency.py \
    tests/policy/test_kernels.py tests/sampling/test_sampler.py tests/sampling/test_partial.py \
    tests/sampling/test_noise.py 2>&1 | tee "$OUT/tests_gpu.log" || rc=1
# the Pallas kernels of exact mode (exact_kernels="pallas", exact mode's default on GPU) on the
# Triton lowering (interpret=False off the CPU): per-kernel row invariance, decode == teacher-forced
# attention, tiny model sampler == learner bitwise (f32 and bf16)
python3 -m pytest -q -p no:cacheprovider tests/policy/test_pallas_exact.py -m "not slow" 2>&1 \
    | tee "$OUT/tests_pallas_gpu.log" || rc=1
# exact / fast cost of the exact-summation and Pallas kernels (issue 18; exact mode's GPU default), f32 and bf16, tile sweep
python3 benchmarks/exact_cost.py --rounds 3 --out "$OUT/exact_cost_gpu.json" || rc=1
python3 benchmarks/sampler.py --engines agentjax,agentjax_exact --repeats 3 \
    --out "$OUT/sampler_gpu.json" || rc=1
exit $rc
