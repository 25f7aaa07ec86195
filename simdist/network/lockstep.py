"""Lock-step copies: one copy's traffic standing for identical copies on links of their own.

A layout of D data-parallel copies (hybrid's pipelines) runs the same schedule in every
copy between its synchronisations. When each copy's messages and collectives cross links
of its own (no link carries two copies' traffic), each alike its twin in the other copies
(bandwidth, latency, sharing), and nothing random moves a copy's clock, the copies are
independent: fair sharing solves each connected component of flows and links alone
(:mod:`simdist.network.fair`), the ``fifo`` arbiter grants link by link. They are
identical to the last bit only where their links also sort alike: fair sharing puts a
component's links in name order (its progressive filling breaks ties, and subtracts, in
that order; routes are taken in name order too), so copies whose links' names sort
differently (``worker9`` before ``worker10`` in one copy, ``worker19`` after ``worker100``
in another) may round a shared rate differently. So the copies are split into runs of
consecutive copies whose links sort as the run's first copy's do: the first, the
*leader*, is simulated, and its *followers* take its rows
(:meth:`Network.collective <simdist.network.core.Network.collective>`'s ``copies``,
:meth:`Network.send_rows <simdist.network.core.Network.send_rows>`) and, at the end of the
stretch, its links' loads (:meth:`LockstepCopies.follow`).

:meth:`LockstepCopies.of` checks the links (each copy's routes and collective link sets,
aligned with copy 0's); :meth:`LockstepCopies.in_step` checks, before each stretch, that
every follower's links have carried exactly what its leader's have (a synchronisation
between stretches, run on every copy, may load them differently); :meth:`follow` checks
after it that the leaders' traffic stayed on their own links and that no follower's link
moved. Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from simdist.errors import SimdistError

if TYPE_CHECKING:
    from simdist.network.link import Link


def _alike(a: Link, b: Link) -> bool:
    """Whether ``b`` carries traffic exactly as ``a`` does (same speed, delay, sharing)."""
    return (
        a.bandwidth_Bps == b.bandwidth_Bps
        and a.latency_s == b.latency_s
        and a.sharing == b.sharing
        and a.direction == b.direction
        and type(a.arbiter) is type(b.arbiter)
    )


def _state(link: Link) -> tuple[int, object]:
    """A link's number of load records and its last (kept: the same object while nothing
    was recorded since; :meth:`Link.load_record`)."""
    record = link.load_record()
    return len(record), record[-1] if record else None


def _moved(link: Link, before: tuple[int, object]) -> bool:
    """Whether ``link`` carried traffic since ``before`` (its :func:`_state` then)."""
    n, last = _state(link)
    return n != before[0] or last is not before[1]


class LockstepCopies:
    """The copies' links, twin by twin, and which copies lead and which follow."""

    def __init__(
        self,
        links: list[list[Link]],
        leaders: dict[int, list[int]],
        every_link: Sequence[Link],
    ) -> None:
        #: ``links[d][i]``: copy d's twin of copy 0's i-th link.
        self.links = links
        #: Each leader (a copy simulated) and its followers (copies taking its rows).
        self.leaders = leaders
        self._pairs = [
            (mine, [links[f][i] for f in followers])
            for d, followers in leaders.items()
            for i, mine in enumerate(links[d])
            if followers
        ]
        self._every = list(every_link)
        self._own = {id(link) for d in leaders for link in links[d]}
        self._synced = [0] * len(self._pairs)  # rates known equal up to here (see in_step)
        self._marks: list[int] | None = None
        self._before: list[tuple[int, object]] = []

    @classmethod
    def of(
        cls, traffic: Sequence[Sequence[Sequence[Link]]], every_link: Sequence[Link]
    ) -> LockstepCopies | None:
        """The lock-step copies of ``traffic``, or None when no copy can follow another.

        ``traffic[d][k]`` is the list of links of copy d's k-th route or collective, aligned
        across copies (the same position in each list is the same hop); ``every_link`` every
        link of the network. None unless each copy's links are twins of copy 0's, one for
        one and alike (:func:`_alike`), and no link is in two copies; and unless some copy
        sorts its links as the copy before it does (module text).
        """
        if len(traffic) < 2:
            return None
        first = traffic[0]
        index: dict[int, int] = {}  # copy 0's link → its position
        zero: list[Link] = []
        for route in first:
            for link in route:
                if id(link) not in index:
                    index[id(link)] = len(zero)
                    zero.append(link)
        twins: list[list[Link | None]] = [[None] * len(zero) for _ in traffic]
        twin_of: dict[int, tuple[int, int]] = {}  # a link → (its copy, its position)
        for d, routes in enumerate(traffic):
            if len(routes) != len(first):
                return None
            mine = twins[d]
            for route0, route in zip(first, routes, strict=True):
                if len(route0) != len(route):
                    return None
                for a, b in zip(route0, route, strict=True):
                    i = index[id(a)]
                    if twin_of.setdefault(id(b), (d, i)) != (d, i) or not _alike(a, b):
                        return None  # a link in two copies or two places, or unlike its twin
                    if mine[i] is not None and mine[i] is not b:
                        return None  # copy 0's link has two twins in copy d
                    mine[i] = b
        links = [[b for b in mine if b is not None] for mine in twins]
        if any(len(mine) != len(zero) for mine in links):
            return None
        leaders: dict[int, list[int]] = {}
        order = None
        for d, mine in enumerate(links):
            names = [link.name for link in mine]
            sorting = sorted(range(len(names)), key=names.__getitem__)
            if sorting == order:
                leaders[next(reversed(leaders))].append(d)
            else:
                leaders[d], order = [], sorting
        if len(leaders) == len(links):
            return None
        return cls(links, leaders, every_link)

    def in_step(self) -> bool:
        """Whether every follower's links have carried what its leader's have."""
        for i, (a, others) in enumerate(self._pairs):
            k = self._synced[i]
            tail = a.rates[k:]
            for b in others:
                if len(b.rates) != len(a.rates) or b.rates[k:] != tail:
                    return False
        return True

    def mark(self) -> None:
        """Start a stretch that the leaders alone run (their links' loads remembered)."""
        self._marks = [len(a.load_record()) for a, _ in self._pairs]
        self._before = [_state(link) for link in self._every]

    def follow(self) -> None:
        """End the stretch: every follower's links take its leader's load since :meth:`mark`.

        The entries are shared, not copied (:meth:`Link.load_record`: nothing changes them
        in place). The one entry before the mark may have been replaced (a rate set again at
        the same instant), so it is taken again too.
        """
        if self._marks is None:
            raise RuntimeError("follow() without mark()")
        own = self._own
        for link, before in zip(self._every, self._before, strict=True):
            if id(link) not in own and _moved(link, before):
                raise SimdistError(
                    f"lock-step copies: link {link.name} carried traffic while the leading "
                    "copies alone ran; its copies would be wrong (a bug: please report it)"
                )
        for i, ((a, others), before) in enumerate(zip(self._pairs, self._marks, strict=True)):
            k = max(before - 1, 0)
            tail = a.load_record()[k:]
            for b in others:
                b.replace_load(k, tail, a)
            self._synced[i] = max(len(a.rates) - 1, 0)
        self._marks = None
