"""Splitting host work over processes and exchanging its results (multi-process runs).

Every process runs the same deterministic program (the virtual-clock scheduler), so every process
asks for the same work in the same order. :meth:`Exchange.split` runs only this process's share
of a call's items (item ``i`` belongs to process ``i % count``: rounds of one call interleave over
processes, so a long-tailed group is spread out) and all-gathers the results, so every process
returns the same list, in the same order, as one process running all of it. Nothing is computed
twice and, since an episode's tokens depend only on its own seed (exact mode), the union equals
the one-process run.

Results travel as pickled bytes through the key-value store of ``jax.distributed``'s coordination
service (the same service that ``jax.distributed.initialize`` starts on process 0), one key per
call and process. A peer that sends nothing within ``timeout_s`` (killed, hung, out of memory)
fails the run with :class:`PeerError` naming it, instead of hanging.

:class:`Channel` is the control plane of a multi-process real-time run: ordered streams of small
messages (a finished round's metadata, the decision maker's delivery order), one per process,
through the same store. Both count the bytes they put into and read from the store
(:class:`Wire`), so a test and ``benchmarks/multihost.py`` can check that no trajectory crosses
it.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax


class PeerError(RuntimeError):
    """Another process of the run sent nothing in time: the run stops (``--resume`` continues)."""


def _client():
    from jax._src import distributed  # noqa: PLC0415 - jax's coordination-service client

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("Exchange needs jax.distributed.initialize() (multi-process runs only)")
    return client


@dataclasses.dataclass
class Wire:
    """Bytes this process put into the key-value store and read from it (thread-safe)."""

    sent: int = 0
    read: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def put(self, client, key: str, obj, overwrite: bool = False) -> None:
        blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if overwrite:
            client.key_value_set_bytes(key, blob, allow_overwrite=True)
        else:
            client.key_value_set_bytes(key, blob)
        with self._lock:
            self.sent += len(blob)

    def got(self, blob: bytes):
        with self._lock:
            self.read += len(blob)
        return pickle.loads(blob)

    def report(self) -> dict:
        return {"sent": self.sent, "read": self.read}


def _peer_error(p: int, count: int, what: str, timeout_s: float, e: Exception | None = None) -> PeerError:
    why = "" if e is None else f" ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]})"
    return PeerError(
        f"process {p} of {count} sent nothing for {what} within {timeout_s:.0f} s "
        f"(placement.peer_timeout_s): it was killed, crashed or hangs; the run stops here, "
        f"--resume continues from the last checkpoint{why}"
    )


@dataclasses.dataclass
class Exchange:
    """This process's view of the run's processes; ``calls`` counts exchanges (the same on every
    process, since every process makes the same calls)."""

    process: int
    count: int
    timeout_s: float = 300.0
    namespace: str = "agentjax"
    calls: int = 0
    items: int = 0  # items of every split so far (the same on every process)
    ran: int = 0  # of which this process ran
    wire: Wire = dataclasses.field(default_factory=Wire)

    @classmethod
    def of_jax(cls, timeout_s: float = 300.0) -> Exchange:
        return cls(jax.process_index(), jax.process_count(), timeout_s)

    def share(self, n: int) -> list[int]:
        """The positions among ``n`` items that this process runs."""
        return list(range(self.process, n, self.count))

    def split(self, items: Sequence[Any], run: Callable[[list[Any]], list[Any]]) -> list[Any]:
        """``run(items)`` computed over all processes: this one runs its share, every process
        gets every result, in ``items``' order."""
        mine = self.share(len(items))
        got = run([items[i] for i in mine]) if mine else []
        self.items, self.ran = self.items + len(items), self.ran + len(mine)
        out: list[Any] = [None] * len(items)
        for part in self.allgather(list(zip(mine, got, strict=True))):
            for i, result in part:
                out[i] = result
        return out

    def allgather(self, obj) -> list[Any]:
        """``obj`` from every process, by process index."""
        client, n = _client(), self.calls
        key = lambda p, k=n: f"{self.namespace}/exchange/{k}/{p}"  # noqa: E731
        self.wire.put(client, key(self.process), obj)
        out = []
        for p in range(self.count):
            if p == self.process:
                out.append(obj)
                continue
            try:
                blob = client.blocking_key_value_get_bytes(key(p), int(self.timeout_s * 1000))
            except Exception as e:  # DEADLINE_EXCEEDED, or the coordination service is gone
                raise _peer_error(p, self.count, f"exchange {n}", self.timeout_s, e) from None
            out.append(self.wire.got(blob))
        if n:  # every peer has posted exchange n, so it has read all of n-1: drop my n-1
            client.key_value_delete(key(self.process, n - 1))
        self.calls += 1
        return out

    def report(self) -> dict:
        """How the work was split: items in all, how many each process ran, and the bytes each
        put into the key-value store (this exchange's and the channel's sharing its
        :class:`Wire`) (collective)."""
        got = self.allgather((self.ran, self.wire.report()))  # the bytes before this call's own
        return {
            "count": self.count,
            "items": self.items,
            "ran": [r for r, _ in got],
            "kv_bytes_sent": [w["sent"] for _, w in got],  # through the coordinator's store
        }


@dataclasses.dataclass
class Channel:
    """Ordered message streams through the key-value store, one per (name, process): ``post``
    appends to this process's stream, ``poll`` / ``read`` take the next message of any process's
    stream (each reader keeps its own position). Messages are never deleted while the run lives
    (they are small: control, not data); the store goes with the coordinator at the run's end.

    Liveness is a heartbeat, not the coordination service's ``get_live_nodes``: that call is a
    barrier (it returns once every live process has called it), so a process that asked while the
    others were busy elsewhere (a checkpoint's collective) waited for them forever. Between
    :meth:`start` and :meth:`close` a thread overwrites this process's ``alive`` key with a
    counter every ``beat_s``; a peer whose counter has not moved for ``timeout_s``
    (``placement.peer_timeout_s``) is dead."""

    process: int
    count: int
    namespace: str = "agentjax/rt"
    wire: Wire = dataclasses.field(default_factory=Wire)
    timeout_s: float = 300.0
    beat_s: float = 1.0
    _sent: dict = dataclasses.field(default_factory=dict)  # name -> messages posted
    _pos: dict = dataclasses.field(default_factory=dict)  # (name, process) -> messages read
    _seen: dict = dataclasses.field(default_factory=dict)  # peer -> (its last beat, when it moved)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)
    _beats: threading.Thread | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def of_jax(cls, wire: Wire | None = None, timeout_s: float = 300.0) -> Channel:
        return cls(jax.process_index(), jax.process_count(), wire=wire or Wire(), timeout_s=timeout_s)

    def start(self) -> Channel:
        """Starts this process's heartbeat (a daemon thread); returns the channel."""
        if self._beats is None:
            self._stop.clear()
            self._beats = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._beats.start()
        return self

    def close(self) -> None:
        """Stops the heartbeat (peers that wait on this process will see it stop)."""
        if self._beats is not None:
            self._stop.set()
            self._beats.join()
            self._beats = None

    def _beat(self) -> None:
        k = 0
        while True:
            try:
                self.wire.put(_client(), self._alive(self.process), k, overwrite=True)
            except Exception:  # noqa: BLE001 - the coordinator is gone: the readers see it themselves
                return
            k += 1
            if self._stop.wait(self.beat_s):
                return

    def _alive(self, p: int) -> str:
        return f"{self.namespace}/alive/{p}"

    def _key(self, name: str, p: int, n: int) -> str:
        return f"{self.namespace}/{name}/{p}/{n}"

    def post(self, name: str, obj) -> None:
        with self._lock:  # several threads post (the sampler's deliveries, the decision maker)
            n = self._sent.get(name, 0)
            self._sent[name] = n + 1
            self.wire.put(_client(), self._key(name, self.process, n), obj)

    def poll(self, name: str, p: int):
        """The next message of process ``p``'s stream ``name``, or None if it has not come yet."""
        n = self._pos.get((name, p), 0)
        try:
            blob = _client().key_value_try_get_bytes(self._key(name, p, n))
        except Exception:  # noqa: BLE001 - NOT_FOUND: not posted yet
            return None
        self._pos[(name, p)] = n + 1
        return self.wire.got(blob)

    def read(self, name: str, p: int, what: str):
        """The next message of process ``p``'s stream, however long it takes (a delivery waits
        for an episode to end), as long as every process's heartbeat moves: a dead one (or the
        coordination service gone) is :class:`PeerError`."""
        n, client = self._pos.get((name, p), 0), _client()
        while True:
            try:
                blob = client.blocking_key_value_get_bytes(self._key(name, p, n), 1000)
                break
            except Exception as e:  # noqa: BLE001 - DEADLINE_EXCEEDED: not yet; else the service is gone
                dead = self.dead()
                if dead or "DEADLINE_EXCEEDED" not in str(e):
                    raise PeerError(
                        f"process {dead[0] if dead else p} of {self.count} stopped while this one "
                        f"waited for {what} (no heartbeat for {self.timeout_s:.0f} s, "
                        f"placement.peer_timeout_s, or the coordination service is gone): the run "
                        f"stops here, --resume continues from the last checkpoint "
                        f"({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]})"
                    ) from None
        self._pos[(name, p)] = n + 1
        return self.wire.got(blob)

    def check_alive(self) -> None:
        """:class:`PeerError` when a process of the run has stopped."""
        dead = self.dead()
        if dead:
            raise PeerError(
                f"process {dead[0]} of {self.count} stopped (no heartbeat for {self.timeout_s:.0f} s, "
                "placement.peer_timeout_s): the run stops here, --resume continues from the last checkpoint"
            )

    def dead(self) -> list[int]:
        """The peers whose heartbeat has not moved for ``timeout_s`` (every peer when the
        coordination service itself is gone). Never waits for another process."""
        now, out = time.monotonic(), []
        for p in range(self.count):
            if p == self.process:
                continue
            try:
                beat = _client().key_value_try_get_bytes(self._alive(p))
            except Exception as e:  # noqa: BLE001 - NOT_FOUND: no beat yet; else the service is gone
                if "NOT_FOUND" not in str(e):
                    return [q for q in range(self.count) if q != self.process]
                beat = None
            last = self._seen.get(p)
            if last is None or last[0] != beat:
                self._seen[p] = (beat, now)
            elif now - last[1] > self.timeout_s:
                out.append(p)
        return out
