"""What a topology answers: which links a message crosses, and what a collective costs.

A topology owns the links of a cluster. :meth:`Topology.route` gives the links a
point-to-point message occupies; :meth:`Topology.collective` gives the closed-form
duration of a collective over a set of devices and the links it holds meanwhile.
:class:`simdist.network.Network` turns both into SimPy events. A new topology
is one module with one subclass, registered in :mod:`simdist.network`.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from simdist.cluster import Cluster, Device, Host
from simdist.network.links import Link

#: A message's end point: a device, or a host as a whole (its CPU, or a PS task).
Endpoint = Device | Host

#: The collectives a topology prices.
COLLECTIVES: tuple[str, ...] = ("allreduce", "broadcast", "reduce")


def host_name(endpoint: Endpoint) -> str:
    """The name of the host an end point sits on."""
    return endpoint.host if isinstance(endpoint, Device) else endpoint.name


def hosts_of(devices: Sequence[Device]) -> dict[str, int]:
    """Host names of ``devices`` in first-seen order → how many of them each holds."""
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.host] = counts.get(device.host, 0) + 1
    return counts


class Topology(ABC):
    """The links of one cluster and how messages and collectives use them.

    Subclasses build their links in ``__init__`` (one :class:`Link` per physical
    channel, named ``<host>/<kind>`` and tagged with the host whose timeline
    shows it) and implement :meth:`route` and :meth:`collective`.
    """

    #: The name scenarios and strategies use for this topology.
    name: ClassVar[str] = ""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @classmethod
    @abstractmethod
    def from_scenario(cls, env: Any, cluster: Cluster, scenario: Any) -> Topology:
        """This topology for ``scenario``'s cluster, its links on ``env``."""

    @abstractmethod
    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        """The links a message from ``src`` to ``dst`` occupies."""

    @abstractmethod
    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        """Seconds for collective ``op`` of ``nbytes`` over ``devices``, and the links it holds."""
