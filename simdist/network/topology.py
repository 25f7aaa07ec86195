"""What a topology answers: which links a message crosses, and what a collective costs.

A topology owns the links of a cluster. :meth:`Topology.route` gives the links a
point-to-point message occupies; :meth:`Topology.collective` gives the closed-form
duration of a collective over a set of devices and the links it holds meanwhile. A
topology never asks which collective it prices: it takes the collective's pattern from
:mod:`simdist.collectives.registry` (:meth:`Topology.pattern`) and says which links
price each of its scopes (the one network, inside a host, across hosts).
:class:`simdist.network.Network` turns both into SimPy events. A new topology
is one module with one subclass, registered in :mod:`simdist.network`.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

from simdist.collectives import OPS, Pattern
from simdist.collectives.registry import pattern as registry_pattern
from simdist.hardware.cluster import Cluster, Device, Host
from simdist.network.link import Link, channel_links

if TYPE_CHECKING:
    import simpy

    from simdist.scenario import Scenario

#: A message's end point: a device, or a host as a whole (its CPU, or a PS task).
Endpoint = Device | Host

#: The collectives a topology prices (:data:`simdist.collectives.OPS`).
COLLECTIVES: tuple[str, ...] = OPS

#: Links as a helper makes them: a (transmit, receive) pair, a fabric's list.
LinkGroup = TypeVar("LinkGroup", bound=Sequence[Link])


def host_name(endpoint: Endpoint) -> str:
    """The name of the host (the task, whose track shows it) an end point sits on."""
    return endpoint.host if isinstance(endpoint, Device) else endpoint.name


def machine_of(endpoint: Endpoint) -> str:
    """The machine an end point sits on: the owner of the NIC and links its bytes use.

    A worker host and its devices are one machine, named after the host. A
    parameter-server task is a machine of its own (``ps_placement: separate``) or sits on
    a worker's (``colocated``: :attr:`Host.machine`), sharing that machine's NIC. Every
    topology routes by machine, never by task name.
    """
    if isinstance(endpoint, Device):
        return endpoint.host  # devices live on worker hosts, each its own machine
    return endpoint.machine or endpoint.name


def hosts_of(devices: Sequence[Device]) -> dict[str, int]:
    """Host names of ``devices`` in first-seen order → how many of them each holds."""
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.host] = counts.get(device.host, 0) + 1
    return counts


def nic_links(
    env: simpy.Environment,
    host: str,
    latency_s: float,
    bandwidth_Bps: float,
    duplex: str,
    sharing: str,
) -> tuple[Link, Link]:
    """A host's NIC as (transmit, receive) links: two when full duplex, one link twice when half."""
    return channel_links(
        env, f"{host}/nic", latency_s, bandwidth_Bps, host, sharing=sharing, duplex=duplex
    )


def ranked(devices: Sequence[Device]) -> list[Device]:
    """``devices`` host by host (hosts in first-seen order), as MPI's block placement.

    A ring then crosses each host boundary once, as the closed forms assume; the sort is
    stable, so the root of a broadcast or reduce (``devices[0]``) stays rank 0.
    """
    order = {host: i for i, host in enumerate(hosts_of(devices))}
    return sorted(devices, key=lambda device: order[device.host])


class Topology(ABC):
    """The links of one cluster and how messages and collectives use them.

    Subclasses build their links in ``__init__`` (one :class:`Link` per physical
    channel, named ``<host>/<kind>`` and tagged with the host whose timeline
    shows it), register each with :meth:`add_link` or :meth:`add_links` as they make
    it, and implement :meth:`route` and :meth:`collective`.
    """

    #: The name scenarios and strategies use for this topology.
    name: ClassVar[str] = ""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._links: dict[int, Link] = {}  # registered, in creation order, once each
        # collective_link_bytes' cache: the shares per device names.
        self._link_share_cache: dict[tuple[str, str, tuple[str, ...]], dict[int, float]] = {}

    def add_link(self, link: Link) -> Link:
        """Register ``link`` as one of this topology's (:meth:`links`) and return it."""
        self._links.setdefault(id(link), link)
        return link

    def add_links(self, links: LinkGroup) -> LinkGroup:
        """Register every link of ``links`` (:meth:`add_link`) and return ``links`` as given.

        A half-duplex channel is one link twice in its (transmit, receive) pair: it is
        registered once.
        """
        for link in links:
            self.add_link(link)
        return links

    @classmethod
    @abstractmethod
    def from_scenario(
        cls, env: simpy.Environment, cluster: Cluster, scenario: Scenario
    ) -> Topology:
        """This topology for ``scenario``'s cluster, its links on ``env``."""

    @abstractmethod
    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        """The links a message from ``src`` to ``dst`` occupies."""

    @abstractmethod
    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        """Seconds for collective ``op`` of ``nbytes`` over ``devices``, and the links it holds."""

    def grid(self) -> tuple[int, int]:
        """The (x, y) a torus2d collective over every device uses; (0, 0): the most square."""
        return 0, 0

    def pattern(self, op: str, devices: Sequence[Device], algo: str) -> Pattern:
        """The registry's pattern of ``op`` (``algo``) over ``devices`` ranked host by host.

        Hierarchical algorithms learn the devices per host from the devices themselves
        (0 when the hosts hold different numbers, which they refuse).
        """
        counts = set(hosts_of(devices).values())
        per_host = counts.pop() if len(counts) == 1 else 0
        return registry_pattern(op, algo, len(devices), per_host, self.grid())

    def links(self) -> list[Link]:
        """Every link of this topology, once each: by host (the cluster's order), then by name.

        The links registered with :meth:`add_link` / :meth:`add_links`: what telemetry
        (``links.csv``, the heatmap, a job's share of the network) covers, so a link a
        topology makes and does not register carries traffic unrecorded. A half-duplex
        NIC, one link in both ``tx`` and ``rx``, appears once; links of no host (uplinks)
        come last.
        """
        names = [*self.cluster.machines, *(h.name for h in self.cluster.hosts)]
        rank: dict[str, int] = {}
        for name in names:
            rank.setdefault(name, len(rank))
        return sorted(
            self._links.values(),
            key=lambda link: (rank.get(link.host, len(rank)), _natural(link.name)),
        )

    def collective_link_bytes(
        self,
        op: str,
        devices: Sequence[Device],
        nbytes: float,
        algo: str,
        links: Sequence[Link],
    ) -> list[float]:
        """Bytes collective ``op`` (``algo``) of ``nbytes`` puts on each of ``links``.

        The collective's edges (:meth:`simdist.collectives.pattern.Pattern.edges`) over
        the devices ranked host by host (:func:`ranked`), each routed by :meth:`route`:
        a link carries the bytes of every message whose route crosses it, so the
        intra-host link carries its devices' share and a NIC side its host's. Bytes
        routed over links the collective does not hold are not counted. Per (op, algo,
        devices), the shares are computed once and scaled by ``nbytes``. A torus2d
        collective uses the topology's :meth:`grid` when it matches.
        """
        # The shares are remembered per device names; a strategy's collective over the same
        # device list step after step is remembered whole by ``Network``.
        cache = self._link_share_cache
        names = (op, algo, tuple(device.name for device in devices))
        shares = cache.get(names)
        if shares is None:
            shares = cache[names] = self._link_shares(op, devices, algo)
        return [shares.get(id(link), 0.0) * nbytes for link in links]

    def _link_shares(self, op: str, devices: Sequence[Device], algo: str) -> dict[int, float]:
        """Bytes per byte of the buffer on each link (by id) the collective's messages cross."""
        order = ranked(devices)
        shares: dict[int, float] = {}
        for src, dst, share in self.pattern(op, order, algo).edges():
            for link in self.route(order[src], order[dst]):
                shares[id(link)] = shares.get(id(link), 0.0) + share
        return shares


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key under which ``w2/nic`` comes before ``w10/nic``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name))
