"""The plan of a dataflow replay: which gradients and updates run together, in which slots.

On the host and without values (:mod:`.replay` executes it): whenever the next
applied shard needs a gradient not yet computed, every gradient whose pulled
states exist forms a *wave*, computed :data:`BUCKET` at a time; then each PS
applies what it can, up to :data:`~simdist.numerics.chains.CHAIN` shards per
*chain*. States and gradients live in slots of on-device banks; a state keeps
its slot while a later gradient, update or evaluation reads it. No JAX here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from simdist.numerics.chains import CHAIN
from simdist.strategies.parameter_server.dataflow import Apply, Dataflow, Evaluate

#: Parameter versions per gradient call: the vmap width whose lanes the step-by-step loop used.
BUCKET = 8


class Wave(NamedTuple):
    """Up to :data:`BUCKET` gradients: their tickets, state slots [8, n_ps], gradient slots."""

    tickets: list[int]
    slots: np.ndarray
    targets: np.ndarray


class Chain(NamedTuple):
    """Updates of one PS in a row: from state slot ``source``, each writing its ``targets``."""

    ps: int
    source: int
    ops: list[Apply]
    grads: list[int]  # the gradient slot of each update
    targets: list[int]  # the state slot of each update's result (a scratch slot if unread)


class Check(NamedTuple):
    """An evaluation of the states in ``slots`` (one per PS)."""

    slots: tuple[int, ...]


class Slots:
    """Slot numbers of one bank: reused once free; the last one is scratch."""

    def __init__(self) -> None:
        self.free: list[int] = []
        self.size = 0

    def take(self) -> int:
        if self.free:
            return self.free.pop()
        self.size += 1
        return self.size - 1

    def give(self, slot: int) -> None:
        self.free.append(slot)

    @property
    def capacity(self) -> int:
        """Slots used at most, plus scratch, rounded up to a power of two (at least 8): runs
        of different sizes (a sweep over workers) then share compiled programs."""
        return max(8, 1 << self.size.bit_length())


class Plan:
    """The waves, chains and evaluations of one dataflow, in order, with their slots.

    Built in one go from a finished dataflow (:meth:`add` once, with ``final``), or
    segment by segment while the simulation still runs (:meth:`add` without
    ``final``, then once with it): the steps planned so far are taken
    (:meth:`take`) and executed while the simulation goes on.
    """

    def __init__(self, n_ps: int) -> None:
        self.n_ps = n_ps
        self.steps: list[Wave | Chain | Check] = []
        self.states = [Slots() for _ in range(n_ps)]
        self.gradients = Slots()
        self.uses: dict[tuple[int, int], int] = {}
        self.where: dict[tuple[int, int], int] = {
            (ps, 0): self.states[ps].take() for ps in range(n_ps)
        }
        self.pending: dict[int, int] = {}  # updates still to apply, per ticket
        self.gslot: dict[int, int] = {}
        self.produced = [0] * n_ps  # the newest state id of each PS computed so far
        self.waiting: list[int] = []  # tickets not computed yet, in ticket order
        self.final: tuple[int, ...] = ()
        self._ops = 0  # ops planned so far
        self._tickets = 0  # tickets counted so far
        self._held: list[tuple[int, ...]] = []  # states kept for later segments

    def add(
        self,
        flow: Dataflow,
        held: Sequence[Sequence[int]] = (),
        final: Sequence[int] | None = None,
    ) -> None:
        """Plan the ops ``flow`` recorded since the last call.

        ``held``: state ids (tuples of one per PS) kept until the next call — what
        later ops may still read: each PS's current state, and the states read by
        pulls whose gradients have no ticket yet. ``final``: the final states, kept to
        the end, given with the last call only. A dataflow planned in one go counts
        only the tickets some op applies; in segments, every new ticket is counted
        with one update per PS to come (every gradient is applied on every PS; a
        segmented run has no failures, which would lose some).
        """
        tickets, ops = flow.tickets, flow.ops
        new = ops[self._ops :]
        counts: dict[int, int] = {}
        if final is not None and self._ops == 0 and self._tickets == 0:
            for op in new:
                if isinstance(op, Apply):
                    counts[op.ticket] = counts.get(op.ticket, 0) + 1
            fresh = sorted(counts)
        else:
            fresh = list(range(self._tickets, len(tickets)))
            counts = dict.fromkeys(fresh, self.n_ps)
        self.pending.update(counts)
        for op in new:
            if isinstance(op, Apply):
                self._use(op.ps, op.source)
            else:
                for ps, i in enumerate(op.ids):
                    self._use(ps, i)
        for t in fresh:
            for ps, i in enumerate(tickets[t].pulled):
                self._use(ps, i)
        for ids in held:
            for ps, i in enumerate(ids):
                self._use(ps, i)
        if final is not None:
            for ps, i in enumerate(final):
                self._use(ps, i, 1 << 40)
        for ids in self._held:  # after the new uses: a state read again stays
            for ps, i in enumerate(ids):
                self._release(ps, i)
        self._held = [tuple(ids) for ids in held]
        self.waiting.extend(fresh)
        self._ops, self._tickets = len(ops), len(tickets)
        self._walk(tickets, new)
        if final is not None:
            self.final = tuple(self.where[(ps, i)] for ps, i in enumerate(final))

    def take(self) -> list[Wave | Chain | Check]:
        """The steps planned since the last call, their padding aimed at the scratch slots
        of the banks' present capacity (above every slot in use, so never read)."""
        scratch = self.scratch
        gscratch = self.gradients.capacity - 1
        for step in self.steps:
            if isinstance(step, Wave):
                step.targets[len(step.tickets) :] = gscratch
            elif isinstance(step, Chain):
                step.targets[:] = [scratch[step.ps] if t < 0 else t for t in step.targets]
        steps, self.steps = self.steps, []
        return steps

    @property
    def scratch(self) -> list[int]:
        """Each PS bank's scratch slot: its last one."""
        return [s.capacity - 1 for s in self.states]

    def _use(self, ps: int, i: int, n: int = 1) -> None:
        self.uses[(ps, i)] = self.uses.get((ps, i), 0) + n

    def _release(self, ps: int, i: int) -> None:
        self.uses[(ps, i)] -= 1
        if self.uses[(ps, i)] == 0:
            del self.uses[(ps, i)]
            self.states[ps].give(self.where.pop((ps, i)))

    def _walk(self, tickets: Sequence[Any], ops: Sequence[Apply | Evaluate]) -> None:
        i, n = 0, len(ops)
        while i < n:
            j = i
            while j < n and (isinstance(ops[j], Evaluate) or ops[j].ticket in self.gslot):
                j += 1
            self._execute(ops[i:j])
            i = j
            if i == n:
                break
            blocked = ops[i].ticket  # type: ignore[union-attr]
            ready = _ready(self.waiting, blocked, tickets, self.produced)
            done: set[int] = set()
            for start in range(0, len(ready), BUCKET):
                chunk = ready[start : start + BUCKET]
                if len(chunk) < BUCKET and blocked in done:
                    break  # a partial wave waits for more gradients
                self._wave(chunk, tickets)
                done.update(chunk)
            self.waiting = _without(self.waiting, done)

    def _wave(self, chunk: list[int], tickets: Sequence[Any]) -> None:
        padded = chunk + [chunk[-1]] * (BUCKET - len(chunk))
        slots = np.array(
            [[self.where[(ps, p)] for ps, p in enumerate(tickets[t].pulled)] for t in padded],
            dtype=np.int32,
        )
        targets = np.zeros(BUCKET, np.int32)
        for lane, t in enumerate(chunk):
            self.gslot[t] = targets[lane] = self.gradients.take()
        self.steps.append(Wave(chunk, slots, targets))
        for t in chunk:
            for ps, p in enumerate(tickets[t].pulled):
                self._release(ps, p)

    def _execute(self, ops: Sequence[Apply | Evaluate]) -> None:
        runs: list[list[Apply]] = [[] for _ in range(self.n_ps)]
        for op in ops:
            if isinstance(op, Apply):
                runs[op.ps].append(op)
        for ps, run in enumerate(runs):
            start = 0
            while start < len(run):
                stop = start + 1  # a chain continues from its last state; a restore breaks it
                while (
                    stop < len(run)
                    and stop - start < CHAIN
                    and run[stop].source == run[stop - 1].target
                ):
                    stop += 1
                self._chain(ps, run[start:stop])
                self.produced[ps] = run[stop - 1].target
                start = stop
        for op in ops:
            if isinstance(op, Evaluate):
                self.steps.append(Check(tuple(self.where[(ps, i)] for ps, i in enumerate(op.ids))))
                for ps, i in enumerate(op.ids):
                    self._release(ps, i)

    def _chain(self, ps: int, run: list[Apply]) -> None:
        source = self.where[(ps, run[0].source)]
        grads, targets = [], []
        for op in run:
            grads.append(self.gslot[op.ticket])
            if (ps, op.target) in self.uses:
                self.where[(ps, op.target)] = self.states[ps].take()
                targets.append(self.where[(ps, op.target)])
            else:
                targets.append(-1)  # nobody reads it: scratch
            self._release(ps, op.source)
            self.pending[op.ticket] -= 1
            if self.pending[op.ticket] == 0:
                self.gradients.give(self.gslot[op.ticket])
        self.steps.append(Chain(ps, source, run, grads, targets))


def _ready(
    waiting: list[int], blocked: int, tickets: Sequence[Any], produced: list[int]
) -> list[int]:
    """The waiting gradients whose pulled states exist, ``blocked`` among them.

    Tickets are numbered in pull order and a later pull reads newer states, so the
    scan stops at the first one not ready (after a rollback an older state may be
    pulled later: such a ticket waits for the next wave).
    """

    def ready(t: int) -> bool:
        return all(p <= produced[ps] for ps, p in enumerate(tickets[t].pulled))

    out = []
    for t in waiting:
        if not ready(t):
            break
        out.append(t)
    if blocked not in out:
        assert ready(blocked), "a gradient is applied before the states it pulled exist"
        out.append(blocked)
        out.sort()
    return out


def _without(waiting: list[int], done: set[int]) -> list[int]:
    """``waiting`` less the tickets in ``done``. A wave takes a prefix of the waiting list
    (and at most the blocked ticket beyond it), so the list is sliced, not filtered, in the
    usual case: a dataflow planned in one go waits on every ticket of the run."""
    k = 0
    while k < len(waiting) and waiting[k] in done:
        k += 1
    rest = waiting[k:]
    if len(done) > k:
        rest = [t for t in rest if t not in done]
    return rest
