"""Export a launch.train checkpoint as a Hugging Face directory (config, safetensors, tokenizer).

    python -m launch.export --workdir=workdir/codefix_tiny --out=workdir/codefix_tiny_hf
    python -m launch.export --workdir=W --out=DIR --step=20 --max_shard_mb=2000

The run must have been trained from a HF directory (``model.hf_path``): its ``config.json`` and
tokenizer files were saved in ``<workdir>/hf_source`` and are written next to the trained weights,
so ``transformers.AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer`` load the
result (logits within 1e-5 of agentjax's in float32), and ``--config.model.hf_path=DIR`` trains
on from it (export then import is bitwise). Exit codes: 2 bad input, 3 checkpoint error.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app, flags

_WORKDIR = flags.DEFINE_string("workdir", None, "Workdir of a launch.train run from model.hf_path.")
_OUT = flags.DEFINE_string("out", None, "The HF directory to write (must not hold a checkpoint).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
_SHARD = flags.DEFINE_integer("max_shard_mb", 0, "Split the weights into shards of this size (0: one file).")


def export(workdir: str, out: str, *, step: int | None = None, max_shard_bytes: int = 0) -> str:
    """Writes the HF directory ``out`` from ``workdir``'s checkpoint; returns its path."""
    import jax  # noqa: PLC0415

    from agentjax.learner import checkpoint as ckpt  # noqa: PLC0415
    from agentjax.policy.hf import HFImportError, load_hf_config, read_config_json  # noqa: PLC0415
    from agentjax.policy.hf_export import export_hf  # noqa: PLC0415
    from agentjax.policy.model import param_spec  # noqa: PLC0415
    from agentjax.tasks.model import SOURCE_DIR  # noqa: PLC0415

    src = os.path.join(workdir, SOURCE_DIR)
    if not os.path.isfile(os.path.join(src, "config.json")):
        raise HFImportError(
            f"{src}/config.json not found: {workdir} was not trained from a HF "
            "directory (model.hf_path), so there is no architecture to export to"
        )
    restored = ckpt.restore_checkpoint(os.path.join(workdir, "checkpoints"), step=step)
    params = restored.state["params"]
    dtype = str(params["embed"].dtype)
    config = load_hf_config(src, dtype=dtype)
    want = {
        "/".join(str(getattr(k, "key", k)) for k in path): leaf[0]
        for path, leaf in jax.tree_util.tree_flatten_with_path(
            param_spec(config), is_leaf=lambda x: isinstance(x, tuple) and isinstance(x[0], tuple)
        )[0]
    }
    for name, shape in want.items():
        node = params
        for part in name.split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None or tuple(node.shape) != tuple(shape):
            got = None if node is None else tuple(node.shape)
            raise HFImportError(
                f"checkpoint step {restored.step}: parameter {name} has shape {got}; "
                f"{src}/config.json needs {tuple(shape)}"
            )
    export_hf(params, config, read_config_json(src), out, tokenizer_dir=src, max_shard_bytes=max_shard_bytes)
    return out


def main(argv):
    del argv
    from agentjax.learner.checkpoint import CheckpointError  # noqa: PLC0415
    from agentjax.policy.config import ConfigError  # noqa: PLC0415

    logging.getLogger("absl").setLevel(logging.WARNING)
    if not _WORKDIR.value or not _OUT.value:
        print("--workdir and --out are required", file=sys.stderr)
        return 2
    try:
        path = export(_WORKDIR.value, _OUT.value, step=_STEP.value, max_shard_bytes=_SHARD.value << 20)
    except (ConfigError, FileExistsError) as e:
        print(f"cannot export: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        return 3
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    app.run(main)
