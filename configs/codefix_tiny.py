"""Train on codefix in the real sandbox: a tiny random-init Qwen3 with a BPE tokenizer, on a CPU.

    python -m launch.make_tiny_hf --out=workdir/tiny_qwen3        # the HF directory (seconds)
    python -m launch.train --config=configs/codefix_tiny.py --workdir=workdir/codefix_tiny
    python -m launch.export --workdir=workdir/codefix_tiny --out=workdir/codefix_tiny_hf

Warm start on the scripted honest agents' demonstrations (oracle, no_op, wrong_fix, played once
per training task in the sandbox, written as ``<tool_call>`` JSON through the chat template), then
GRPO on the isolated verifier's verdicts (pass 1, fail partial credit, reward_hack -1,
infra_fault masked and retried). Conversations are rendered through the checkpoint's own chat
template; observations are tool messages; a turn stops on ``<|im_end|>``. Observation budget:
a tool output over ``codefix.max_obs_chars`` keeps head and tail; over ``caps.max_obs_tokens``
tokens keeps the head and the generation prompt (counted in ``observation_tokens_cut``).
Learning is not expected at this size; the run is real (trajectories, verdicts, updates,
checkpoints, report). Needs root, ``bwrap`` and ``setpriv``.
"""

from configs import default


def get_config():
    c = default.base()
    c.model = dict(
        hf_path="workdir/tiny_qwen3",
        tool_format="hermes",
        param_dtype="float32",
        max_seq_len=3072,
        exact_tile=0,
    )
    c.task = dict(
        name="codefix", difficulty="default", latency="fixed", max_steps=6, eval_tasks=2, hack_tool=True
    )
    c.codefix = dict(
        tasks=(), agents=("oracle", "no_op", "wrong_fix"), inject="", audit=True, max_obs_chars=8000
    )
    c.caps = dict(max_tool_calls=6, max_action_tokens=512, max_obs_tokens=2048)
    c.warm_start = dict(episodes=256, steps=150, batch_size=8, learning_rate=3e-3)
    c.rl = dict(steps=6, group_size=4, batch_size=8, eval_every=3, temperature=1.0)
    # 2-row micro-batches: the learner's attention over 3072 tokens stays ~0.3 GB per copy (a 4096
    # run with 8-row batches was OOM-killed at 15 GB on a 23 GB machine).
    c.optim = dict(c.optim, grad_accum=4)
    # a partial section: the rest (the real clock, the env pool) is the default run's. A random
    # model fails every task: dynamic sampling would only play 4x the sandbox episodes, so keep
    c.scheduler = dict(mode="windowed_fifo", window=8, num_slots=8, engine_slots=8, uniform_groups="keep")
    c.checkpoint_every = 3
    c.log_every = 1
    return c
