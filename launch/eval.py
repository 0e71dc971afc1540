"""Held-out evaluation: success with a 95% interval, the audit metric H, hack rate, fault breakdown.

    python -m launch.eval --workdir=/tmp/smoke                     # its latest checkpoint, its config
    python -m launch.eval --workdir=/tmp/smoke --step=6 --num_tasks=64 --out=/tmp/eval6.json
    python -m launch.eval --workdir=/tmp/smoke --checkpoint=/tmp/smoke_hf   # a launch.export dir
    python -m launch.eval --agent=demonstrator --num_tasks=256                         # scripted agent
    python -m launch.eval --config=configs/codefix_eval.py --agent=oracle --num_tasks=2  # real sandbox

Three things can be evaluated, each printed as a table and written as JSON:

- **a checkpoint** written by ``launch.train`` in ``--workdir`` (``--step``, default the latest),
  with the config the run stored (``<workdir>/run_config.json``; a ``--config`` given on the
  command line replaces it, as for runs older than that file, or to play another split: with
  ``--workdir`` named, a codefix config evaluates the checkpoint, not the scripted agents). The
  model plays its task's held-out split (any task: a user's ``package.module:factory`` too)
  greedily, exactly as the training loop's own evaluation
  (``agentjax.diagnostics.evaluate.evaluate``, same seed and judges): at the run's last step the
  numbers equal the last ``eval/*`` row of its ``metrics.jsonl``; then sampled at
  ``rl.temperature`` (``--nosampled``: greedy only). JSON default: ``<workdir>/eval_<step>.json``.
- **a HF directory** (``--checkpoint=DIR``: ``launch.export``'s output, or any HF checkpoint) on
  the same task and split: the run's ``model`` section becomes ``model.hf_path=DIR``.
- **a scripted minirepo agent** (``--agent=demonstrator|localizing|oracle|random|test_editor``), no
  checkpoint: the same held-out tasks and environment, the episode seeds of the training loop's
  demonstrator baseline (so ``demonstrator`` reproduces the ``demonstrator_success`` it logs). They
  play under the config's ``task.max_steps`` (6 by default, enough for the four-step scripted
  agents; the oracle's exhaustive search needs more: ``--config.task.max_steps=40`` gives 100%).
- **scripted codefix agents in the real sandbox** (``--config=configs/codefix_eval.py``): every agent
  of ``codefix.agents`` (or ``--agent``) on every task of ``codefix.tasks`` (``--num_tasks`` keeps
  the first n); each final tree is judged by the isolated verifier and again by the independent
  audit; each agent's row also says whether every label was the one that agent must get.

``--num_tasks`` (default: the config's ``task.eval_tasks`` / every codefix task) sets how many
held-out tasks are played. Undefined rates (H with no passing episode) are ``null`` in the JSON.
Exit codes: 2 invalid config or flag, 3 checkpoint error, 4 sandbox unavailable.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

from launch import configflag

_DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")
_CONFIG = configflag.define(_DEFAULT)  # a config that cannot be loaded: one line, exit 2
_WORKDIR = flags.DEFINE_string("workdir", "workdir/default", "Workdir of a launch.train run.")
_STEP = flags.DEFINE_integer("checkpoint_step", None, "Checkpoint step to evaluate (default: latest).")
flags.DEFINE_alias("step", "checkpoint_step")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "", "A HF directory (launch.export) to evaluate instead.")
_SAMPLED = flags.DEFINE_bool("sampled", True, "Also evaluate sampled at rl.temperature (checkpoints).")
_NUM_TASKS = flags.DEFINE_integer("num_tasks", None, "Held-out tasks to play (default: the config's).")
_AGENT = flags.DEFINE_string("agent", "", "A scripted agent instead of a checkpoint (see module doc).")
_OUT = flags.DEFINE_string("out", "", "JSON output (default <workdir>/eval_<step>.json for checkpoints).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from agentjax.envs.sandbox import SandboxUnavailable  # noqa: PLC0415
    from agentjax.evaluation import run_eval, stored_config, table  # noqa: PLC0415
    from agentjax.learner.checkpoint import CheckpointError  # noqa: PLC0415
    from agentjax.policy.config import ConfigError  # noqa: PLC0415

    stored = None if flags.FLAGS["config"].present or _AGENT.value else stored_config(_WORKDIR.value)
    try:
        report = run_eval(
            stored or configflag.value(_CONFIG),
            workdir=_WORKDIR.value,
            checkpoint_step=_STEP.value,
            num_tasks=_NUM_TASKS.value,
            agent=_AGENT.value,
            checkpoint=_CHECKPOINT.value,
            sampled=_SAMPLED.value,
            stored=stored is not None,
            workdir_given=flags.FLAGS["workdir"].present,
        )
    except ConfigError as e:
        print(f"invalid config or flag: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        return 3
    except SandboxUnavailable as e:
        print(f"sandbox unavailable: {e}", file=sys.stderr)
        return 4
    print(table(report))
    out = _OUT.value or (
        os.path.join(_WORKDIR.value, f"eval_{report['step']}.json") if report["kind"] == "checkpoint" else ""
    )
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=configflag.parse_flags)
