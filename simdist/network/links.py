"""Links and their arbitration: the wire itself.

A :class:`Link` has a latency and a bandwidth and carries one transfer at a time;
the :class:`LinkArbiter` grants sets of links atomically; a :class:`Transfer` moves
bytes along a route by callbacks; :func:`hold_links` occupies links for a given time
(a collective's closed-form duration). Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar

import simpy


class Link:
    """A channel with a latency and a bandwidth that carries one transfer at a time.

    Cost follows the alpha–beta (Hockney) model, ``latency_s + nbytes / bandwidth_Bps``.
    A transfer or collective takes all the links it needs at once, when all are free
    (:class:`LinkArbiter`), so transfers that want a link at the same time serialise:
    contention on a shared NIC or PCIe bus appears without special cases.
    """

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        latency_s: float,
        bandwidth_Bps: float,
        host: str = "",
    ) -> None:
        if latency_s < 0 or not math.isfinite(latency_s):
            raise ValueError(f"link {name}: latency_s must be finite and >= 0, got {latency_s}")
        if bandwidth_Bps <= 0 or math.isnan(bandwidth_Bps):
            raise ValueError(f"link {name}: bandwidth_Bps must be > 0, got {bandwidth_Bps}")
        self.name = name
        self.host = host  # the host whose track shows this link ("" for none)
        self.latency_s = float(latency_s)
        self.bandwidth_Bps = float(bandwidth_Bps)
        self.arbiter = LinkArbiter.of(env)
        self.busy = False

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link alone, ignoring any queueing."""
        # Hockney's alpha–beta model: t = alpha + n * beta, beta = 1 / bandwidth.
        return self.latency_s + nbytes / self.bandwidth_Bps

    def __repr__(self) -> str:
        return (
            f"Link({self.name!r}, latency_s={self.latency_s!r}, "
            f"bandwidth_Bps={self.bandwidth_Bps!r})"
        )


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
    env: simpy.Environment, links: Sequence[Link], seconds: float
) -> Generator[simpy.Event, Any, tuple[float, float]]:
    """SimPy process: wait until every link is free, hold them all for ``seconds``.

    The links are taken together (see :class:`LinkArbiter`). Returns
    ``(start_s, end_s)``, the interval actually held, after any queueing. If the
    process is interrupted, a pending claim is withdrawn and held links are released.
    """
    if seconds < 0:
        raise ValueError(f"cannot hold links for a negative time: {seconds}")
    held = ordered(links)
    if not held:
        yield env.timeout(seconds)
        return env.now - seconds, env.now
    arbiter = held[0].arbiter
    claim = arbiter.claim(held)
    try:
        yield claim.event
        start = env.now
        yield env.timeout(seconds)
        return start, env.now
    finally:
        arbiter.release(claim)


class Transfer:
    """One message on its way along a route, driven by callbacks.

    Alpha–beta along a path (Hockney 1994, "The communication challenge for
    MPP"): the message streams at the slowest link's rate and pays every hop's
    latency once, so it arrives ``sum(latency_s) + nbytes / min(bandwidth_Bps)``
    after it starts. Only the serialisation, ``nbytes / min(bandwidth_Bps)``,
    occupies the links: latency is propagation, during which the links already
    carry the next message. So n messages queued on one NIC arrive at
    ``latency + k·nbytes/bandwidth`` for k = 1..n. Store-and-forward is not
    modelled.

    Claim the route's links, hold them for the serialisation, release them,
    arrive after the latency — without a SimPy process of its own, which
    parameter_server and central_storage would otherwise pay per transfer.
    ``done`` fires with ``(start_s, arrival_s)`` in the step after the arrival;
    ``on_arrival(start_s, arrival_s)`` runs at the arrival itself, before
    ``done`` is scheduled. :meth:`cancel` (a failure) withdraws a pending claim
    or releases held links, and nothing more happens.
    """

    __slots__ = (
        "_arbiter",
        "_claim",
        "_latency_s",
        "_on_arrival",
        "done",
        "env",
        "links",
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
    ) -> None:
        if nbytes < 0:
            raise ValueError(f"cannot transfer a negative number of bytes: {nbytes}")
        route = ordered(links)
        if not route:
            raise ValueError("a Transfer needs at least one link")
        self.env = env
        self.links = route
        self.done = env.event()
        self.start_s: float | None = None
        self.state = "claimed"  # claimed → serialising → in flight → arrived | cancelled
        self._on_arrival = on_arrival
        self.serialise_s = nbytes / min(link.bandwidth_Bps for link in route)
        self._latency_s = sum(link.latency_s for link in route)
        self._arbiter = route[0].arbiter
        self._claim = self._arbiter.claim(route)
        self._claim.event.callbacks.append(self._granted)

    def _granted(self, _: simpy.Event) -> None:
        if self.state != "claimed":
            return
        self.state = "serialising"
        self.start_s = self.env.now
        self.env.timeout(self.serialise_s).callbacks.append(self._serialised)

    def _serialised(self, _: simpy.Event) -> None:
        if self.state != "serialising":
            return
        self._arbiter.release(self._claim)
        self.state = "in flight"
        self.env.timeout(self._latency_s).callbacks.append(self._arrived)

    def _arrived(self, _: simpy.Event) -> None:
        if self.state != "in flight":
            return
        self.state = "arrived"
        assert self.start_s is not None
        if self._on_arrival is not None:
            self._on_arrival(self.start_s, self.env.now)
        self.done.succeed((self.start_s, self.env.now))

    def cancel(self) -> None:
        """Cut the transfer (a failure): free its claim or links; it never arrives."""
        if self.state in ("claimed", "serialising"):
            self._arbiter.release(self._claim)
        elif self.state != "in flight":
            return
        self.state = "cancelled"
