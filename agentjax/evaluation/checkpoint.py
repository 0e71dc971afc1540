"""A trained run's checkpoint (with the config its workdir stored) or a HF directory, on its task's
held-out split: greedy as the training loop's own evaluation, and sampled."""

from __future__ import annotations

import os

from agentjax.evaluation.common import run_parts, structured


def heldout_figures(parts, params, step: int, sampled: bool) -> dict:
    """The run's own held-out evaluation (greedy, ``run.build.evaluate_heldout``'s seed and
    judges), and with ``sampled`` the same tasks sampled at ``rl.temperature``."""
    from agentjax.run.build import evaluate_policy  # noqa: PLC0415
    from agentjax.sampling.sampler import Sampler  # noqa: PLC0415
    from agentjax.sampling.transforms import Greedy, Temperature  # noqa: PLC0415

    run, out = parts.run, {}
    modes = {"greedy": Greedy()}
    if sampled:
        modes["sampled"] = None if run.rl.temperature == 1.0 else Temperature(run.rl.temperature)
    for mode, transform in modes.items():
        sampler = Sampler(parts.model, transform=transform, stop_tokens=(parts.codec.stop,))
        out[mode] = evaluate_policy(parts, sampler, params, step)
    return out


def _report(kind: str, parts, step, played: dict, **extra) -> dict:
    run = parts.run
    report = {"kind": kind, "task": run.task.name, "step": step, **extra, **structured(played["greedy"])}
    if "sampled" in played:
        report["sampled"] = {"temperature": run.rl.temperature, **structured(played["sampled"])}
    return report


def evaluate_checkpoint(
    cfg, workdir: str, *, step: int | None = None, num_tasks: int | None = None, sampled: bool = True
) -> dict:
    """Held-out evaluation of a ``launch.train`` checkpoint, greedy (the run's own evaluation:
    at the run's last step it equals its last ``eval/*`` row) and sampled (raises CheckpointError)."""
    import jax  # noqa: PLC0415

    from agentjax.learner import checkpoint as ckpt  # noqa: PLC0415
    from agentjax.learner.step import init_train_state, make_optimizer  # noqa: PLC0415
    from agentjax.policy.model import init_params  # noqa: PLC0415

    parts = run_parts(cfg, num_tasks)
    run = parts.run
    ckdir = os.path.join(workdir, "checkpoints")
    steps = ckpt.all_steps(ckdir)
    if not steps:
        raise ckpt.CheckpointError(
            f"no checkpoint under {os.path.abspath(ckdir)} "
            f"(train first: python -m launch.train --workdir={workdir})"
        )
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ckpt.CheckpointError(
            f"no checkpoint for step {step} under {os.path.abspath(ckdir)}; available steps: {steps}"
        )
    tx = make_optimizer(run.optim)
    target = jax.eval_shape(
        lambda: init_train_state(init_params(parts.model, jax.random.key(run.seed)), tx, run.seed)
    )
    try:
        restored = ckpt.restore_checkpoint(ckdir, target, step=step)
    except ckpt.CheckpointError as e:
        raise ckpt.CheckpointError(f"{e} (was this run trained with this --config?)") from None
    played = heldout_figures(parts, restored.state.params, step, sampled)
    header = restored.metadata.get("header", {})
    return _report("checkpoint", parts, step, played, workdir=os.path.abspath(workdir), header=header)


def evaluate_export(cfg, hf_dir: str, *, num_tasks: int | None = None, sampled: bool = True) -> dict:
    """Held-out evaluation of a HF directory (``launch.export``'s output, or any checkpoint) on
    the config's task: ``model`` becomes ``model.hf_path=hf_dir``, the weights its safetensors."""
    from agentjax.policy.hf import load_hf_checkpoint  # noqa: PLC0415

    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    model = d.get("model", {})
    keep = ("param_dtype", "max_seq_len", "tool_format") if model.get("hf_path") else ("max_seq_len",)
    d["model"] = {"hf_path": hf_dir, **{k: model[k] for k in keep if k in model}}
    parts = run_parts(d, num_tasks)
    c = parts.model
    _, params = load_hf_checkpoint(hf_dir, dtype=c.param_dtype, max_seq_len=c.max_seq_len)
    played = heldout_figures(parts, params, 0, sampled)
    return _report("export", parts, 0, played, checkpoint=os.path.abspath(hf_dir))


def stored_config(workdir: str) -> dict | None:
    """The config a ``launch.train`` run in ``workdir`` was started with (None: none stored)."""
    import json  # noqa: PLC0415

    from agentjax.run.files import RUN_CONFIG  # noqa: PLC0415

    path = os.path.join(workdir, RUN_CONFIG)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)
