"""Messages on their way: a :class:`Transfer` along a :class:`Route`, and the
:class:`Countdown` that waits for a set of them.

A transfer moves bytes along a route by callbacks, without a SimPy process of its own;
alone on its links it takes exactly its closed-form time under either sharing model
(:mod:`simdist.network.link`). Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from simdist.network.arbiter import LinkArbiter
from simdist.network.fair import FairShare
from simdist.network.link import Link, ordered
from simdist.sim import settle

if TYPE_CHECKING:
    import simpy


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
            settle(done, value)  # succeed() and a later step that calls nothing, in one go
            return
    done.succeed(value)


class Route(NamedTuple):
    """What a :class:`Transfer` needs of its route, the same for every message on it."""

    links: list[Link]  # deduplicated, in acquisition order (:func:`ordered`)
    ref_Bps: float  # the slowest link's bandwidth: the rate of a message alone on the route
    latency_s: float  # every hop's latency, summed
    arbiter: LinkArbiter | FairShare  # the links' sharing model


def route_of(links: Sequence[Link]) -> Route:
    """The :class:`Route` over ``links`` (callers sending many messages on one route
    compute it once)."""
    hops = ordered(links)
    if not hops:
        raise ValueError("a Transfer needs at least one link")
    return Route(
        hops,
        min(link.bandwidth_Bps for link in hops),
        sum(link.latency_s for link in hops),
        hops[0].arbiter,
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
    happens. ``route``: the :class:`Route` of ``links``, when the caller has it.
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
        route: Route | None = None,
        done: simpy.Event | None = None,
    ) -> None:
        if nbytes < 0:
            raise ValueError(f"cannot transfer a negative number of bytes: {nbytes}")
        hops, ref_Bps, self._latency_s, arbiter = route if route is not None else route_of(links)
        self.env = env
        self.links = hops
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
            self._flow = arbiter.start(hops, self.serialise_s, self._sent, ref_Bps=ref_Bps)
        else:
            self._claim = arbiter.claim(hops)
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
