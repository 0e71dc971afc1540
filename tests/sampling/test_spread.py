"""The multi-process real-time executor, with processes as threads over an in-memory key-value store.

Two (or three) schedulers, each with its own :class:`SpreadExecutor`, run the same long-tailed
workload on the real clock; process 0 orders the deliveries. They must take the same decisions
(same batches, same final parameters, same delivery order), sample each round once, keep every
GRPO group on one process, give a slower process fewer rounds, and put only metadata into the
store.
"""

import dataclasses
import pickle
import re
import threading
import time

import numpy as np
import pytest

from agentjax.sampling import scheduler as sch
from agentjax.sampling import staleness as stl
from agentjax.sampling.clock import Failure
from agentjax.sampling.simulated import SimulatedWorker, long_tailed_workload
from agentjax.sampling.spread import SpreadExecutor
from agentjax.sharding import exchange
from agentjax.sharding.exchange import Channel, PeerError
from agentjax.trajectory import TrajectoryMeta


class Store:
    """The coordination service's key-value store and liveness, in memory."""

    def __init__(self):
        self.kv, self.cv, self.dead = {}, threading.Condition(), set()

    def key_value_set_bytes(self, key, blob, allow_overwrite=False):
        with self.cv:
            if key in self.kv and not allow_overwrite:
                raise RuntimeError(f"ALREADY_EXISTS: {key}")
            self.kv[key] = blob
            self.cv.notify_all()

    def key_value_try_get_bytes(self, key):
        with self.cv:
            if key not in self.kv:
                raise KeyError(f"NOT_FOUND: {key}")
            return self.kv[key]

    def blocking_key_value_get_bytes(self, key, ms):
        with self.cv:
            if not self.cv.wait_for(lambda: key in self.kv, ms / 1000):
                raise TimeoutError(f"DEADLINE_EXCEEDED: {key}")
            return self.kv[key]

    def get_live_nodes(self, ids):  # the service's is a barrier: a waiting process must not ask
        raise AssertionError("get_live_nodes returns only once every live process has called it")


class Worker:
    """Runs simulated rounds with real latency (``scale`` seconds per simulated second)."""

    streams = False

    def __init__(self, scale):
        self.sim, self.ran = SimulatedWorker(sleep_scale=scale), []

    def run_rounds(self, items):
        out = []
        for it in items:
            r = self.sim.run_round(it)
            self.ran.append(it.task.task_id)
            out.append(dataclasses.replace(r, state=None))
        return out


def learner(params, train):
    """Reads only what every process holds: the batch's metadata."""
    x = np.array(
        [c.trajectory.num_action_tokens * (1 + (c.trajectory.final_reward or 0)) for c in train.batch]
    )
    return params * 0.5 + np.sin(x * np.arange(1, x.size + 1)).sum()


def _groups(tasks, size):
    """GRPO groups: each task ``size`` times (same task id), each member its own seed."""
    for t in tasks:
        for k in range(size):
            yield dataclasses.replace(t, seed=t.seed + k)


def _run_processes(monkeypatch, scales, steps=6):
    store = Store()
    monkeypatch.setattr(exchange, "_client", lambda: store)
    n, out = len(scales), {}

    def process(p):
        ex = SpreadExecutor(Channel(p, n).start())
        worker = Worker(scales[p])
        try:
            log = sch.run(
                _groups(long_tailed_workload(0, infra_fault_rate=0.05), 2),
                worker,
                learner,
                np.zeros(3),
                config=sch.SchedulerConfig(
                    mode="windowed_fifo", window=8, num_slots=8, learner_step_time=1.0
                ),
                staleness_config=stl.StalenessConfig(max_version_gap=2),
                batch_size=8,
                num_steps=steps,
                executor=ex,
            )
            out[p] = (log, ex, worker)
        except Exception as e:  # noqa: BLE001 - reported by the test
            out[p] = e
        finally:
            ex.close()
            ex.ch.close()

    threads = [threading.Thread(target=process, args=(p,)) for p in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return store, out


@pytest.mark.parametrize(
    "scales", [(2e-4, 2e-4), (1e-4, 6e-4), (3e-4, 1e-4, 2e-4)], ids=["even", "slow1", "three"]
)
def test_every_process_takes_the_same_decisions_and_only_metadata_crosses(monkeypatch, scales):
    store, out = _run_processes(monkeypatch, scales)
    assert all(not isinstance(v, Exception) for v in out.values()), out
    logs = [out[p][0] for p in range(len(scales))]
    execs = [out[p][1] for p in range(len(scales))]
    batches = [[[c.index for c in b] for b in log.batches] for log in logs]
    assert len(batches[0]) == 6 and all(b == batches[0] for b in batches)
    assert all(np.array_equal(log.params, logs[0].params) for log in logs)
    assert all(ex.delivered == execs[0].delivered for ex in execs)
    ran = [out[p][2].ran for p in range(len(scales))]
    for a in range(len(ran)):  # a group (task id, retries included) is sampled on one process
        for b in range(a + 1, len(ran)):
            assert not set(ran[a]) & set(ran[b])
    # each process ran only rounds given to it (those cancelled at shutdown may never start)
    assert all(0 < len(ran[p]) <= execs[0].assigned[p] for p in range(len(ran)))
    if scales[1] > 3 * scales[0]:  # the slower process was given fewer rounds
        assert execs[0].assigned[1] < execs[0].assigned[0]
    for key, blob in store.kv.items():  # the store holds metadata and tickets, never tokens
        msg = pickle.loads(blob)
        if "/done/" in key:
            ticket, res = msg
            assert isinstance(res, Failure) or (
                isinstance(res.trajectory, TrajectoryMeta) and res.trajectory.turns == []
            )
        elif "/alive/" in key:
            assert isinstance(msg, int)  # a heartbeat's counter
        else:
            assert "/order/" in key and isinstance(msg, tuple) and len(msg) == 2


def _raised(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the test checks which
        return e


def test_a_peer_whose_heartbeat_stops_stops_a_waiting_process(monkeypatch):
    store = Store()
    monkeypatch.setattr(exchange, "_client", lambda: store)
    peer, me = Channel(0, 2, beat_s=0.05).start(), Channel(1, 2, timeout_s=0.5)
    t0 = time.monotonic()
    threading.Timer(1.5, lambda: peer.post("order", (7, 1.0))).start()
    assert me.read("order", 0, "delivery 0") == (7, 1.0)  # silent for 3 x timeout_s, but beating
    assert time.monotonic() - t0 > 1.4
    peer.close()  # stops beating: dead within timeout_s (+ a read's 1 s poll)
    got = []
    reader = threading.Thread(
        target=lambda: got.append(_raised(me.read, "order", 0, "delivery 1")), daemon=True
    )
    reader.start()
    reader.join(timeout=5)
    assert got and isinstance(got[0], PeerError), got  # not still waiting
    assert re.search(r"process 0 of 2 stopped .*no heartbeat for 0 s", str(got[0]))
    with pytest.raises(PeerError, match="process 0 of 2 stopped"):
        me.check_alive()


def test_a_waiting_process_never_waits_for_the_others_attention(monkeypatch):
    """A process that waits for a message while every other process is busy elsewhere (process 0
    in a checkpoint's collective, say) still reads it: liveness asks nothing of the others (the
    coordination service's get_live_nodes is a barrier, which hung such a run)."""
    store = Store()
    monkeypatch.setattr(exchange, "_client", lambda: store)
    leader, follower = Channel(0, 2, beat_s=0.05).start(), Channel(1, 2, timeout_s=5)
    threading.Timer(2.5, lambda: leader.post("order", (3, 0.5))).start()
    assert follower.read("order", 0, "delivery 0") == (3, 0.5)
    leader.close()
