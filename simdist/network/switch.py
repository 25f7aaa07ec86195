"""``switch``: every host on one non-blocking switch, one intra-host link per host.

Each host has a network interface (the scenario's ``links.network``) shared by
every message into or out of it, and an intra-host link (``<host>/intra``, PCIe /
NVLink, the scenario's ``links.intra_host``) shared by its devices. A full-duplex
NIC (``network.duplex: full``, the default) is two links, ``<host>/nic/tx`` and
``<host>/nic/rx``, each with the NIC's full bandwidth; a half-duplex one is a
single ``<host>/nic``. The switch itself never blocks, so only the end points
contend.

Routes go by machine (:func:`~simdist.network.topology.machine_of`): inside one
machine a message crosses the intra-host link — also between a worker and a
parameter-server task co-located on its machine (``cluster.ps_placement``), which
has no NIC of its own; between machines it leaves through the sender's NIC
(transmit side) and enters through the receiver's (receive side).

Collectives over devices of one host run on its intra-host link with that link's
α and B. Over several hosts a flat algorithm (ring, tree, halving-doubling) is
priced with the NIC's α and B — a ring step lasts as long as its slowest edge,
and W of its edges cross the network — and ``hierarchical`` reduces inside each
host over the intra-host link and across hosts over the NICs. Either way the
collective holds both sides of the NIC and the intra-host link of every host
taking part.

With ``cluster.network.intra_host: nvlink`` or ``pcie`` the hosts have NVLink ports
or a PCIe tree instead of one intra-host link (:mod:`simdist.network.intranode`):
:meth:`SwitchTopology.from_scenario` then builds a
:class:`~simdist.network.leaf_spine.LeafSpineTopology` of one leaf, whose collectives
price those links from their communication pattern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from simdist.cluster import Cluster, Device
from simdist.collectives import (
    allreduce_s,
    broadcast_s,
    hierarchical_allreduce_s,
    reduce_s,
)
from simdist.errors import SimdistError
from simdist.network.link import Link, channel_links
from simdist.network.topology import Endpoint, Topology, hosts_of, machine_of


def nic_links(
    env: Any,
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


class SwitchTopology(Topology):
    """Hosts on one non-blocking switch: a NIC and an intra-host link per host."""

    name: ClassVar[str] = "switch"

    def __init__(
        self,
        env: Any,
        cluster: Cluster,
        *,
        nic_latency_s: float,
        nic_bandwidth_Bps: float,
        intra_latency_s: float,
        intra_bandwidth_Bps: float,
        duplex: str = "half",
        sharing: str = "fifo",
    ) -> None:
        super().__init__(cluster)
        self.tx: dict[str, Link] = {}  # a host's NIC, leaving it (== rx when half duplex)
        self.rx: dict[str, Link] = {}
        self.intra: dict[str, Link] = {}
        for name in cluster.machines:  # a co-located PS task shares its worker's links
            self.tx[name], self.rx[name] = self.add_links(
                nic_links(env, name, nic_latency_s, nic_bandwidth_Bps, duplex, sharing)
            )
            intra = Link(
                env, f"{name}/intra", intra_latency_s, intra_bandwidth_Bps, name, sharing=sharing
            )
            self.intra[name] = self.add_link(intra)

    @classmethod
    def from_scenario(cls, env: Any, cluster: Cluster, scenario: Any) -> Topology:
        if getattr(scenario.cluster.network, "intra_host", "shared") != "shared":
            # NVLink ports or a PCIe tree inside each host: a non-blocking switch is a
            # leaf-spine network of one leaf, whose collectives price the intra-host links.
            from simdist.network.leaf_spine import LeafSpineTopology

            return LeafSpineTopology.from_scenario(env, cluster, scenario)
        links = scenario.cluster.links
        return cls(
            env,
            cluster,
            nic_latency_s=links.network.latency_s,
            nic_bandwidth_Bps=links.network.bandwidth_Bps,
            intra_latency_s=links.intra_host.latency_s,
            intra_bandwidth_Bps=links.intra_host.bandwidth_Bps,
            duplex=scenario.cluster.network.duplex,
            sharing=scenario.cluster.network.sharing,
        )

    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        a, b = machine_of(src), machine_of(dst)
        if a == b:  # one machine (a worker and its co-located PS too): no NIC
            return [self.intra[a]]
        return [self.tx[a], self.rx[b]]

    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        hosts = hosts_of(devices)
        names = list(hosts)
        n = len(devices)
        if len(names) == 1:
            links = [self.intra[names[0]]]
        else:
            links = [link for h in names for link in (self.tx[h], self.rx[h], self.intra[h])]
        intra, nic = self.intra[names[0]], self.tx[names[0]]
        flat = intra if len(names) == 1 else nic
        if op == "allreduce":
            if algo == "hierarchical":
                per_host = set(hosts.values())
                if len(per_host) != 1:
                    raise SimdistError(
                        f"hierarchical all-reduce needs the same number of devices on every "
                        f"host, got {hosts}"
                    )
                seconds = hierarchical_allreduce_s(
                    len(names),
                    per_host.pop(),
                    nbytes,
                    intra.latency_s,
                    intra.bandwidth_Bps,
                    nic.latency_s,
                    nic.bandwidth_Bps,
                )
            else:
                seconds = allreduce_s(algo, n, nbytes, flat.latency_s, flat.bandwidth_Bps)
        elif op == "broadcast":
            seconds = broadcast_s(n, nbytes, flat.latency_s, flat.bandwidth_Bps)
        elif op == "reduce":
            seconds = reduce_s(n, nbytes, flat.latency_s, flat.bandwidth_Bps)
        else:
            raise ValueError(f"unknown collective {op!r}")
        return seconds, links
