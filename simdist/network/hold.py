"""Holding links for a time: a collective's closed-form duration on the wire.

Under either sharing model (:mod:`simdist.network.link`) a collective alone on its links
takes exactly its closed-form time. Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from simdist.network.fair import FairShare
from simdist.network.link import Link, ordered

if TYPE_CHECKING:
    import simpy


def hold_links(
    env: simpy.Environment,
    links: Sequence[Link],
    seconds: float,
    link_bytes: Sequence[float] | None = None,
) -> Generator[simpy.Event, Any, tuple[float, float]]:
    """SimPy process: occupy every link for ``seconds`` of full-speed work.

    ``fifo``: wait until every link is free and hold them all for ``seconds`` (the
    links are taken together, see :class:`~simdist.network.arbiter.LinkArbiter`).
    ``fair``: run at once as one flow that, alone, takes exactly ``seconds``, slowed while
    it shares its links (see :mod:`simdist.network.fair`). ``link_bytes`` (aligned with
    ``links``) are the bytes each link really carries, for telemetry (default: the link's
    full capacity).
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
