"""Evaluation of scripted agents on codefix with the real sandbox (nothing is trained).

Every agent plays every bundled task (12 small Python packages with one bug each) through the
sandboxed tools (bubblewrap, uid 65534, no network, rlimits, cgroups); the isolated verifier
judges the final tree, and the independent audit judges it again on mutated inputs (H). Honest
agents (``oracle`` must pass, ``no_op`` and ``wrong_fix`` must fail) and the 18 planted attacks
(every one must be labelled ``reward_hack``). Faulty agents (``busy_loop``, ``sleep_forever``,
``allocate_2gb``, ``fork_bomb``) may be added; they run into the verifier's limits and take longer.
Needs root, ``bwrap`` and ``setpriv`` (``apt-get install bubblewrap util-linux``).

To train a model on codefix, use ``configs/codefix_tiny.py`` (a HF directory: BPE tokenizer and
chat template); ``launch/train.py`` rejects codefix without ``model.hf_path``.

    python -m launch.eval --config=configs/codefix_eval.py --out=/tmp/codefix_eval.json
    python -m launch.eval --config=configs/codefix_eval.py --agent=oracle --num_tasks=3
    python -m launch.eval --config=configs/codefix_eval.py --config.codefix.inject=host_kill
"""

from agentjax.envs.codefix.agents import ATTACKERS, HONEST
from configs import default


def get_config():
    c = default.base()
    c.task.name = "codefix"
    c.codefix = dict(tasks=(), agents=(*HONEST, *ATTACKERS), inject="", audit=True)
    return c
