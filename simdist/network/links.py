"""Links and how they are shared: the wire itself.

A :class:`Link` has a latency and a bandwidth, and one of two sharing models:

* ``fifo``: a link carries one transfer at a time; the :class:`LinkArbiter`
  grants sets of links atomically, and concurrent transfers wait in line;
* ``fair``: concurrent flows split the links' bandwidth max-min fairly, rates
  recomputed whenever a flow starts or ends (:mod:`simdist.network.fair`).

A :class:`Transfer` moves bytes along a route by callbacks; :func:`hold_links`
occupies links for a given time (a collective's closed-form duration). Under
both models a transfer or collective alone on its links takes exactly its
closed-form time. Each link keeps its rate over time (``rates``), for per-link
telemetry. Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar, NamedTuple

import simpy

from simdist.network.fair import FairShare

#: The bandwidth sharing models a link can follow.
SHARING: tuple[str, ...] = ("fair", "fifo")


class Link:
    """One direction (or both, half duplex) of a channel, with a latency and a bandwidth.

    Cost follows the alpha–beta (Hockney) model, ``latency_s + nbytes / bandwidth_Bps``.
    Under ``fifo`` sharing a transfer or collective takes all the links it needs at
    once, when all are free (:class:`LinkArbiter`), so transfers that want a link at
    the same time serialise; under ``fair`` sharing they run together at max-min fair
    rates (:class:`~simdist.network.fair.FairShare`). Either way contention on a
    shared NIC or PCIe bus appears without special cases.

    ``channel`` names the physical channel (``w0/nic``) and ``direction`` the side of
    it this link is: ``tx`` (leaving the host or device), ``rx`` (entering), or
    ``both`` for a half-duplex channel, whose one link carries both ways.
    """

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        latency_s: float,
        bandwidth_Bps: float,
        host: str = "",
        *,
        sharing: str = "fifo",
        channel: str | None = None,
        direction: str = "both",
    ) -> None:
        if latency_s < 0 or not math.isfinite(latency_s):
            raise ValueError(f"link {name}: latency_s must be finite and >= 0, got {latency_s}")
        if bandwidth_Bps <= 0 or math.isnan(bandwidth_Bps):
            raise ValueError(f"link {name}: bandwidth_Bps must be > 0, got {bandwidth_Bps}")
        self.name = name
        self.host = host  # the host whose track shows this link ("" for none)
        self.latency_s = float(latency_s)
        self.bandwidth_Bps = float(bandwidth_Bps)
        if sharing not in SHARING:
            raise ValueError(f"link {name}: sharing must be one of {SHARING}, got {sharing!r}")
        self.channel = channel if channel is not None else name
        self.direction = direction
        self.sharing = sharing
        # The model that shares this link: every link of one route must have the same.
        self.arbiter: LinkArbiter | FairShare = (
            LinkArbiter.of(env) if sharing == "fifo" else _fair_of(env)
        )
        self.busy = False  # fifo: held by a granted claim
        self.flows: dict[Any, None] = {}  # fair: the flows crossing it, in arrival order
        # (time_s, bytes/s carried from then on): the link's load over time, for telemetry.
        self.rates: list[tuple[float, float]] = []

    def set_rate(self, now_s: float, rate_Bps: float) -> None:
        """Record that from ``now_s`` on the link carries ``rate_Bps`` (telemetry)."""
        rates = self.rates
        if rates and rates[-1][0] == now_s:
            rates.pop()
        if not rates or rates[-1][1] != rate_Bps:
            rates.append((now_s, rate_Bps))

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link alone, ignoring any queueing."""
        # Hockney's alpha–beta model: t = alpha + n * beta, beta = 1 / bandwidth.
        return self.latency_s + nbytes / self.bandwidth_Bps

    def __repr__(self) -> str:
        return (
            f"Link({self.name!r}, latency_s={self.latency_s!r}, "
            f"bandwidth_Bps={self.bandwidth_Bps!r})"
        )


def channel_links(
    env: simpy.Environment,
    name: str,
    latency_s: float,
    bandwidth_Bps: float,
    host: str = "",
    *,
    sharing: str,
    duplex: str = "full",
    sides: tuple[str, str] = ("tx", "rx"),
) -> tuple[Link, Link]:
    """Channel ``name`` as (one way, the other way): a link ``name/<side>`` per direction
    when full duplex, one link ``name`` for both when half."""
    if duplex == "half":
        link = Link(env, name, latency_s, bandwidth_Bps, host, sharing=sharing)
        return link, link
    if duplex != "full":
        raise ValueError(f"duplex must be 'full' or 'half', got {duplex!r}")
    a, b = (
        Link(
            env,
            f"{name}/{side}",
            latency_s,
            bandwidth_Bps,
            host,
            sharing=sharing,
            channel=name,
            direction=side,
        )
        for side in sides
    )
    return a, b


_FAIR: weakref.WeakKeyDictionary[simpy.Environment, FairShare] = weakref.WeakKeyDictionary()


def _fair_of(env: simpy.Environment) -> FairShare:
    """The fair-sharing model of ``env`` (one per SimPy environment)."""
    model = _FAIR.get(env)
    if model is None:
        model = _FAIR[env] = FairShare(env)
    return model


def ordered(links: Sequence[Link]) -> list[Link]:
    """Links deduplicated and sorted by name: one global acquisition order avoids deadlock."""
    if len(links) == 1:
        return [links[0]]
    if len(links) == 2:  # a worker–PS route: the common case, without the dict and sort
        a, b = links
        if a is b:
            return [a]
        return [a, b] if a.name <= b.name else [b, a]
    unique = {id(link): link for link in links}
    return sorted(unique.values(), key=lambda link: link.name)


class _Claim:
    """One pending or granted claim on a set of links."""

    __slots__ = ("event", "granted", "links", "seq", "waiting")

    def __init__(self, event: simpy.Event, links: list[Link]) -> None:
        self.event = event
        self.links = links
        self.granted = False
        self.waiting = False
        self.seq = 0  # arrival order among waiting claims


class LinkArbiter:
    """Grants sets of links atomically: a claim gets all its links when all are free.

    Taking links one by one (even in a global order, which avoids deadlock) lets
    a transfer hold the links it already has while it waits for the others: a
    parameter server's NIC would then sit idle, reserved by a transfer waiting
    for a busy worker NIC, and the convoy serialises everything. Here a claim
    holds nothing until it can have everything. Claims are served in arrival
    order, and a later claim whose links are all free goes ahead of an earlier
    one that is still blocked (backfilling), so a free link is never left idle
    while some claim could use it. Deterministic: the order is the order of
    arrival on the SimPy clock.
    """

    _by_env: ClassVar[weakref.WeakKeyDictionary[simpy.Environment, LinkArbiter]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._seq = 0
        # Waiting claims per link (keyed by id), in arrival order. A claim leaves them
        # lazily: once granted or withdrawn it is skipped and dropped from the front.
        self._queues: dict[int, deque[_Claim]] = {}

    @classmethod
    def of(cls, env: simpy.Environment) -> LinkArbiter:
        """The arbiter of ``env`` (one per SimPy environment)."""
        arbiter = cls._by_env.get(env)
        if arbiter is None:
            arbiter = cls._by_env[env] = cls(env)
        return arbiter

    def claim(self, links: list[Link]) -> _Claim:
        """Ask for ``links``; ``claim.event`` fires when they are all held.

        Every waiting claim has a busy link (each dispatch leaves it so, and links
        only become free in :meth:`release`, which dispatches), so a new claim is
        granted at once exactly when its own links are free.
        """
        claim = _Claim(self.env.event(), links)
        for link in links:
            if link.busy:
                break
        else:
            self._grant(claim)
            return claim
        self._seq += 1
        claim.seq, claim.waiting = self._seq, True
        for link in links:
            self._queues.setdefault(id(link), deque()).append(claim)
        return claim

    def release(self, claim: _Claim) -> None:
        """Give the links of a granted claim back; withdraw a pending one."""
        if claim.granted:
            for link in claim.links:
                link.busy = False
            claim.granted = False
            self._dispatch(claim.links)
        elif claim.waiting:
            claim.waiting = False

    def _grant(self, claim: _Claim) -> None:
        for link in claim.links:
            link.busy = True
        claim.granted, claim.waiting = True, False
        claim.event.succeed()

    def _dispatch(self, freed: list[Link]) -> None:
        """Grant, in arrival order, every waiting claim whose links are now all free.

        Only claims on a just-freed link can have become grantable, and once such a
        link is taken again every later claim on it stays blocked, so each freed
        link's queue is read from its front only until the link is busy again
        (merged by arrival order). The grants, and their order, are those of a scan
        over all waiting claims — without its cost, quadratic when a thousand
        workers queue on one parameter server's NIC.
        """
        heads = []
        for link in freed:
            queue = self._queues.get(id(link))
            while queue and not queue[0].waiting:
                queue.popleft()
            if queue:
                rest = iter(queue)
                first = next(rest)
                heads.append((first.seq, id(link), first, rest, link))
        if not heads:
            return
        heapq.heapify(heads)
        while heads:
            _, key, claim, rest, link = heapq.heappop(heads)
            if link.busy:
                continue
            if claim.waiting:
                for other in claim.links:
                    if other.busy:
                        break
                else:
                    self._grant(claim)
                    continue
            for following in rest:
                if following.waiting:
                    heapq.heappush(heads, (following.seq, key, following, rest, link))
                    break
        for link in freed:
            queue = self._queues.get(id(link))
            while queue and not queue[0].waiting:
                queue.popleft()


def hold_links(
    env: simpy.Environment,
    links: Sequence[Link],
    seconds: float,
    link_bytes: Sequence[float] | None = None,
) -> Generator[simpy.Event, Any, tuple[float, float]]:
    """SimPy process: occupy every link for ``seconds`` of full-speed work.

    ``fifo``: wait until every link is free and hold them all for ``seconds`` (the
    links are taken together, see :class:`LinkArbiter`). ``fair``: run at once as one
    flow that, alone, takes exactly ``seconds``, slowed while it shares its links (see
    :mod:`simdist.network.fair`). ``link_bytes`` (aligned with ``links``) are the bytes
    each link really carries, for telemetry (default: the link's full capacity).
    Returns ``(start_s, end_s)``, after any queueing. If the process is interrupted,
    a pending claim is withdrawn and held links or the flow are released.
    """
    if seconds < 0:
        raise ValueError(f"cannot hold links for a negative time: {seconds}")
    held, per_link = held_order(links, link_bytes)
    return (yield from hold_ordered(env, held, seconds, per_link))


def held_order(
    links: Sequence[Link], link_bytes: Sequence[float] | None = None
) -> tuple[list[Link], list[float] | None]:
    """``links`` in acquisition order (:func:`ordered`), with ``link_bytes`` realigned."""
    held = ordered(links)
    if link_bytes is None:
        return held, None
    by_name = {link.name: b for link, b in zip(links, link_bytes, strict=True)}
    return held, [by_name[link.name] for link in held]


def hold_ordered(
    env: simpy.Environment,
    held: list[Link],
    seconds: float,
    per_link: list[float] | None,
) -> Generator[simpy.Event, Any, tuple[float, float]]:
    """:func:`hold_links` on links already in :func:`held_order` (callers that cache it)."""
    if not held:
        yield env.timeout(seconds)
        return env.now - seconds, env.now
    model = held[0].arbiter
    if isinstance(model, FairShare):
        done = env.event()
        start = env.now
        flow = model.start(held, seconds, done.succeed, link_bytes=per_link, collective=True)
        try:
            yield done
            return start, env.now
        finally:
            model.stop(flow)
    claim = model.claim(held)
    try:
        yield claim.event
        start = env.now
        for i, link in enumerate(held):
            rate = link.bandwidth_Bps if per_link is None else per_link[i] / (seconds or 1.0)
            link.set_rate(start, rate)
        yield env.timeout(seconds)
        return start, env.now
    finally:
        if claim.granted:
            for link in held:
                link.set_rate(env.now, 0.0)
        model.release(claim)


class Countdown:
    """Waits for a set of messages: ``event`` fires when the last of them has arrived.

    What ``env.all_of`` of their ``done`` events does, in the same SimPy step — the
    one that processes the last ``done`` — for fewer events. A message counted here
    (its ``countdown``) is counted at its arrival (:func:`arrive`), and a ``done``
    that then has nobody else to call is marked processed instead of being
    scheduled: its step would have called nothing. Only the last arrival's ``done``
    is scheduled, and ``fire`` is its first callback, so the countdown's event is
    scheduled exactly where ``all_of`` (or a counter on every ``done``) scheduled it.
    Leaving out steps that call nothing moves no other event: SimPy orders events of
    one instant by when they were scheduled, and that order is unchanged.

    A message takes a countdown only while nothing listens to its ``done`` (its
    ``countdown`` None, ``done.callbacks`` empty), so the countdown is its first
    listener, as it would have been; the messages of one countdown are all counted
    this way (:meth:`Network.join <simdist.network.core.Network.join>`).
    """

    __slots__ = ("event", "remaining")

    def __init__(self, event: simpy.Event, remaining: int) -> None:
        self.event = event
        self.remaining = remaining

    def fire(self, _: simpy.Event) -> None:
        """The last message's ``done`` is being processed: the set has arrived."""
        self.event.succeed()

    def count(self, _: simpy.Event) -> None:
        """A ``done`` callback, for messages that others listen to as well: each is counted
        when its ``done`` is processed, and the last one fires the event (``all_of``'s way)."""
        self.remaining -= 1
        if not self.remaining:
            self.event.succeed()


def arrive(done: simpy.Event, value: Any, countdown: Countdown | None) -> None:
    """A message has arrived: trigger its ``done`` with ``value``, counting it first.

    See :class:`Countdown`: with a countdown still waiting for others and no listener
    of its own, ``done`` is marked processed now rather than scheduled.
    """
    if countdown is not None:
        countdown.remaining -= 1
        if countdown.remaining == 0:
            done.callbacks.insert(0, countdown.fire)
        elif not done.callbacks:
            # succeed() and a later step that calls nothing, in one go (SimPy's own state)
            done._ok, done._value, done.callbacks = True, value, None  # type: ignore[assignment]
            return
    done.succeed(value)


class Path(NamedTuple):
    """What a :class:`Transfer` needs of its route, the same for every message on it."""

    links: list[Link]  # deduplicated, in acquisition order (:func:`ordered`)
    ref_Bps: float  # the slowest link's bandwidth: the rate of a message alone on the route
    latency_s: float  # every hop's latency, summed
    arbiter: LinkArbiter | FairShare  # the links' sharing model


def path_of(links: Sequence[Link]) -> Path:
    """The :class:`Path` of a route over ``links`` (callers sending many messages on one
    route compute it once)."""
    route = ordered(links)
    if not route:
        raise ValueError("a Transfer needs at least one link")
    return Path(
        route,
        min(link.bandwidth_Bps for link in route),
        sum(link.latency_s for link in route),
        route[0].arbiter,
    )


class Transfer:
    """One message on its way along a route, driven by callbacks.

    Alpha–beta along a path (Hockney 1994, "The communication challenge for
    MPP"): the message streams at the slowest link's rate and pays every hop's
    latency once, so alone it arrives ``sum(latency_s) + nbytes / min(bandwidth_Bps)``
    after it starts. Only the serialisation, ``nbytes / min(bandwidth_Bps)``,
    occupies the links: latency is propagation, during which the links already
    carry the next message. Store-and-forward is not modelled.

    ``fifo``: claim the route's links, hold them for the serialisation, release
    them, so n messages queued on one NIC arrive at ``latency + k·nbytes/bandwidth``
    for k = 1..n. ``fair``: start streaming at once at the route's max-min fair
    rate, so the n messages share the NIC and all arrive at ``latency +
    n·nbytes/bandwidth``. Then arrive after the latency — without a SimPy process
    of its own, which parameter_server and central_storage would otherwise pay per
    transfer (under ``fair`` sharing, messages whose serialisations end together and
    whose latencies are equal arrive in one SimPy event: :meth:`FairShare.later`).
    ``done`` fires with ``(start_s, arrival_s)`` in the step after the arrival;
    ``on_arrival(start_s, arrival_s)`` runs at the arrival itself, before ``done`` is
    scheduled; ``sent_s`` is when the serialisation ended. :meth:`cancel` (a failure)
    withdraws a pending claim or flow, or releases held links, and nothing more
    happens. ``path``: the route's :class:`Path`, when the caller has it.
    """

    __slots__ = (
        "_arbiter",
        "_claim",
        "_flow",
        "_latency_s",
        "_on_arrival",
        "countdown",
        "done",
        "env",
        "links",
        "nbytes",
        "sent_s",
        "serialise_s",
        "start_s",
        "state",
    )

    def __init__(
        self,
        env: simpy.Environment,
        links: Sequence[Link],
        nbytes: float,
        on_arrival: Callable[[float, float], None] | None = None,
        *,
        path: Path | None = None,
        done: simpy.Event | None = None,
    ) -> None:
        if nbytes < 0:
            raise ValueError(f"cannot transfer a negative number of bytes: {nbytes}")
        route, ref_Bps, self._latency_s, arbiter = path if path is not None else path_of(links)
        self.env = env
        self.links = route
        self.nbytes = nbytes
        self.done = env.event() if done is None else done
        self.countdown: Countdown | None = None  # what waits for it with others, if any
        self.start_s: float | None = None
        self.sent_s: float | None = None
        self.state = "claimed"  # claimed → serialising → in flight → arrived | cancelled
        self._on_arrival = on_arrival
        self.serialise_s = nbytes / ref_Bps
        self._arbiter = arbiter
        self._flow = None
        if isinstance(arbiter, FairShare):
            self.state = "serialising"
            self.start_s = env.now
            self._flow = arbiter.start(route, self.serialise_s, self._sent, ref_Bps=ref_Bps)
        else:
            self._claim = arbiter.claim(route)
            self._claim.event.callbacks.append(self._granted)

    def _granted(self, _: simpy.Event) -> None:
        if self.state != "claimed":
            return
        self.state = "serialising"
        now = self.start_s = self.env.now
        if self.serialise_s > 0:
            rate = self.nbytes / self.serialise_s
            for link in self.links:
                link.set_rate(now, rate)
        self.env.timeout(self.serialise_s).callbacks.append(self._serialised)

    def _serialised(self, _: simpy.Event) -> None:
        if self.state != "serialising":
            return
        for link in self.links:
            link.set_rate(self.env.now, 0.0)
        self._arbiter.release(self._claim)  # type: ignore[union-attr]
        self._sent()

    def _sent(self) -> None:
        self.state = "in flight"
        self.sent_s = self.env.now
        if self._flow is not None:
            self._flow = None  # the flow called back: drop the Transfer ↔ Flow cycle
            self._arbiter.later(self._latency_s, self._arrived)  # type: ignore[union-attr]
            return
        self.env.timeout(self._latency_s).callbacks.append(self._arrived)

    def _arrived(self, _: simpy.Event) -> None:
        if self.state != "in flight":
            return
        self.state = "arrived"
        assert self.start_s is not None
        now = self.env.now
        on_arrival, self._on_arrival = self._on_arrival, None
        if on_arrival is not None:
            # Dropped first: callers' closures refer back to this Transfer, and a cycle
            # per message would keep every message alive until a full collection.
            on_arrival(self.start_s, now)
        arrive(self.done, (self.start_s, now), self.countdown)

    def cancel(self) -> None:
        """Cut the transfer (a failure): free its claim, flow or links; it never arrives."""
        if self.state in ("claimed", "serialising"):
            if self._flow is not None:
                self._arbiter.stop(self._flow)  # type: ignore[union-attr]
            else:
                if self.state == "serialising":
                    for link in self.links:
                        link.set_rate(self.env.now, 0.0)
                self._arbiter.release(self._claim)  # type: ignore[union-attr]
        elif self.state != "in flight":
            return
        self.state = "cancelled"
        self._on_arrival = self._flow = None
