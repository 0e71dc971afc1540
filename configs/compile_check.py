"""Config of ``launch/compile_check.py``: which model, topology, meshes, rules and shapes.

    python -m launch.compile_check --config=configs/compile_check.py --topology=v5e:16x16
    python -m launch.compile_check --config=configs/compile_check.py --config.preset=qwen3_32b \
        --config.mesh.fsdp=64 --config.mesh.tensor=4 --config.train.microbatches=4

Mesh axis sizes may be -1 (the remaining chips). ``rules`` maps logical axis names to mesh axes:
a name, comma-separated names, or "" (replicated). ``sampler_mesh`` and ``sampler_rules`` apply to
the sampler slice in disaggregated placement (colocated, the sampler shares the learner's mesh).
"""

from ml_collections import ConfigDict

from agentjax.sharding.rules import DEFAULT_RULES


def _rules_dict() -> dict[str, str]:
    as_str = lambda v: "" if v is None else v if isinstance(v, str) else ",".join(v)
    return {k: as_str(v) for k, v in DEFAULT_RULES.items()}


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.preset = "qwen3_8b"  # agentjax.policy.presets.PRESETS
    c.topology = "v5e:16x16"  # overridden by --topology
    c.placements = "colocated,disaggregated"
    # The two model options FSDP training needs at these sizes (docs/pod_readiness.md; what
    # aot.pod_config sets): per-layer remat, and the hidden rows [N, D] of every layer split over
    # these mesh axes (ModelConfig.activation_rows; comma-separated, "" = no constraint). Use the
    # mesh axes of the "batch" rule below. remat="" leaves the preset's value ("none").
    c.remat = "layer"
    c.activation_rows = _rules_dict()["batch"]
    # The learner's log-probs taken this many tokens per row at a time (ModelConfig.score_chunk,
    # aot.POD_SCORE_CHUNK): no [B, T, V] logits in the train step; 0 = whole rows. The default
    # shapes (2048-token rows) are scored whole either way.
    c.score_chunk = 2048
    # Fast mode's attention (ModelConfig.attention_*): "auto" attends blockwise (online softmax,
    # O(T x block) memory) from blockwise_from keys and block queries, with the full score
    # tensor otherwise; "full" or "blockwise" force one. Exact mode keeps its own kernels.
    c.attention = dict(kernel="auto", block=512, blockwise_from=4096)
    c.mesh = dict(data=1, fsdp=-1, tensor=1, expert=1)
    c.sampler_mesh = dict(data=-1, fsdp=1, tensor=8, expert=1)
    c.rules = _rules_dict()
    c.sampler_rules = _rules_dict()
    c.train = dict(batch=256, seq_len=2048, microbatches=1)  # microbatches = optim.grad_accum
    c.sample = dict(batch=256, prompt_len=1024, cache_len=4096)
    # The learner's real step (make_train_step) with these settings (LossConfig / OptimConfig
    # fields): the default objective and filter with the KL penalty on (a resident reference).
    c.loss = dict(name="grpo", filter="icepop", filter_ratio="total", kl_coef=1e-3)  # as the default run
    c.optim = dict(learning_rate=1e-6, grad_clip=1.0)
    # Kernels: "fast" (the preset: bf16 body, float32 head), "exact_bf16" or "exact_f32"
    # (batch-invariant kernels, docs/consistency.md), "exact_pallas_bf16" or "exact_pallas_f32"
    # (exact mode's Pallas kernels, compiled by Mosaic); comma-separated compiles each.
    c.modes = "fast"
    return c
