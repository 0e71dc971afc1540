"""codefix on generated tasks: configs/codefix_tiny.py with seeded, validated generated repositories.

    python -m launch.make_tiny_hf --out=workdir/tiny_qwen3
    python -m launch.train --config=configs/codefix_generated.py --workdir=workdir/codefix_generated
    python -m launch.train --config=configs/codefix_generated.py --workdir=... \\
        --config.task.kwargs.generated=256 --config.task.eval_tasks=192 --config.task.kwargs.seed=3

Trains on ``task.kwargs.generated`` generated tasks of the TRAINING (bug family, template) pairs and
evaluates on ``task.eval_tasks`` (>= 128) generated tasks of the HELD-OUT pairs, a pair never trained
on under any seed (split rule: ``agentjax/envs/codefix/generated/templates.py``; docs/codefix.md,
"Generated tasks"). The generator's seed is the run's seed unless ``task.kwargs.seed`` is set.
Every task is validated before use (host pass + one sandbox pass per 24 tasks, cached under
``$AGENTJAX_CACHE``; ~15 s for 160 tasks the first time, ~1 s after). The scripted agents play the
first ``task.kwargs.demo_tasks`` tasks of each split (warm-start demonstrations, baseline).
Needs root, ``bwrap`` and ``setpriv``.
"""

from configs import codefix_tiny


def get_config():
    c = codefix_tiny.get_config()
    c.task = dict(c.task, eval_tasks=128, kwargs=dict(generated=256, demo_tasks=16))
    return c
