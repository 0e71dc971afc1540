"""The running example that should learn (#30 item 2): a code agent with a real tokenizer, chat
template and tool calls, on generated tasks, in real time on the slot engine.

    python -m launch.make_tiny_hf --out=workdir/tiny_qwen3_2k --vocab_size=2048 --copy_steps=1200  # 4 min
    python -m launch.train --config=configs/codefix_learn.py --workdir=workdir/codefix_learn
    python -m benchmarks.codefix_time --steps=2                   # where the time goes (docs/codefix.md)

What it is:

* **Model and tokenizer** built by the project (``launch/make_tiny_hf.py``: a Qwen3, 2 layers x 64,
  pretrained for 1,200 steps to copy by content (``--copy_steps``: an induction head, which the
  warm start alone does not grow; docs/learning.md), and a byte-level BPE of 2,048 merges trained
  on the bundled codefix tasks and generated TRAINING tasks; no download). Conversations are
  rendered through the checkpoint's own ChatML chat template (tools in the system turn, tool
  outputs as ``<tool_response>`` user turns; a turn stops on ``<|im_end|>``).
* **Tools** as Hermes ``<tool_call>`` JSON (``model.tool_format='hermes'``), the subset
  ``codefix.tools`` offered in the prompt: ``read``, ``edit`` (replace the one occurrence of a
  line's text; the compact action), ``patch`` (a unified diff), ``test`` (the visible tests),
  ``submit`` (the isolated verifier judges the tree) — ``agentjax/tasks/codefix.py``'s ``TOOLS``.
* **Tasks**: ``task.kwargs.generated`` generated tasks of the training (family, template) pairs,
  ``task.eval_tasks`` (>= 128) of the held-out pairs, never trained on under any seed.
* **Warm start** on the imperfect ``editor`` (``agentjax/envs/codefix/agents.py``: read the
  buggy module, one ``edit`` of the shortest unique span of words around the bug — the right fix
  on 60% of tasks, a known-wrong one otherwise —, submit), played on ``task.kwargs.demo_tasks``
  tasks of each split in the sandbox; its held-out success is the run's ``demonstrator_success``.
* **RL**: GRPO on the verifier's verdicts, ``scheduler.clock='real'`` on the slot engine
  (``engine_slots``), environments on the thread pool.

Targets of #30 (NOT reached; measured numbers in docs/codefix.md, "Learning run"): held-out
success >= 0.60, +25 points over the RL start, +20 over the demonstrator, within 20 minutes, on
seeds 0-2. Measured (seed 0, this quiet 2-core machine, copy-pretrained model, span edits):
1,064 s; the final checkpoint passes 0 of 128 held-out tasks (demonstrator 0.703); on fresh tasks
of the training pairs (``--config.task.kwargs.eval_pairs=train``) the demonstrator scores 0.625,
the RL start 0.062 and step 20 0.000: the warm start reaches a few tasks and RL lowers it. Neither
2,400 distinct warm-start rows nor GRPO's token-mean loss changed that (docs/codefix.md, "Fifth
round"): at 0.23M parameters the edit's ~40 tokens are rarely all right. The sixth round found
Adam's momentum moving the policy through empty steps (now skipped: ``optim.empty_batches``) and,
with that fixed, Adam's steps at a constant 1e-3 still walking the converged warm start out of its
basin under a KL anchor (``loss.kl_coef``) or a demonstration term (``loss.demo_coef``) alike;
at lr 1e-4 with the demonstration term the policy holds at the start (0.062) but does not rise
(2e-4: 0.078 at step 20, one task above the start).
Needs root, ``bwrap`` and ``setpriv``.
"""

from configs import codefix_generated


def get_config():
    c = codefix_generated.get_config()
    c.model = dict(c.model, hf_path="workdir/tiny_qwen3_2k", tool_format="hermes", max_seq_len=1536)
    # rename: 4 of every 5 warm-start rows renamed (augment.rename): copy, do not memorise
    kwargs = dict(generated=256, demo_tasks=128, rename=4)
    c.task = dict(c.task, max_steps=4, eval_tasks=128, kwargs=kwargs, hack_tool=True)
    c.codefix = dict(c.codefix, agents=("editor",), tools=("read", "edit", "patch", "test", "submit"))
    # read (~200 tokens of source), one edit (~40 tokens), submit
    c.caps = dict(max_tool_calls=4, max_action_tokens=96, max_obs_tokens=512)
    # 3e-3: the copy-pretrained init reaches nll 0.44 in 300 steps (1e-2 was for a random init)
    c.warm_start = dict(episodes=128, steps=300, batch_size=8, learning_rate=3e-3)
    c.rl = dict(steps=20, group_size=8, batch_size=32, eval_every=10, temperature=1.0)
    c.scheduler = dict(c.scheduler, clock="real", engine_slots=16, num_slots=16, window=16)
    c.checkpoint_every = 10
    c.log_every = 1
    return c
