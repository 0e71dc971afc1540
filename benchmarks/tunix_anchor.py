"""What the tunix anchors of ``sampler.py`` and ``grpo_step.py`` share: tunix's Llama3 with the
benchmark model's shapes, the one-device mesh they run on, and an integer tokenizer.

Imported by those scripts (run from ``benchmarks/``, in the anchors venv); tunix and flax are
imported only when called."""

from __future__ import annotations

import jax
import numpy as np


class IntTokenizer:
    """Space-separated integer ids: the minimal tokenizer tunix's sampler accepts."""

    def encode(self, text, **_):
        return [int(t) for t in text.split()]

    def decode(self, ids, **_):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return 0  # falsy: tunix adds no BOS

    def eos_id(self):
        return -1

    def pad_id(self):
        return 0


def llama3_config(m: dict):
    """tunix's ``llama3.ModelConfig`` for the benchmark model ``m`` (agentjax ``ModelConfig``
    field names: tied embeddings, RoPE theta 10000, RMS-norm eps 1e-6, sampling sharding)."""
    from tunix.models.llama3 import model as tl

    return tl.ModelConfig(
        num_layers=m["n_layers"],
        vocab_size=m["vocab_size"],
        embed_dim=m["d_model"],
        hidden_dim=m["d_ff"],
        num_heads=m["n_heads"],
        head_dim=m["head_dim"],
        num_kv_heads=m["n_kv_heads"],
        rope_theta=10000,
        norm_eps=1e-6,
        weight_tying=True,
        shd_config=tl.ShardingConfig.get_default_sharding(is_sampling=True),
    )


def one_device_mesh():
    """The ``("fsdp", "tp")`` mesh of one device (Auto axes) tunix's models are built under."""
    from jax.sharding import AxisType, Mesh

    return Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
