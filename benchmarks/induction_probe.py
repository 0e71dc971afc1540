"""Can the codefix model sizes learn to copy by content on this CPU, and how fast? (#30)

    python benchmarks/induction_probe.py --d_model=64 --layers=2 --context=128 --segment=16 --steps=2000
    python benchmarks/induction_probe.py --context=32 --segment=24 --batch=64 --lr=1e-3 --steps=700  # learns

A Qwen3-style model (``agentjax.policy.model.forward``, random init, 2,048-token vocabulary) is
trained on: ``context`` random tokens, a separator, then a ``segment`` copied from a random
offset of the context; loss and greedy accuracy on the segment's tokens 2..S, which can only be
found by content (an induction head), as the codefix ``edit`` action must copy a line of the
file it read. ``--fixed_offset`` copies the whole context right after the separator instead
(learnable by a positional head). Prints loss, accuracy and seconds every 100 steps.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from absl import app, flags  # noqa: E402

from agentjax.policy.config import ModelConfig  # noqa: E402
from agentjax.policy.model import forward  # noqa: E402
from agentjax.policy.params import init_params  # noqa: E402

_D = flags.DEFINE_integer("d_model", 64, "model width")
_LAYERS = flags.DEFINE_integer("layers", 2, "layers")
_CONTEXT = flags.DEFINE_integer("context", 128, "random context tokens")
_SEGMENT = flags.DEFINE_integer("segment", 16, "copied tokens")
_STEPS = flags.DEFINE_integer("steps", 2000, "optimizer steps")
_BATCH = flags.DEFINE_integer("batch", 32, "sequences per step")
_LR = flags.DEFINE_float("lr", 3e-3, "AdamW learning rate")
_FIXED = flags.DEFINE_bool("fixed_offset", False, "copy the whole context right after the separator")
_QKN = flags.DEFINE_bool("qk_norm", True, "Qwen3's RMSNorm on queries and keys")
_DRAW = flags.DEFINE_integer("draw", 2048, "context tokens are drawn from ids 3..draw-1 (<= 2,048)")
VOCAB, SEP = 2048, 1


def batch(rng, b: int, c: int, s: int, fixed: bool, draw: int = VOCAB) -> np.ndarray:
    x = rng.integers(3, draw, (b, c))
    off = np.zeros(b, int) if fixed else rng.integers(0, c - s + 1, b)
    seg = np.stack([x[i, o : o + s] for i, o in enumerate(off)])
    return np.concatenate([x, np.full((b, 1), SEP), seg], 1).astype(np.int32)


def main(argv):
    del argv
    c, s = _CONTEXT.value, _CONTEXT.value if _FIXED.value else _SEGMENT.value
    t = c + 1 + s
    cfg = ModelConfig(
        vocab_size=VOCAB,
        d_model=_D.value,
        n_layers=_LAYERS.value,
        n_heads=4,
        n_kv_heads=2,
        head_dim=max(16, _D.value // 4),
        d_ff=4 * _D.value,
        max_seq_len=t,
        qk_norm=_QKN.value,
    )
    opt = optax.adamw(_LR.value)
    params = init_params(cfg, jax.random.key(0))
    state = opt.init(params)
    pos = jnp.broadcast_to(jnp.arange(t), (_BATCH.value, t))

    def loss_fn(p, toks):
        lp = jax.nn.log_softmax(forward(p, toks, pos, config=cfg)[0][:, c + 1 : -1].astype(jnp.float32))
        tgt = toks[:, c + 2 :]
        ll = jnp.take_along_axis(lp, tgt[..., None], -1)[..., 0]
        return -ll.mean(), (lp.argmax(-1) == tgt).mean()

    @jax.jit
    def step(p, st, toks):
        (loss, acc), g = jax.value_and_grad(loss_fn, has_aux=True)(p, toks)
        u, st = opt.update(g, st, p)
        return optax.apply_updates(p, u), st, loss, acc

    rng, start = np.random.default_rng(0), time.perf_counter()
    for i in range(_STEPS.value):
        toks = jnp.asarray(batch(rng, _BATCH.value, c, s, _FIXED.value, _DRAW.value))
        params, state, loss, acc = step(params, state, toks)
        if i % 100 == 0 or i == _STEPS.value - 1:
            print(f"step {i} loss {float(loss):.3f} acc {float(acc):.3f} {time.perf_counter() - start:.0f}s")


if __name__ == "__main__":
    app.run(main)
