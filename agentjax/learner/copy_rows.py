"""Copy-by-content rows: the pretraining that gives a tiny random-init model an induction head.

A code agent's edit must copy a line of the file it read, found by content at an offset no
position rule predicts. ``benchmarks/induction_probe.py`` measured that the 2 x 64 codefix model
learns that from scratch in ~400 steps when every row is dense with copies (24 copied tokens per
57, Adam 1e-3: accuracy 0.98 at step 500, any of 2,048 token ids), and not at all in 2,000-4,000
steps when copies are sparse (16 per 145 tokens). Each row here is::

    context (random token ids, or a tokenized code text)  SEP  span  SEP  span  ...

where every span repeats the context from a random offset; the loss is on each span's tokens after
its first (the first says where the span starts, which nothing predicts). Rows are in
:func:`agentjax.learner.sft.sft_train`'s format (``tokens``, ``positions``, ``loss_mask``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def copy_rows(
    rng: np.random.Generator,
    n: int,
    length: int,
    ids: Sequence[int],
    sep: int,
    texts: Sequence[Sequence[int]] = (),
    *,
    context: tuple[int, int] = (24, 96),
    span: tuple[int, int] = (8, 24),
) -> dict[str, np.ndarray]:
    """``n`` rows of ``length`` tokens; half of the contexts are slices of ``texts`` when given.

    Args:
      ids: the token ids random contexts draw from (the tokenizer's ordinary tokens).
      sep: the separator id before every span.
      texts: tokenized code; a context is a random slice of one of them.
      context, span: inclusive ranges of the context and span lengths (spans are cut to the
        context and to the row).
    """
    lo, hi = context
    if not 2 <= lo <= hi or span[0] < 2 or length < hi + span[0] + 1:
        raise ValueError(f"copy_rows: context={context} span={span} do not fit length={length}")
    pool = np.asarray(ids, np.int32)
    long = [np.asarray(t, np.int32) for t in texts if len(t) >= lo]
    tok = np.zeros((n, length), np.int32)
    mask = np.zeros((n, length), np.float32)
    for i in range(n):
        c = int(rng.integers(lo, hi + 1))
        if long and rng.random() < 0.5:
            t = long[int(rng.integers(len(long)))]
            c = min(c, len(t))
            a = int(rng.integers(len(t) - c + 1))
            ctx = t[a : a + c]
        else:
            ctx = pool[rng.integers(len(pool), size=c)]
        tok[i, :c], k = ctx, c
        while k + 1 + span[0] <= length:
            s = min(int(rng.integers(span[0], span[1] + 1)), c, length - k - 1)
            o = int(rng.integers(c - s + 1))
            tok[i, k] = sep
            tok[i, k + 1 : k + 1 + s] = ctx[o : o + s]
            mask[i, k + 2 : k + 1 + s] = 1.0
            k += 1 + s
        tok[i, k:] = sep
    pos = np.broadcast_to(np.arange(length, dtype=np.int32), (n, length)).copy()
    return {"tokens": tok, "positions": pos, "loss_mask": mask}
