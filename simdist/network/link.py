"""A link: one direction (or both, half duplex) of a channel, with latency and bandwidth.

A :class:`Link` follows one of two sharing models, chosen per link:

* ``fifo``: a link carries one transfer at a time; the
  :class:`~simdist.network.arbiter.LinkArbiter` grants sets of links atomically, and
  concurrent transfers wait in line;
* ``fair``: concurrent flows split the links' bandwidth max-min fairly, rates
  recomputed whenever a flow starts or ends (:mod:`simdist.network.fair`).

Each link keeps its rate over time (``rates``), for per-link telemetry. What moves over
links is :mod:`simdist.network.transfer` (messages) and :mod:`simdist.network.hold`
(a collective's closed-form duration). Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from simdist.network.arbiter import LinkArbiter
from simdist.network.fair import FairShare
from simdist.network.load_steps import load_steps

if TYPE_CHECKING:
    import simpy

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
            LinkArbiter.of(env) if sharing == "fifo" else FairShare.of(env)
        )
        self.busy = False  # fifo: held by a granted claim
        self.flows: dict[Any, None] = {}  # fair: the flows crossing it, in arrival order
        self.share: Any = None  # fair: its book in FairShare (a LinkShare)
        self.load_log: list[Any] = []  # fair: what crossed it, when (load_steps)
        # fifo: (time_s, bytes/s carried from then on), for telemetry; fair: rebuilt
        # from ``load_log`` when read, and kept while nothing changed (``_rates_at``).
        self._rates: list[tuple[float, float]] = []
        self._rates_at = -1

    @property
    def rates(self) -> list[tuple[float, float]]:
        """The link's load over time: ``[(time_s, bytes/s carried from then on), …]``."""
        if self.load_log:
            version = self.arbiter.version  # type: ignore[union-attr]
            if self._rates_at != version:
                self._rates, self._rates_at = load_steps(self.load_log), version
        return self._rates

    @rates.setter
    def rates(self, value: list[tuple[float, float]]) -> None:
        """Replace the load (``[]`` frees a finished run's record, fair sharing's log too)."""
        self._rates, self._rates_at = value, -1
        self.load_log = []

    def load_record(self) -> list[Any]:
        """What the link's load is kept as: fair sharing's ``load_log`` once a fair flow
        crossed it, else the ``(time_s, bytes/s)`` steps themselves (``set_rate``). Entries
        are never changed in place (a later one at the same instant replaces the last)."""
        return self.load_log if self.load_log else self._rates

    def replace_load(self, start: int, tail: list[Any], like: Link) -> None:
        """Replace the link's load record from entry ``start`` on by ``tail``, entries of
        ``like``'s record (shared: lock-step copies, :mod:`simdist.network.lockstep`)."""
        record = self.load_log if like.load_log else self._rates
        record[start:] = tail
        self._rates_at = -1

    def set_rate(self, now_s: float, rate_Bps: float) -> None:
        """Record that from ``now_s`` on the link carries ``rate_Bps`` (fifo telemetry)."""
        rates = self._rates
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
