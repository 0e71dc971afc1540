"""The scheduler machine's rules of filling slots and forming learner batches.

Methods of one step's working state (:class:`Consumption`, a base of the machine's ``_Work``):
:func:`make <agentjax.sampling.machine.make>` picks the mode's fill (``fill_async`` or
``fill_sync``) and the gate's take rule (``next_take`` or ``next_take_groups``) once;
``maybe_train`` forms a batch and emits the ``Train`` command.
"""

from __future__ import annotations

import dataclasses

from agentjax.sampling import staleness as stl
from agentjax.sampling.runlog import Consumed
from agentjax.sampling.schedstate import Train, consumable
from agentjax.sampling.staleness import Admission, Kind, Terminal


class NeedTasks(Exception):  # noqa: N818 - control flow inside one step, never escapes it
    """The step needs ``count`` tasks it has not drawn: it ends its actions with ``Draw``."""

    def __init__(self, count: int):
        self.count = count


class Consumption:
    """The rules as methods of one step's working state (the machine's ``_Work`` inherits them:
    they change only that object's own fields)."""

    # -- filling slots (the mode's rule) -----------------------------------------------------
    def fill_async(self) -> None:
        while len(self.running) < self.cfg.num_slots:
            # A paused rollout waits for a newer version, unless nothing else can produce one.
            stalled = not self.running and not self.training
            ready = next((i for i, v in self.paused.items() if v < self.version or stalled), None)
            if ready is not None:
                del self.paused[ready]
                self.start_round(ready)
                continue
            if stl.capacity(self.st, self.spec.staleness, self.spec.batch_size) <= 0:
                return
            index = self.submit_new(self.cfg.num_slots - len(self.running))
            if index is None:
                return
            self.start_round(index)

    def fill_sync(self) -> None:
        if not self.round_open and not self.training:
            size = self.spec.batch_size - len(self.batch)  # dynamic sampling: what its drops left
            unit = self.gate.group_size
            size = -(-size // unit) * unit  # whole groups
            units = list(self.paused)[:size]
            short = size - len(units) - len(self.retry_queue) - len(self.offered)
            if short > 0 and not self.exhausted:
                raise NeedTasks(short)  # before anything changes: the round is drawn whole
            for i in units:
                del self.paused[i]
            while len(units) < size:
                index = self.submit_new(0)
                if index is None:
                    break
                units.append(index)
            self.round_queue, self.round_open = units, bool(units)
        while self.round_queue and len(self.running) < self.cfg.num_slots:
            self.start_round(self.round_queue.pop(0))

    # -- consuming ---------------------------------------------------------------------------
    def _take(self, index: int) -> None:
        del self.completed[index]
        rec, traj = self.records[index], self.traj[index]
        if traj.final_reward is None:  # infra fault: masked, never a silent zero
            self.event(Kind.MASK)
            again = None
            if self.spec.retry is not None:
                origin = self.retry_of.get(index, index)
                st, again = self.spec.retry(self.retry_states.get(origin), self.task[index], traj)
                self.retry_states[origin] = st
                if again is not None:
                    self.retry_queue.append((origin, again))
            self.resolve(index, Terminal.MASKED, traj.label or "no reward")
            if again is None:  # the member's last outcome (a retry would bring another)
                self.group_outcome(index)
            return
        rec = self.update(index, consume_version=self.version)
        scfg = self.spec.staleness
        info = stl.SampleInfo(
            version_gap=rec.version_gap,
            task_class=rec.task_class,
            drift=None if self.spec.drift is None else self.spec.drift(traj, self.version),
            queue_pressure=stl.queue_pressure(self.st, scfg),
        )
        decision = self.spec.admission(info, scfg)
        self.update(index, admission=decision.admission, weight=decision.weight)
        if decision.admission == Admission.REJECT:
            self.event(Kind.REJECT)
            return self.resolve(index, Terminal.REJECTED_STALE, decision.reason)
        self.batch.append(Consumed(index, traj, decision.weight, decision.admission))
        self.resolve_window(index)  # the window advances as its head is taken

    def maybe_train(self) -> None:
        if self.training:
            return
        if self.rules.barrier:
            if not self.round_open or self.running or self.round_queue:
                return
            self.round_open = False
        full = self._fill_batch()
        if len(self.batch) < self.spec.batch_size and not full:
            # sync trains the round it has (short when episodes were masked), unless dynamic
            # sampling dropped groups from it: then another round samples the missing ones
            if not self.rules.barrier or self.gate.dropped:
                return
        if self.batch:
            self._start_step()

    def _fill_batch(self) -> bool:
        """Takes completed trajectories into the batch; True when the next would not fit."""
        while len(self.batch) < self.spec.batch_size:
            index = self.rules.next_take(self)
            if index is None:
                return False
            if index < 0:
                return True
            self._take(index)
        return False

    def next_take(self) -> int | None:
        """The next completed trajectory to take (None: none is ready)."""
        cands = consumable(self.spec.mode, self.completed, self.head)
        return cands[0] if cands else None

    def next_take_groups(self) -> int | None:
        """As :func:`next_take`, with -1 when the batch is full. Under dynamic sampling a group
        is trained whole, in one batch (its advantages are computed over the members in the
        batch): the rest of a group the batch has started comes first, window or not, and a
        group that would not fit waits for the next batch."""
        cands = consumable(self.spec.mode, self.completed, self.head)
        started = {self.records[c.index].task_id for c in self.batch}
        rest = next((i for i in self.completed if self.records[i].task_id in started), None)
        if rest is not None:
            return rest
        members: dict[str, int] = {}
        for j in self.completed:
            if self.traj[j].final_reward is not None:
                tid = self.records[j].task_id
                members[tid] = members.get(tid, 0) + 1
        room = self.spec.batch_size - len(self.batch)
        fits = next((i for i in cands if members.get(self.records[i].task_id, 0) <= room), None)
        return fits if fits is not None else (-1 if cands else None)

    def _start_step(self) -> None:
        batch, self.batch = self.batch, []
        trained = []
        for c in batch:
            rec = self.update(c.index, terminal=Terminal.TRAINED, resolve_time=self.now)
            self.event(Kind.TRAIN, gen_gap=rec.gen_gap, queue_gap=rec.queue_gap)
            timings = {**c.trajectory.timings, "queue": self.now - rec.complete_time}
            trained.append(c._replace(trajectory=dataclasses.replace(c.trajectory, timings=timings)))
            self.log("trained", c.index)
            self.dead.append(c.index)
        self.out.append(Train(tuple(trained), self.now, self.gate.account()))
        self.training = True
