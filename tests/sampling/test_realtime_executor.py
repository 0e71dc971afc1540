"""RealtimeExecutor's sampler thread, with fake workers: streaming and batch calls deliver each
round once; a failed call fails its open rounds, and three in a row fail the run."""

import threading

import pytest

from agentjax.sampling.clock import Failure
from agentjax.sampling.realtime import RealtimeExecutor


class Streaming:
    """Delivers each round as ``item * 10``; rounds listed in ``fail_on`` make the call raise
    after delivering the rounds before them."""

    streams = True

    def __init__(self, fail_on=(), gate=None):
        self.fail_on, self.gate = set(fail_on), gate

    def stream_rounds(self, take, deliver):
        if self.gate is not None:  # the test's submissions are all waiting when the call starts
            self.gate.wait()
        while batch := take():
            for ticket, item in batch:
                if item in self.fail_on:
                    raise ValueError(f"round {item} broke the engine")
                deliver(ticket, item * 10)


class Batch:
    streams = False

    def __init__(self, fail=False):
        self.fail = fail

    def run_rounds(self, items):
        if self.fail:
            raise ValueError("batch call broke")
        return [i * 10 for i in items]


def _drain(ex, n):
    return dict(ex.next() for _ in range(n))


@pytest.mark.parametrize("worker", [Streaming(), Batch()], ids=["streaming", "batch"])
def test_every_round_is_delivered_once(worker):
    ex = RealtimeExecutor()
    try:
        tickets = {ex.submit_round(worker, i): i for i in range(7)}
        got = _drain(ex, 7)
        assert got == {t: i * 10 for t, i in tickets.items()} and ex.pending() == 0
    finally:
        ex.close()


def test_a_failed_streaming_call_fails_its_open_rounds_and_three_in_a_row_fail_the_run():
    ex = RealtimeExecutor()
    gate = threading.Event()
    try:
        worker = Streaming(fail_on={2, 12, 22}, gate=gate)
        first = [ex.submit_round(worker, i) for i in (1, 2, 3)]  # 3 is taken with 2: it fails too
        gate.set()
        got = _drain(ex, 3)
        assert got[first[0]] == 10
        assert all(isinstance(got[t], Failure) for t in first[1:])
        assert "round 2 broke" in str(got[first[1]].error)
        ok = ex.submit_round(worker, 4)  # a good call resets the count
        assert _drain(ex, 1) == {ok: 40}
        for bad in (12, 22):
            t = ex.submit_round(worker, bad)
            res = _drain(ex, 1)[t]
            assert isinstance(res, Failure) and f"round {bad} broke" in str(res.error)
        ex.submit_round(worker, 2)  # the third failure in a row: the run fails, loudly
        with pytest.raises(RuntimeError, match="3 rollout calls failed in a row"):
            ex.next()
    finally:
        ex.close()


def test_three_failed_batch_calls_in_a_row_fail_the_run():
    ex = RealtimeExecutor()
    try:
        worker = Batch(fail=True)
        for _ in range(2):
            t = ex.submit_round(worker, 1)
            assert isinstance(_drain(ex, 1)[t], Failure)
        ex.submit_round(worker, 1)
        with pytest.raises(RuntimeError, match="3 rollout calls failed in a row"):
            ex.next()
    finally:
        ex.close()
