"""``switch``: every host on one non-blocking switch, one intra-host link per host.

Each host has a network interface (``<host>/nic``, the scenario's
``links.network``) shared by every message into or out of it, and an intra-host
link (``<host>/intra``, PCIe / NVLink, the scenario's ``links.intra_host``) shared
by its devices. The switch itself never blocks, so only the end points contend.

Routes: inside one host a message crosses the intra-host link; between hosts it
leaves through the sender's NIC and enters through the receiver's.

Collectives over devices of one host run on its intra-host link with that link's
α and B. Over several hosts a flat algorithm (ring, tree, halving-doubling) is
priced with the NIC's α and B — a ring step lasts as long as its slowest edge,
and W of its edges cross the network — and ``hierarchical`` reduces inside each
host over the intra-host link and across hosts over the NICs. Either way the
collective holds the NIC and intra-host link of every host taking part.
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
from simdist.network.links import Link
from simdist.network.topology import Endpoint, Topology, host_name, hosts_of


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
    ) -> None:
        super().__init__(cluster)
        self.nic: dict[str, Link] = {}
        self.intra: dict[str, Link] = {}
        for host in cluster.hosts:
            name = host.name
            self.nic[name] = Link(env, f"{name}/nic", nic_latency_s, nic_bandwidth_Bps, name)
            self.intra[name] = Link(
                env, f"{name}/intra", intra_latency_s, intra_bandwidth_Bps, name
            )

    @classmethod
    def from_scenario(cls, env: Any, cluster: Cluster, scenario: Any) -> SwitchTopology:
        links = scenario.cluster.links
        return cls(
            env,
            cluster,
            nic_latency_s=links.network.latency_s,
            nic_bandwidth_Bps=links.network.bandwidth_Bps,
            intra_latency_s=links.intra_host.latency_s,
            intra_bandwidth_Bps=links.intra_host.bandwidth_Bps,
        )

    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        a, b = host_name(src), host_name(dst)
        if a == b:
            return [self.intra[a]]
        return [self.nic[a], self.nic[b]]

    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        hosts = hosts_of(devices)
        names = list(hosts)
        n = len(devices)
        if len(names) == 1:
            links = [self.intra[names[0]]]
        else:
            links = [link for h in names for link in (self.nic[h], self.intra[h])]
        intra, nic = self.intra[names[0]], self.nic[names[0]]
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
