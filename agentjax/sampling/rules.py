"""The scheduler machine's rules of filling slots and forming learner batches.

Functions over one step's working state ``w`` (:class:`agentjax.sampling.machine._Work`):
:func:`make <agentjax.sampling.machine.make>` picks the mode's fill (:func:`fill_async` or
:func:`fill_sync`) and the gate's take rule (:func:`next_take` or :func:`next_take_groups`)
once; :func:`maybe_train` forms a batch and emits the ``Train`` command.
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


# -- filling slots (the mode's rule) ----------------------------------------------------------
def fill_async(w) -> None:
    while len(w.running) < w.cfg.num_slots:
        # A paused rollout waits for a newer version, unless nothing else can produce one.
        stalled = not w.running and not w.training
        ready = next((i for i, v in w.paused.items() if v < w.version or stalled), None)
        if ready is not None:
            del w.paused[ready]
            w.start_round(ready)
            continue
        if stl.capacity(w.st, w.spec.staleness, w.spec.batch_size) <= 0:
            return
        index = w.submit_new(w.cfg.num_slots - len(w.running))
        if index is None:
            return
        w.start_round(index)


def fill_sync(w) -> None:
    if not w.round_open and not w.training:
        size = w.spec.batch_size - len(w.batch)  # dynamic sampling: what its drops left
        unit = w.gate.group_size
        size = -(-size // unit) * unit  # whole groups
        units = list(w.paused)[:size]
        short = size - len(units) - len(w.retry_queue) - len(w.offered)
        if short > 0 and not w.exhausted:
            raise NeedTasks(short)  # before anything changes: the round is drawn whole
        for i in units:
            del w.paused[i]
        while len(units) < size:
            index = w.submit_new(0)
            if index is None:
                break
            units.append(index)
        w.round_queue, w.round_open = units, bool(units)
    while w.round_queue and len(w.running) < w.cfg.num_slots:
        w.start_round(w.round_queue.pop(0))


# -- consuming ---------------------------------------------------------------------------
def _take(w, index: int) -> None:
    del w.completed[index]
    rec, traj = w.rec(index), w.traj[index]
    if traj.final_reward is None:  # infra fault: masked, never a silent zero
        w.event(Kind.MASK)
        again = None
        if w.spec.retry is not None:
            origin = w.retry_of.get(index, index)
            st, again = w.spec.retry(w.retry_states.get(origin), w.task[index], traj)
            w.retry_states[origin] = st
            if again is not None:
                w.retry_queue.append((origin, again))
        w.resolve(index, Terminal.MASKED, traj.label or "no reward")
        if again is None:  # the member's last outcome (a retry would bring another)
            w.group_outcome(index)
        return
    rec.consume_version = w.version
    scfg = w.spec.staleness
    info = stl.SampleInfo(
        version_gap=rec.version_gap,
        task_class=rec.task_class,
        drift=None if w.spec.drift is None else w.spec.drift(traj, w.version),
        queue_pressure=stl.queue_pressure(w.st, scfg),
    )
    decision = w.spec.admission(info, scfg)
    rec.admission, rec.weight = decision.admission, decision.weight
    if decision.admission == Admission.REJECT:
        w.event(Kind.REJECT)
        return w.resolve(index, Terminal.REJECTED_STALE, decision.reason)
    w.batch.append(Consumed(index, traj, decision.weight, decision.admission))
    w.resolve_window(index)  # the window advances as its head is taken


def maybe_train(w) -> None:
    if w.training:
        return
    if w.rules.barrier:
        if not w.round_open or w.running or w.round_queue:
            return
        w.round_open = False
    full = _fill_batch(w)
    if len(w.batch) < w.spec.batch_size and not full:
        # sync trains the round it has (short when episodes were masked), unless dynamic
        # sampling dropped groups from it: then another round samples the missing ones
        if not w.rules.barrier or w.gate.dropped:
            return
    if w.batch:
        _start_step(w)


def _fill_batch(w) -> bool:
    """Takes completed trajectories into the batch; True when the next would not fit."""
    while len(w.batch) < w.spec.batch_size:
        index = w.rules.next_take(w)
        if index is None:
            return False
        if index < 0:
            return True
        _take(w, index)
    return False


def next_take(w) -> int | None:
    """The next completed trajectory to take (None: none is ready)."""
    cands = consumable(w.spec.mode, w.completed, w.head)
    return cands[0] if cands else None


def next_take_groups(w) -> int | None:
    """As :func:`next_take`, with -1 when the batch is full. Under dynamic sampling a group
    is trained whole, in one batch (its advantages are computed over the members in the
    batch): the rest of a group the batch has started comes first, window or not, and a
    group that would not fit waits for the next batch."""
    cands = consumable(w.spec.mode, w.completed, w.head)
    started = {w.records[c.index].task_id for c in w.batch}
    rest = next((i for i in w.completed if w.records[i].task_id in started), None)
    if rest is not None:
        return rest
    members: dict[str, int] = {}
    for j in w.completed:
        if w.traj[j].final_reward is not None:
            tid = w.records[j].task_id
            members[tid] = members.get(tid, 0) + 1
    room = w.spec.batch_size - len(w.batch)
    fits = next((i for i in cands if members.get(w.records[i].task_id, 0) <= room), None)
    return fits if fits is not None else (-1 if cands else None)


def _start_step(w) -> None:
    batch, w.batch = w.batch, []
    trained = []
    for c in batch:
        rec = w.rec(c.index)
        w.event(Kind.TRAIN, gen_gap=rec.gen_gap, queue_gap=rec.queue_gap)
        rec.terminal, rec.resolve_time = Terminal.TRAINED, w.now
        timings = {**c.trajectory.timings, "queue": w.now - rec.complete_time}
        trained.append(c._replace(trajectory=dataclasses.replace(c.trajectory, timings=timings)))
        w.log("trained", c.index)
        w.dead.append(c.index)
    w.out.append(Train(tuple(trained), w.now, w.gate.account()))
    w.training = True
