"""copy_rows: every trained token is a copy of the context found by content (randomised shapes)."""

import numpy as np
import pytest

from agentjax.learner.copy_rows import copy_rows

SEP = 1


@pytest.mark.parametrize("seed", range(6))
def test_each_trained_token_continues_a_span_copied_from_the_context(seed):
    rng = np.random.default_rng(seed)
    length = int(rng.integers(40, 200))
    lo = int(rng.integers(2, 24))
    context, span = (lo, lo + int(rng.integers(0, 16))), (2, int(rng.integers(2, 12)))
    texts = [list(rng.integers(10, 50, size=int(rng.integers(1, 80)))) for _ in range(5)]
    rows = copy_rows(rng, 16, length, range(100, 400), SEP, texts, context=context, span=span)
    assert rows["tokens"].shape == rows["loss_mask"].shape == rows["positions"].shape == (16, length)
    assert (rows["positions"] == np.arange(length)).all()
    for tok, mask in zip(rows["tokens"], rows["loss_mask"], strict=True):
        c = int(np.argmax(tok == SEP))  # the context ends at the first separator
        assert context[0] <= c <= context[1] or c in {len(t) for t in texts}
        ctx = list(tok[:c])
        seps = [int(i) for i in np.flatnonzero(tok == SEP) if i >= c]
        assert mask[: c + 1].sum() == 0 and mask[seps].sum() == 0
        assert seps, "every row has a span"
        for a, b in zip(seps, [*seps[1:], length], strict=True):
            s = list(tok[a + 1 : b])
            if not s:
                continue  # the row's padding tail
            starts = [o for o in range(c - len(s) + 1) if ctx[o : o + len(s)] == s]
            assert starts, "a span is a slice of the context"
            assert mask[a + 1] == 0 and (mask[a + 2 : b] == 1).all()  # its first token is not trained
    assert rows["loss_mask"].sum() > 0


def test_random_contexts_draw_from_the_given_ids_only():
    rows = copy_rows(np.random.default_rng(0), 32, 64, [7, 8, 9], SEP, context=(8, 16), span=(4, 8))
    assert set(np.unique(rows["tokens"])) <= {SEP, 7, 8, 9}


def test_shapes_that_cannot_fit_are_refused():
    with pytest.raises(ValueError, match="do not fit"):
        copy_rows(np.random.default_rng(0), 1, 20, [5], SEP, context=(24, 32))
    with pytest.raises(ValueError, match="context"):
        copy_rows(np.random.default_rng(0), 1, 64, [5], SEP, context=(1, 4))
