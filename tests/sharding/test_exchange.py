"""Exchange.split over simulated processes (threads sharing an in-memory key-value store in place of
jax.distributed's coordination service): every process gets every result in order, each item runs
on exactly one process, a silent peer fails the call with PeerError naming it, and keys do not
pile up in the store."""

import dataclasses
import json
import pickle
import random
import threading

import pytest

from agentjax.sharding import exchange
from agentjax.sharding.exchange import Exchange, PeerError


class FakeStore:
    """The three calls of jax's DistributedRuntimeClient that Exchange uses."""

    def __init__(self):
        self.data, self.cond = {}, threading.Condition()

    def key_value_set_bytes(self, key, value):
        with self.cond:
            assert key not in self.data, f"{key} written twice"
            self.data[key] = value
            self.cond.notify_all()

    def blocking_key_value_get_bytes(self, key, timeout_ms):
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.data, timeout_ms / 1000):
                raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
            return self.data[key]

    def key_value_delete(self, key):
        with self.cond:
            del self.data[key]


def _processes(monkeypatch, count, body, timeout_s=10.0):
    store = FakeStore()
    monkeypatch.setattr(exchange, "_client", lambda: store)
    out, errors = [None] * count, []

    def run(p):
        try:
            out[p] = body(Exchange(p, count, timeout_s))
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append((p, e))

    threads = [threading.Thread(target=run, args=(p,)) for p in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out, errors, store


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_split_gives_every_process_every_result_in_order_each_item_run_once(monkeypatch, count):
    sizes = [random.Random(count * 100 + k).randint(0, 9) for k in range(6)]  # 0 and < count too
    ran = [[] for _ in range(count)]

    def body(ex):
        results = []
        for k, n in enumerate(sizes):
            items = [(k, i) for i in range(n)]

            def work(mine, ex=ex):
                ran[ex.process].extend(mine)
                return [f"{a}:{b}" for a, b in mine]

            results.append(ex.split(items, work))
        return results, ex.report()

    out, errors, store = _processes(monkeypatch, count, body)
    assert not errors
    want = [[f"{k}:{i}" for i in range(n)] for k, n in enumerate(sizes)]
    for results, _ in out:
        assert results == want
    every = [x for r in ran for x in r]
    assert sorted(every) == sorted((k, i) for k, n in enumerate(sizes) for i in range(n))  # once each
    report = out[0][1]
    assert {k: report[k] for k in ("count", "items", "ran")} == {
        "count": count,
        "items": sum(sizes),
        "ran": [len(r) for r in ran],
    }
    assert len(report["kv_bytes_sent"]) == count and min(report["kv_bytes_sent"]) > 0  # counted
    assert len(store.data) <= count  # only the last exchange's keys remain


def test_a_silent_peer_fails_the_call_naming_it(monkeypatch):
    def body(ex):
        if ex.process == 1:
            return None  # process 1 "dies" before its first exchange
        return ex.split([1, 2, 3], lambda mine: mine)

    _, errors, _ = _processes(monkeypatch, 2, body, timeout_s=0.3)
    assert len(errors) == 1
    p, e = errors[0]
    assert p == 0 and isinstance(e, PeerError)
    assert "process 1 of 2 sent nothing for exchange 0" in str(e) and "--resume" in str(e)


class InTurn:
    """An Exchange stand-in: every process's share run here in turn, results through pickle."""

    def __init__(self, count):
        self.count, self.items = count, 0

    def split(self, items, run):
        self.items += len(items)
        out = [None] * len(items)
        for p in range(self.count):
            mine = list(range(p, len(items), self.count))
            for i, r in zip(mine, pickle.loads(pickle.dumps(run([items[i] for i in mine]))), strict=True):
                out[i] = r
        return out

    def allgather(self, obj):
        return [pickle.loads(pickle.dumps(obj))]  # every share ran here: one process's view


@pytest.mark.parametrize("count", [2, 3])
def test_heldout_evaluation_split_over_processes_equals_one_process(tmp_path, count):
    import jax

    from agentjax.policy.model import init_params
    from agentjax.run import config as runconfig
    from agentjax.run.build import build, compose, evaluate_heldout
    from tests.runs import tiny_config

    parts = build(runconfig.parse(tiny_config("default")))
    c = compose(parts)
    params = init_params(parts.model, jax.random.key(0))
    whole = evaluate_heldout(c, params, 0)
    c = dataclasses.replace(c, exchange=InTurn(count))
    same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN == NaN
    assert same(evaluate_heldout(c, params, 0), whole)
    assert whole["eval/n"] == len(parts.heldout) == c.exchange.items  # all went through it
