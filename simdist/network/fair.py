"""Max-min fair sharing of link bandwidth between concurrent flows, on the SimPy clock.

The flow-level model SimGrid validates against packet-level simulation
(Velho, Schnorr, Casanova & Legrand 2013, "On the validity of flow-level TCP
network models for grid and cloud simulations", ACM TOMACS 23(4)): every
active flow gets a rate, the rates are max-min fair under the links' capacities
(:mod:`simdist.network.maxmin`), and they change whenever a flow starts or ends. The
allocation is kept up to date incrementally, by groups of flows with one bottleneck and
one virtual clock each (:mod:`simdist.network.groups`): a start or end costs O(log n),
not O(flows in flight).

A flow's *work* is measured in seconds at full speed (``work_s``), and its level is
converted to a *speed* in [0, 1]: a message of ``nbytes`` on a route whose slowest link
carries ``ref`` bytes/s has work ``nbytes / ref`` and consumes ``speed · ref`` bytes/s on
every link of its route (weight 1). A collective (a closed-form duration ``T`` over
several links) is one flow of work ``T`` that at full speed uses every link it holds at
that link's capacity (weight ``capacity / ref``), so two identical collectives on the
same links each run at half speed. A flow alone on its links runs at speed exactly 1 and
ends exactly ``work_s`` after it starts: single messages and collectives keep their
closed-form times.

Changes at one simulated instant take effect together, at the end of the instant (one
settling step). One SimPy timer serves the earliest finish among all groups. Messages
whose flows finish together and arrive after the same latency arrive in one SimPy
event, in the order their timeouts would have had (:meth:`FairShare.later`). Each
link's load over time is rebuilt after the run (:mod:`simdist.network.load_steps`).
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from simdist.network.groups import Allocation, Flow, Group, SharedLink
from simdist.sim import Call, TimeoutBatch, reserve_key, take_next

if TYPE_CHECKING:
    import simpy


class FairShare:
    """Max-min fair bandwidth sharing among the flows of one SimPy environment."""

    _by_env: ClassVar[weakref.WeakKeyDictionary[simpy.Environment, FairShare]] = (
        weakref.WeakKeyDictionary()
    )

    @classmethod
    def of(cls, env: simpy.Environment) -> FairShare:
        """The fair-sharing model of ``env`` (one per SimPy environment)."""
        model = cls._by_env.get(env)
        if model is None:
            model = cls._by_env[env] = cls(env)
        return model

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.allocation = Allocation()
        self._seq = 0
        self._serial = 0
        self._heap: list[tuple[float, int, int, Group]] = []  # each group's next finish
        self._timer: Call | None = None  # the one timer that may fire: earlier ones are stale
        self._timer_at: float | None = None
        self._pending: tuple[float, int] | None = None  # a timer not scheduled yet: see _fire
        self._fire_call = self._fire  # bound once: every timer calls it
        self._settling = False
        self._settler: Call | None = None  # the settling event, scheduled again each instant
        self._settle_calls = [self._settle]
        # id(links), collective? → (links, ref, weights, bps): see _shape
        self._shapes: dict[tuple[int, bool], tuple[Any, ...]] = {}
        # While finished flows call back (_fire): the batch later calls of one delay join.
        self._batch: TimeoutBatch | None = None
        self._firing = False

    # -- flows -------------------------------------------------------------

    def start(
        self,
        links: Sequence[SharedLink],
        work_s: float,
        callback: Callable[[], None],
        *,
        link_bytes: Sequence[float] | None = None,
        collective: bool = False,
        ref_Bps: float | None = None,
    ) -> Flow:
        """Start a flow over ``links`` (deduplicated); ``callback()`` runs when its work is done.

        A message (``collective=False``) consumes its rate on every link; a collective
        consumes each link's capacity in proportion (see the module docstring).
        ``link_bytes`` (per link, for telemetry) default to the bytes the flow's rate puts
        there: ``work_s · ref`` for a message, ``work_s · capacity`` for a collective;
        ``ref_Bps``, the route's slowest bandwidth, when the caller has it already.
        """
        now = self.env.now
        allocation = self.allocation
        allocation.version += 1
        # A route or a collective's link set carries flow after flow: its shape once per set.
        shape = self._shapes.get((id(links), collective))
        if shape is None or shape[0] is not links:
            if len(self._shapes) >= 16384:  # callers with a new list each time
                self._shapes.clear()
            shape = self._shapes[(id(links), collective)] = _shape(links, collective, ref_Bps)
        _, ref, weights, bps = shape
        if link_bytes is not None:
            bps = [b / work_s for b in link_bytes] if work_s > 0 else [0.0] * len(link_bytes)
        self._seq += 1
        flow = Flow(links, work_s, weights, bps, ref, callback, self._seq)
        alone = True
        for link in links:
            if link.flows:
                alone = False
            link.flows[flow] = None
        if alone:
            self._schedule(allocation.start_alone(flow, now))
        else:
            allocation.enter(flow, now)
            self._wake()
        return flow

    def stop(self, flow: Flow) -> None:
        """Withdraw ``flow`` before it is done (a failure); the others speed up."""
        if flow.active:
            self._remove(flow)

    def speed(self, flow: Flow) -> float:
        """``flow``'s current speed (fraction of its full rate), as of the last settled
        instant."""
        return self.allocation.speed(flow)

    @property
    def version(self) -> int:
        """Bumped by every change of the allocation (links' telemetry is rebuilt after one)."""
        return self.allocation.version

    def _remove(self, flow: Flow) -> None:
        """Take ``flow`` off its links; links left with other flows are reallocated."""
        flow.active = False
        shared = False
        for link in flow.links:
            del link.flows[flow]
            if link.flows:
                shared = True
        self.allocation.version += 1
        if self.allocation.remove(flow, self.env.now, shared):
            self._wake()

    # -- settling ---------------------------------------------------------------

    def _wake(self) -> None:
        """Settle the changes of this instant at its end."""
        if not self._settling:
            self._settling = True
            # An event processed calls nobody again: one serves every instant in turn.
            if self._settler is None:
                self._settler = Call(self.env, self._settle)
            else:
                self._settler.again(self._settle_calls)

    def _settle(self, _: simpy.Event) -> None:
        """Bring the allocation up to date with this instant's changes
        (:meth:`Allocation.settle`). The timer is armed once, at the earliest new finish,
        after everything: within this step nothing else is scheduled."""
        self._settling = False
        earliest = None
        for group in self.allocation.settle(self.env.now):
            if group.alive and group.size:
                finish = self._push(group)
                if earliest is None or finish < earliest:
                    earliest = finish
        if earliest is not None and (self._timer_at is None or earliest < self._timer_at):
            self._arm(earliest)

    # -- the timer --------------------------------------------------------------

    def _push(self, group: Group) -> float:
        """Enter ``group``'s next finish in the heap (its older entries go stale)."""
        tag, seq = group.top()
        finish = group.finish_of(tag)
        self._serial += 1  # unique: entries never compare groups
        group.gen = self._serial
        heapq.heappush(self._heap, (finish, seq, group.gen, group))
        return finish

    def _schedule(self, group: Group) -> None:
        finish = self._push(group)
        if self._timer_at is None or finish < self._timer_at:
            self._arm(finish)

    def _arm(self, at_s: float) -> None:
        self._timer_at = at_s
        self._pending = None
        env = self.env
        self._timer = Call(env, self._fire_call, max(at_s - env.now, 0.0))

    def _fire(self, timer: simpy.Event) -> None:
        if timer is not self._timer:
            return  # stale: a timer for an earlier finish was armed since
        self._timer_at = None
        now = self.env.now
        heap = self._heap
        heappop = heapq.heappop
        due: list[Group] = []
        # An entry is stale once its group was rescheduled or dissolved (both bump ``gen``).
        while heap:
            entry = heap[0]
            if entry[2] != entry[3].gen:
                heappop(heap)
            elif entry[0] <= now:
                heappop(heap)
                due.append(entry[3])
            else:
                break
        done: list[tuple[float, int, Flow]] = []
        for group in due:
            members = group.heap
            while members:
                tag, seq, gen, flow = members[0]
                if gen != flow.gen:
                    heappop(members)
                    continue
                finish = group.finish_of(tag)
                if finish > now:
                    break
                heappop(members)
                done.append((finish, seq, flow))
        if len(done) > 1:
            done.sort(key=_finish_seq)
        for _, _, flow in done:
            self._remove(flow)
        for group in due:
            if group.alive and group.size:
                self._push(group)
        while heap and heap[0][2] != heap[0][3].gen:
            heappop(heap)
        if heap:
            # Armed now (its key drawn), scheduled at the end of this step unless a timer
            # for an earlier finish is armed first (the settle below): no stale timer then.
            at = heap[0][0]
            key = reserve_key(self.env)
            if key is None:
                self._arm(at)
            else:
                self._timer_at, self._pending = at, (at, key)
        self._firing = True
        try:
            for _, _, flow in done:
                callback, flow.callback = flow.callback, _done
                callback()
        finally:
            self._firing, self._batch = False, None
        # The flows' ends settle next with nothing due before: settled in this step.
        if self._settling and take_next(self.env, self._settler):  # type: ignore[arg-type]
            self._settle(self._settler)  # type: ignore[arg-type]
        if self._pending is not None:
            (at, key), self._pending = self._pending, None
            env = self.env
            self._timer = Call(env, self._fire_call, max(at - env.now, 0.0), key)

    def later(self, delay_s: float, call: Callable[[Any], None]) -> None:
        """``call(None)`` ``delay_s`` from now: ``env.timeout(delay_s).callbacks.append(call)``.

        Finished flows call back one after the other in one SimPy step (:meth:`_fire`);
        when they each ask for a call after the same delay, with nothing scheduled in
        between, those calls share one SimPy event (:class:`~simdist.sim.TimeoutBatch`)
        instead of a timeout each, run in the order and at the place of their timeouts.
        """
        batch = self._batch
        if batch is not None and batch.join(delay_s, call):
            return
        batch = TimeoutBatch(self.env, delay_s, [call])
        if self._firing:
            self._batch = batch


def _shape(
    links: Sequence[SharedLink], collective: bool, ref_Bps: float | None
) -> tuple[Sequence[SharedLink], float, list[float], list[float]]:
    """What every flow over ``links`` shares: the links, the reference rate (the slowest
    link's bandwidth), and the weights and bytes/s per link at full speed."""
    if collective:
        ref = min(link.bandwidth_Bps for link in links)
        weights = [link.bandwidth_Bps / ref for link in links]
        return links, ref, weights, [link.bandwidth_Bps for link in links]
    ref = ref_Bps if ref_Bps is not None else min(link.bandwidth_Bps for link in links)
    return links, ref, [1.0] * len(links), [ref] * len(links)


def _done() -> None:
    """A finished flow's callback: the real one is dropped once called (no reference cycles)."""


def _finish_seq(item: tuple[float, int, Flow]) -> tuple[float, int]:
    """Finished flows in the order of their finish, then of their start."""
    return item[0], item[1]
