"""Max-min fair sharing of link bandwidth between concurrent flows.

The flow-level model SimGrid validates against packet-level simulation
(Velho, Schnorr, Casanova & Legrand 2013, "On the validity of flow-level TCP
network models for grid and cloud simulations", ACM TOMACS 23(4)): every
active flow gets a rate, the rates are max-min fair under the links'
capacities, and they are recomputed whenever a flow starts or ends. Computed
by progressive filling (Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2):
raise every unfixed flow's level together until some link is full, fix the
flows crossing it, repeat.

A flow's *work* is measured in seconds at full speed (``work_s``), and its
level is converted to a *speed* in [0, 1]: a message of ``nbytes`` on a route
whose slowest link carries ``ref`` bytes/s has work ``nbytes / ref`` and
consumes ``speed · ref`` bytes/s on every link of its route (weight 1). A
collective (a closed-form duration ``T`` over several links) is one flow of
work ``T`` that at full speed uses every link it holds at that link's capacity
(weight ``capacity / ref``), so two identical collectives on the same links
each run at half speed. A flow alone on its links runs at speed exactly 1 and
ends exactly ``work_s`` after it starts: single messages and collectives keep
their closed-form times.

Flows whose links no other flow touches are independent: a change recomputes
only the connected component (links ↔ flows) it touches, once per simulated
instant (changes at one instant are batched). One SimPy timer serves the
earliest finish among all flows; finishes are kept in a heap. Messages whose
flows finish together and arrive after the same latency arrive in one SimPy
event, in the order their timeouts would have had (:meth:`FairShare.later`).
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from simdist.sim import Call, TimeoutBatch, reserve_key, take_next

if TYPE_CHECKING:
    import simpy


class SharedLink(Protocol):
    """What fair sharing needs of a link (:class:`simdist.network.link.Link` is one)."""

    name: str
    bandwidth_Bps: float
    flows: dict[Any, None]  # the flows crossing it, in arrival order
    rates: list[tuple[float, float]]  # (time_s, bytes/s carried from then on)

    def set_rate(self, now_s: float, rate_Bps: float) -> None:
        """Record that from ``now_s`` on the link carries ``rate_Bps``."""


class Flow:
    """One flow: its links, its remaining work (seconds at full speed) and current speed."""

    __slots__ = (
        "active",
        "bps",
        "callback",
        "custom",
        "finish_s",
        "gen",
        "key",
        "last_s",
        "links",
        "ref_Bps",
        "remaining_s",
        "seq",
        "speed",
        "weights",
    )

    def __init__(
        self,
        links: Sequence[SharedLink],
        work_s: float,
        weights: list[float],
        bps: list[float],
        ref_Bps: float,
        callback: Callable[[], None],
        seq: int,
        now: float,
        key: Any = (),
    ) -> None:
        self.links = links
        self.key = key  # names what its share depends on: links, reference rate, weights
        self.weights = weights  # capacity units consumed per unit of level, per link
        self.bps = bps  # bytes/s put on each link at full speed (telemetry)
        self.ref_Bps = ref_Bps  # level at which the flow runs at full speed
        self.remaining_s = work_s
        self.speed = 0.0
        self.last_s = now
        self.finish_s = now
        self.gen = 0
        self.seq = seq
        self.callback = callback
        self.active = True
        self.custom = False  # bytes/s per link given by the caller, not by its key


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
        self._seq = 0
        self._heap: list[tuple[float, int, int, Flow]] = []
        self._timer: Call | None = None  # the one timer that may fire: earlier ones are stale
        self._timer_at: float | None = None
        self._pending: tuple[float, int] | None = None  # a timer not scheduled yet: see _fire
        self._fire_call = self._fire  # bound once: every timer calls it
        self._dirty: dict[SharedLink, None] = {}
        self._settling = False
        self._settler: Call | None = None  # the settling event, scheduled again each instant
        self._settle_calls = [self._settle]
        # (id(links), collective?) → (links, ref, weights, bps, key): see _shape
        self._shapes: dict[tuple[int, bool], tuple[Any, ...]] = {}
        self._key_ids: dict[tuple[Any, ...], int] = {}
        # Each flow's speed for one component's layout (its links, its flows' keys in
        # order): the max-min levels depend on nothing else, and a run repeats few layouts.
        # Beside them, each link's rate, while no flow's bytes/s differ from its key's.
        self._speeds: dict[tuple[Any, ...], list[Any]] = {}
        self._custom = 0  # active flows whose bytes/s per link the caller gave (link_bytes)
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
        # A route or a collective's link set carries flow after flow: its shape once per set.
        shape = self._shapes.get((id(links), collective))
        if shape is None or shape[0] is not links:
            if len(self._shapes) >= 16384:  # callers with a new list each time
                self._shapes.clear()
            shape = _shape(links, collective, ref_Bps)
            # The key as a small int (equal keys, equal ints): layouts hash faster.
            key = self._key_ids.setdefault(shape[4], len(self._key_ids))
            shape = self._shapes[(id(links), collective)] = (*shape[:4], key)
        _, ref, weights, bps, key = shape
        if link_bytes is not None:
            bps = [b / work_s for b in link_bytes] if work_s > 0 else [0.0] * len(link_bytes)
        self._seq += 1
        flow = Flow(links, work_s, weights, bps, ref, callback, self._seq, now, key)
        if link_bytes is not None:
            flow.custom = True
            self._custom += 1
        alone = True
        for link in links:
            if link.flows:
                alone = False
            link.flows[flow] = None
        if alone:
            flow.speed = 1.0
            for link, rate in zip(links, bps, strict=True):
                rates = link.rates  # Link.set_rate, inlined: a collective holds many links
                if rates and rates[-1][0] == now:
                    rates.pop()
                if not rates or rates[-1][1] != rate:
                    rates.append((now, rate))
            self._schedule(flow, now + work_s)
        else:
            self._touch(links)
        return flow

    def stop(self, flow: Flow) -> None:
        """Withdraw ``flow`` before it is done (a failure); the others speed up."""
        if flow.active:
            self._remove(flow)

    # -- internals ---------------------------------------------------------

    def _remove(self, flow: Flow) -> None:
        """Take ``flow`` off its links; links left with other flows are reallocated."""
        flow.active = False
        flow.gen += 1
        if flow.custom:
            self._custom -= 1
        now = self.env.now
        shared = []
        for link in flow.links:
            del link.flows[flow]
            if link.flows:
                shared.append(link)
            else:
                rates = link.rates  # Link.set_rate(now, 0.0), inlined
                if rates and rates[-1][0] == now:
                    rates.pop()
                if not rates or rates[-1][1] != 0.0:
                    rates.append((now, 0.0))
        if shared:
            self._touch(shared)

    def _touch(self, links: Sequence[SharedLink]) -> None:
        """Mark ``links`` for reallocation at the end of this instant."""
        dirty = self._dirty
        for link in links:
            dirty[link] = None
        if not self._settling:
            self._settling = True
            # An event processed calls nobody again: one serves every instant in turn.
            if self._settler is None:
                self._settler = Call(self.env, self._settle)
            else:
                self._settler.again(self._settle_calls)

    def _settle(self, _: simpy.Event) -> None:
        """Reallocate the rates of every component a change touched this instant.

        The timer is armed once, at the earliest new finish, after every component: within
        this step nothing else is scheduled, so a timer armed on the way to it (stale as
        soon as the next is armed) would only have cost a SimPy step that calls nothing.
        """
        self._settling = False
        dirty, self._dirty = self._dirty, {}
        now = self.env.now
        seen: set[SharedLink] = set()
        earliest = None
        for link in dirty:
            if link in seen or not link.flows:
                continue
            links, flows = _component(link, seen)
            finish = self._reallocate(links, flows, now)
            if finish is not None and (earliest is None or finish < earliest):
                earliest = finish
        if earliest is not None and (self._timer_at is None or earliest < self._timer_at):
            self._arm(earliest)

    def _reallocate(self, links: list[SharedLink], flows: list[Flow], now: float) -> float | None:
        """New speeds for one component at ``now``; the earliest finish rescheduled, if any."""
        keep = not self._custom
        if len(flows) == 1:
            if len(flows[0].links) == len(links):
                return self._alone(flows[0], now)
            found: list[Any] | None = [[1.0], None]
            keep = False
        else:
            layout = (tuple(links), tuple([flow.key for flow in flows]))
            found = self._speeds.get(layout)  # the layout's [speeds, links' rates] once known
        if found is None:
            levels = max_min_levels(links, flows)
            # rounding can leave a link a hair short of a flow's share: keep speeds > 0
            speeds = [min(1.0, max(levels[i] / f.ref_Bps, 1e-12)) for i, f in enumerate(flows)]
            if len(self._speeds) >= 4096:
                self._speeds.clear()
            found = self._speeds[layout] = [speeds, None]
        speeds = found[0]
        # The links' rates are summed in this order, from these speeds and the keys' bytes/s,
        # the first time a layout comes, then taken as they were: the same floats (unless a
        # flow's bytes/s may not be its key's: summed each time then).
        known = found[1] if keep else None
        rates = None if known is not None else dict.fromkeys(links, 0.0)
        earliest = None
        heap = self._heap
        for flow, speed in zip(flows, speeds, strict=True):
            last = flow.last_s
            if last != now:
                flow.remaining_s -= flow.speed * (now - last)
                flow.last_s = now
            if rates is not None:
                for link, bps in zip(flow.links, flow.bps, strict=True):
                    rates[link] += speed * bps
            if speed != flow.speed:
                flow.speed = speed
                finish = flow.finish_s = now + max(flow.remaining_s, 0.0) / speed
                flow.gen += 1
                heapq.heappush(heap, (finish, flow.seq, flow.gen, flow))
                if earliest is None or finish < earliest:
                    earliest = finish
        if rates is not None:
            known = [rates[link] for link in links]
            if keep:
                found[1] = known
        for link, rate in zip(links, known, strict=True):  # type: ignore[arg-type]
            rates = link.rates  # Link.set_rate, inlined
            if rates and rates[-1][0] == now:
                rates.pop()
            if not rates or rates[-1][1] != rate:
                rates.append((now, rate))
        return earliest

    def _alone(self, flow: Flow, now: float) -> float | None:
        """:meth:`_reallocate` of a component of one flow: at full speed, each of its
        links carrying its bytes/s (``0.0 + 1.0 · bps``, the same float)."""
        if flow.last_s != now:
            flow.remaining_s -= flow.speed * (now - flow.last_s)
            flow.last_s = now
        finish = None
        if flow.speed != 1.0:
            flow.speed = 1.0
            finish = flow.finish_s = now + max(flow.remaining_s, 0.0)
            flow.gen += 1
            heapq.heappush(self._heap, (finish, flow.seq, flow.gen, flow))
        for link, rate in zip(flow.links, flow.bps, strict=True):
            rates = link.rates  # Link.set_rate, inlined
            if rates and rates[-1][0] == now:
                rates.pop()
            if not rates or rates[-1][1] != rate:
                rates.append((now, rate))
        return finish

    def _schedule(self, flow: Flow, finish_s: float) -> None:
        flow.gen += 1
        flow.finish_s = finish_s
        heapq.heappush(self._heap, (finish_s, flow.seq, flow.gen, flow))
        if self._timer_at is None or finish_s < self._timer_at:
            self._arm(finish_s)

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
        done = []
        # An entry is stale once its flow was rescheduled or withdrawn (both bump ``gen``).
        while heap:
            entry = heap[0]
            if entry[2] != entry[3].gen:
                heappop(heap)
            elif entry[0] <= now:
                heappop(heap)
                done.append(entry[3])
            else:
                break
        for flow in done:
            flow.remaining_s = 0.0
            self._remove(flow)
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
            for flow in done:
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
) -> tuple[Sequence[SharedLink], float, list[float], list[float], tuple[Any, ...]]:
    """What every flow over ``links`` shares: the links, the reference rate (the slowest
    link's bandwidth), the weights and bytes/s per link at full speed, and the key that
    with the links decides its share (see :class:`FairShare`)."""
    if collective:
        ref = min(link.bandwidth_Bps for link in links)
        weights = [link.bandwidth_Bps / ref for link in links]
        return (
            links,
            ref,
            weights,
            [link.bandwidth_Bps for link in links],
            (tuple(links), ref, tuple(weights)),
        )
    ref = ref_Bps if ref_Bps is not None else min(link.bandwidth_Bps for link in links)
    return links, ref, [1.0] * len(links), [ref] * len(links), (tuple(links), ref, None)


def _done() -> None:
    """A finished flow's callback: the real one is dropped once called (no reference cycles)."""


def _component(start: SharedLink, seen: set[SharedLink]) -> tuple[list[SharedLink], list[Flow]]:
    """The links and flows connected to ``start`` through shared flows, in a stable order."""
    links = [start]
    flows: dict[Flow, None] = {}
    seen.add(start)
    for link in links:  # grows as links are found: each link is visited once
        for flow in link.flows:
            if flow not in flows:
                flows[flow] = None
                for other in flow.links:
                    if other not in seen:
                        seen.add(other)
                        links.append(other)
    links.sort(key=_NAME)
    return links, sorted(flows, key=_SEQ)


_NAME, _SEQ = attrgetter("name"), attrgetter("seq")  # sort keys called in C


def max_min_levels(links: list[SharedLink], flows: list[Flow]) -> list[float]:
    """Progressive filling: every flow's level, max-min fair under the links' capacities.

    A flow at level λ consumes ``λ · weight`` of each of its links. The bottleneck
    (least remaining capacity per unit of unfixed weight; ties to the first link by
    name) fixes its flows at its level, which is subtracted from their other links.
    """
    index = {link: i for i, link in enumerate(links)}
    remaining = [link.bandwidth_Bps for link in links]
    weight = [0.0] * len(links)
    count = [0] * len(links)
    members: list[list[int]] = [[] for _ in links]
    for j, flow in enumerate(flows):
        for link, w in zip(flow.links, flow.weights, strict=True):
            i = index[link]
            weight[i] += w
            count[i] += 1
            members[i].append(j)
    levels = [0.0] * len(flows)
    fixed = [False] * len(flows)
    left = len(flows)
    while left:
        best, best_level = -1, 0.0
        for i in range(len(links)):
            if count[i]:
                level = max(remaining[i], 0.0) / weight[i]
                if best < 0 or level < best_level:
                    best, best_level = i, level
        for j in members[best]:
            if fixed[j]:
                continue
            fixed[j] = True
            left -= 1
            levels[j] = best_level
            flow = flows[j]
            for link, w in zip(flow.links, flow.weights, strict=True):
                i = index[link]
                remaining[i] -= best_level * w
                weight[i] -= w
                count[i] -= 1
    return levels
