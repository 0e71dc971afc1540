"""codefix with a real Qwen3 checkpoint (GPU/TPU): the codefix_tiny run with ``hf_path`` set.

    python -m launch.train --config=configs/qwen3_codefix.py \\
        --config.model.hf_path=/path/to/Qwen3-0.6B --workdir=workdir/qwen3_codefix

Any local Llama / Qwen2 / Qwen3 / Qwen3-MoE HF directory works (``config.json``,
``*.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` with a chat template that renders
tool messages). Weights are read straight onto the learner mesh's shardings in bfloat16 (float32
LM head); ``max_seq_len`` comes from here, not ``max_position_embeddings``.
"""

from configs import codefix_tiny


def get_config():
    c = codefix_tiny.get_config()
    c.model = dict(
        hf_path="/path/to/Qwen3-0.6B",
        tool_format="hermes",
        param_dtype="bfloat16",
        compute_dtype="bfloat16",
        head_dtype="float32",
        max_seq_len=8192,
        exact_tile=0,
    )
    c.caps = dict(max_tool_calls=16, max_action_tokens=2048, max_obs_tokens=4096)
    c.warm_start = dict(episodes=256, steps=100, batch_size=8, learning_rate=1e-5)
    c.rl = dict(steps=200, group_size=8, batch_size=32, eval_every=20, temperature=1.0)
    # the rest of the section is the default run's (real clock, dynamic sampling); 32 engine
    # slots: the KV cache of 64 x 8192 tokens would not fit next to the learner
    c.scheduler = dict(mode="windowed_fifo", window=32, num_slots=32, engine_slots=32, uniform_groups="drop")
    c.optim = dict(learning_rate=1e-6, warmup_steps=10, grad_clip=1.0, grad_accum=1)
    c.checkpoint_every = 20
    c.log_every = 5
    return c
