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
"""

from __future__ import annotations

import dataclasses
import pickle
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
        client.key_value_set_bytes(key(self.process), pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        out = []
        for p in range(self.count):
            if p == self.process:
                out.append(obj)
                continue
            try:
                blob = client.blocking_key_value_get_bytes(key(p), int(self.timeout_s * 1000))
            except Exception as e:  # DEADLINE_EXCEEDED, or the coordination service is gone
                raise PeerError(
                    f"process {p} of {self.count} sent nothing for exchange {n} within "
                    f"{self.timeout_s:.0f} s (placement.peer_timeout_s): it was killed, crashed or "
                    f"hangs; the run stops here, --resume continues from the last checkpoint "
                    f"({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]})"
                ) from None
            out.append(pickle.loads(blob))
        if n:  # every peer has posted exchange n, so it has read all of n-1: drop my n-1
            client.key_value_delete(key(self.process, n - 1))
        self.calls += 1
        return out

    def report(self) -> dict:
        """How the work was split: items in all, and how many each process ran (collective)."""
        return {"count": self.count, "items": self.items, "ran": self.allgather(self.ran)}
