"""The running example that should learn (#30 item 2): a code agent with a real tokenizer, chat
template and tool calls, on generated tasks, in real time on the slot engine.

    python -m launch.make_tiny_hf --out=workdir/tiny_qwen3        # the model + BPE tokenizer (seconds)
    python -m launch.train --config=configs/codefix_learn.py --workdir=workdir/codefix_learn
    python -m benchmarks.codefix_time --steps=2                   # where the time goes (docs/codefix.md)

What it is:

* **Model and tokenizer** built by the project (``launch/make_tiny_hf.py``: a random-init Qwen3,
  2 layers x 64, and a byte-level BPE trained on the codefix corpus; no download). Conversations
  are rendered through the checkpoint's own ChatML chat template (tools in the system turn, tool
  outputs as ``<tool_response>`` user turns; a turn stops on ``<|im_end|>``).
* **Tools** as Hermes ``<tool_call>`` JSON (``model.tool_format='hermes'``): ``ls``, ``read``,
  ``write``, ``patch`` (a unified diff), ``run``, ``test`` (the visible tests), ``submit`` (the
  isolated verifier judges the tree) — ``agentjax/tasks/codefix.py``'s ``TOOLS``.
* **Tasks**: ``task.kwargs.generated`` generated tasks of the training (family, template) pairs,
  ``task.eval_tasks`` (>= 128) of the held-out pairs, never trained on under any seed.
* **Warm start** on the imperfect ``demonstrator`` (``agentjax/envs/codefix/agents.py``: read the
  buggy module, test, patch with a small diff — the right one on 60% of tasks, a known-wrong one
  otherwise —, test, submit), played on ``task.kwargs.demo_tasks`` training tasks in the sandbox;
  its held-out success is the run's ``demonstrator_success``.
* **RL**: GRPO on the verifier's verdicts, ``scheduler.clock='real'`` on the slot engine
  (``engine_slots``), environments on the thread pool.

Targets of #30 (NOT yet reached; see docs/codefix.md, "Learning run: where the time goes"):
held-out success >= 0.60, +25 points over the RL start, +20 over the demonstrator, within 20
minutes, on seeds 0-2. Needs root, ``bwrap`` and ``setpriv``.
"""

from configs import codefix_generated


def get_config():
    c = codefix_generated.get_config()
    c.model = dict(c.model, hf_path="workdir/tiny_qwen3", tool_format="hermes", max_seq_len=3072)
    c.task = dict(
        c.task, max_steps=6, eval_tasks=128, kwargs=dict(generated=256, demo_tasks=64), hack_tool=True
    )
    c.codefix = dict(c.codefix, agents=("demonstrator",))
    # read (~1-2k characters of source), two test runs, one small diff, submit
    c.caps = dict(max_tool_calls=6, max_action_tokens=384, max_obs_tokens=2048)
    c.warm_start = dict(episodes=256, steps=300, batch_size=8, learning_rate=3e-3)
    c.rl = dict(steps=40, group_size=4, batch_size=16, eval_every=10, temperature=1.0)
    c.scheduler = dict(c.scheduler, clock="real", engine_slots=16, num_slots=16, window=16)
    c.checkpoint_every = 10
    c.log_every = 1
    return c
