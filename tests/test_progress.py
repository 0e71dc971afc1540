"""The progress line's pace: ETA from this process's own steps (a resumed run's earlier steps
took their time in another process)."""

import pytest

from agentjax.run.summary import _clock, eta_s


@pytest.mark.parametrize(
    ("step", "start", "total", "elapsed", "want"),
    [
        (1, 0, 10, 2.0, 18.0),  # 2 s a step, 9 left
        (10, 0, 10, 30.0, 0.0),  # the last step: nothing left
        (12, 10, 20, 4.0, 16.0),  # resumed at 10: the pace of steps 11-12 only
        (5, 5, 9, 3.0, None),  # no step yet in this process: no pace
    ],
)
def test_eta_is_the_remaining_steps_at_this_processs_pace(step, start, total, elapsed, want):
    assert eta_s(step, start, total, elapsed) == want


def test_clock_reads_minutes_and_hours():
    assert [_clock(x) for x in (None, 0.4, 59.6, 61, 3600, 7325)] == [
        "?",
        "0m00s",
        "1m00s",
        "1m01s",
        "1h00m",
        "2h02m",
    ]
