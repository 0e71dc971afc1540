"""Does the codefix warm start teach the tiny model the actions, on training and on held-out tasks?

    python -m benchmarks.codefix_sft_probe --steps=300 --tasks=64 --lr=1e-2       # ~11 min on 2 busy cores

Plays ``--agent`` (default the imperfect ``editor``) on ``--tasks`` generated training tasks in the
sandbox, trains the warm start exactly as the run does (:func:`agentjax.learner.sft.sft_train` on
:func:`~agentjax.learner.sft.demo_rows` of configs/codefix_learn.py's chat codec and tools), then
measures per turn the share of episodes whose WHOLE action the model reproduces greedily under
teacher forcing (argmax at every action token equals the demonstration: greedy decoding would write
it exactly), on 16 training episodes of the agent, and on 16 training and 16 held-out episodes of
the same agent with the reference fix (its right answer). Held-out turn 1 (the ``edit``) is the
one that counts: without it no held-out task can pass. Prints the numbers and writes
``benchmarks/results/codefix_sft_probe.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import numpy as np


def _turn_exact(params, model, codec, eps, length: int, show: int = 0):
    import jax.numpy as jnp  # noqa: PLC0415

    from agentjax.learner.sft import demo_rows  # noqa: PLC0415
    from agentjax.policy.model import forward  # noqa: PLC0415

    r = demo_rows(eps, codec, length)
    w = int((r["positions"] < length).sum(1).max())
    tok, m = r["tokens"][:, :w], r["loss_mask"][:, :w]
    logits = forward(params, jnp.asarray(tok), jnp.asarray(r["positions"][:, :w]), config=model)[0]
    pred = np.asarray(jnp.argmax(logits, -1))
    text = lambda ids: codec.tokenizer.decode([int(x) for x in ids], skip_specials=False)  # noqa: E731
    exact, acc, shown = np.zeros((len(eps), max(len(e) for e in eps))), [], []
    for i in range(len(eps)):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], m[i], [0]])))  # starts, ends of the actions
        for t, (a, b) in enumerate(zip(edges[::2], edges[1::2], strict=True)):
            hit = pred[i, a - 1 : b - 1] == tok[i, a:b]
            exact[i, t] = float(hit.all())
            if t == 1 and i < show:  # the edit: what teacher-forced greedy writes vs the demonstration
                shown.append(
                    {
                        "wrote": text(pred[i, a - 1 : b - 1]),
                        "target": text(tok[i, a:b]),
                    }
                )
            acc.append(float(hit.mean()))
    return [round(float(x), 3) for x in exact.mean(0)], round(float(np.mean(acc)), 3), shown


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--agent", default="editor")
    p.add_argument("--rename", type=int, default=0, help="renamed copies of each demonstration (augment)")
    p.add_argument("--hf", default="workdir/tiny_qwen3_2k")
    p.add_argument(
        "--show", type=int, default=4, help="edits shown per set (teacher-forced greedy vs target)"
    )
    p.add_argument("--init", choices=("random", "hf"), default="random", help="hf: the checkpoint's weights")
    p.add_argument(
        "--success", type=float, default=None, help="the agent's right-fix share (default: its own)"
    )
    p.add_argument("--out", default="benchmarks/results/codefix_sft_probe.json")
    f = p.parse_args()
    import jax  # noqa: PLC0415

    from agentjax.envs.codefix import agents  # noqa: PLC0415
    from agentjax.envs.codefix.augment import rename  # noqa: PLC0415
    from agentjax.learner.sft import demo_rows, sft_train  # noqa: PLC0415
    from agentjax.policy.model import init_params  # noqa: PLC0415
    from agentjax.run import config as runconfig  # noqa: PLC0415
    from agentjax.run.build import build  # noqa: PLC0415
    from configs import codefix_learn  # noqa: PLC0415

    if f.success is not None:  # e.g. 1.0: every demonstration fixes the bug right
        agents.DEMONSTRATOR_SUCCESS = f.success
    c = codefix_learn.get_config()
    c.model = dict(c.model, hf_path=f.hf)
    c.task = dict(c.task, eval_tasks=16, kwargs=dict(generated=f.tasks, demo_tasks=f.tasks))
    c.codefix = dict(c.codefix, agents=(f.agent,))
    parts = build(runconfig.parse(c))
    agent, env = agents.AGENTS[f.agent][0], parts.suite.make_env()

    def right(task):  # the same agent, always with the reference fix
        saved, agents.DEMONSTRATOR_SUCCESS = agents.DEMONSTRATOR_SUCCESS, 2.0
        try:
            return agent(task)
        finally:
            agents.DEMONSTRATOR_SUCCESS = saved

    def play(tasks, ag):
        return [list(zip(agents.play(env, t, ag)[0], ag(t), strict=False)) for t in tasks]

    t0 = time.perf_counter()
    train, length = play(parts.suite.train[: f.tasks], agent), parts.model.max_seq_len
    sets = {"train (agent)": train[:16], "train (reference)": play(parts.suite.train[:16], right)}
    sets["held-out (reference)"] = play(parts.suite.heldout[:16], right)
    env.close()
    rng = random.Random(0)
    rows = demo_rows(train + [rename(e, rng) for e in train for _ in range(f.rename)], parts.codec, length)
    if f.init == "hf":  # e.g. a copy-pretrained model (launch.make_tiny_hf --copy_steps)
        from agentjax.policy.hf import load_hf_checkpoint  # noqa: PLC0415

        params = load_hf_checkpoint(f.hf, max_seq_len=parts.model.max_seq_len)[1]
    else:
        params = init_params(parts.model, jax.random.key(0))
    t1 = time.perf_counter()
    params, losses = sft_train(
        params, parts.model, rows, steps=f.steps, batch_size=f.batch, learning_rate=f.lr, seed=0,
        log_every=max(f.steps // 10, 1),
    )  # fmt: skip
    t2 = time.perf_counter()
    out = {
        "args": vars(f),
        "row_tokens_mean": float((rows["positions"] < length).sum(1).mean()),
        "action_tokens_mean": float(rows["loss_mask"].sum(1).mean()),
        "play_s": t1 - t0,
        "sft_s": t2 - t1,
        "nll_first_last": [losses[0], losses[-1]],
        "turn_exact_and_token_accuracy": {
            k: _turn_exact(params, parts.model, parts.codec, v, length, f.show) for k, v in sets.items()
        },
        "load_avg": os.getloadavg(),
    }
    print(json.dumps(out, indent=1))
    os.makedirs(os.path.dirname(f.out), exist_ok=True)
    with open(f.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
