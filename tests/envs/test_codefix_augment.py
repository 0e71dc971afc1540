"""agentjax.envs.codefix.augment.rename: a demonstration renamed consistently, never inconsistently."""

import random

from agentjax.envs.codefix.augment import rename

SOURCE = (
    "def count_in_range(xs, lo, hi):\n    n = 0\n    for x in xs:\n        if x >= lo:\n            n -= 1\n"
    "    return n"
)
PAIRS = [
    ("Task t: count_in_range(xs, lo, hi) counts x with lo <= x. Fix the bug in bands/\n./bands/core.py",
     "read bands/core.py"),
    (SOURCE, "edit bands/core.py n -= 1\nn += 1"),
    ("edited bands/core.py", "submit"),
]  # fmt: skip


def test_rename_is_consistent_and_keeps_protocol_words():
    out = rename(PAIRS, random.Random(0))
    (o0, a0), (o1, a1), (o2, a2) = out
    pkg = a0.split()[1].split("/")[0]
    assert pkg != "bands" and "bands" not in "".join(o0 + a0 + o1 + a1 + o2)
    assert a0 == f"read {pkg}/core.py" and f"./{pkg}/core.py" in o0 and a2 == "submit"
    head, new = a1.split("\n")
    old = head.split(" ", 2)[2]
    assert head.startswith(f"edit {pkg}/core.py ") and old in o1 and old != "n -= 1"  # copyable
    assert new.replace("+=", "-=") == old  # the fix is the same fix on the renamed line
    for word in ("def", "for", "in", "if", "return"):
        assert f"{word} " in o1
    assert "count_in_range" in o1  # not in an action: not renamed


def test_rename_is_seeded_and_varies():
    assert rename(PAIRS, random.Random(3)) == rename(PAIRS, random.Random(3))
    assert len({rename(PAIRS, random.Random(s))[0][1] for s in range(8)}) == 8
    assert rename([], random.Random(0)) == []


def test_codefix_rename_kwarg_is_checked():
    import pytest

    from agentjax.policy.config import ConfigError
    from agentjax.tasks.codefix import _check_kwargs

    class Run:  # only what the check reads
        class codefix:  # noqa: N801
            tasks = ()

        class task:  # noqa: N801
            eval_tasks = 8

    _check_kwargs(Run, 16, None, 4, rename=3)
    with pytest.raises(ConfigError, match="task.kwargs.rename"):
        _check_kwargs(Run, 16, None, 4, rename=-1)
