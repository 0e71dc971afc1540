"""Config of ``launch/consistency.py``: the model, the sampled batch and the modes to measure.

    python -m launch.consistency --config=configs/consistency.py \
        --config.out=benchmarks/results/consistency_cpu.json --config.batch=32
"""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    # The benchmark's tiny model (Llama layout); ``moe`` adds the same model with experts.
    c.model = dict(
        vocab_size=64, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=512, max_seq_len=64
    )
    c.moe = dict(n_experts=4, n_experts_per_token=2)  # {} = dense only
    c.exact_tile = 8
    c.batch = 32
    c.prompt_len = (4, 16)  # uniform random prompt lengths (right-padded)
    c.max_new_tokens = 48
    c.seed = 0
    c.temperature = 1.0
    c.top_k = 0  # 0 = off
    c.top_p = 1.0
    c.timing_repeats = 3  # learner cost, exact vs fast (0 = skip)
    c.deterministic_ops = True  # XLA's deterministic-ops flag (GPU); no effect on CPU
    c.out = "consistency.json"
    return c
