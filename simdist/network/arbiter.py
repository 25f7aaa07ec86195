"""The arbiter of ``fifo`` links: sets of links granted atomically, in arrival order.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import heapq
import weakref
from collections import deque
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    import simpy


class FifoLink(Protocol):
    """What the arbiter needs of a link (:class:`simdist.network.link.Link` is one)."""

    name: str
    busy: bool  # held by a granted claim


class Claim:
    """One pending or granted claim on a set of links."""

    __slots__ = ("event", "granted", "links", "seq", "waiting")

    def __init__(self, event: simpy.Event, links: list[FifoLink]) -> None:
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
        self._queues: dict[int, deque[Claim]] = {}

    @classmethod
    def of(cls, env: simpy.Environment) -> LinkArbiter:
        """The arbiter of ``env`` (one per SimPy environment)."""
        arbiter = cls._by_env.get(env)
        if arbiter is None:
            arbiter = cls._by_env[env] = cls(env)
        return arbiter

    def claim(self, links: list[FifoLink]) -> Claim:
        """Ask for ``links``; ``claim.event`` fires when they are all held.

        Every waiting claim has a busy link (each dispatch leaves it so, and links
        only become free in :meth:`release`, which dispatches), so a new claim is
        granted at once exactly when its own links are free.
        """
        claim = Claim(self.env.event(), links)
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

    def release(self, claim: Claim) -> None:
        """Give the links of a granted claim back; withdraw a pending one."""
        if claim.granted:
            for link in claim.links:
                link.busy = False
            claim.granted = False
            self._dispatch(claim.links)
        elif claim.waiting:
            claim.waiting = False

    def _grant(self, claim: Claim) -> None:
        for link in claim.links:
            link.busy = True
        claim.granted, claim.waiting = True, False
        claim.event.succeed()

    def _dispatch(self, freed: list[FifoLink]) -> None:
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
