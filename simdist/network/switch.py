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

Collectives are priced from their pattern (:mod:`simdist.collectives.registry`) by
:func:`simdist.collectives.pattern_s`, each scope on one link: over devices of one host
everything runs on its intra-host link with that link's α and B; over several hosts a
flat pattern (ring, tree, halving-doubling, …) is priced with the NIC's α and B — a ring
step lasts as long as its slowest edge, and W of its edges cross the network — and a
hierarchical one prices its stages inside each host on the intra-host link and its
stages across hosts on the NICs. Either way the collective holds both sides of the NIC
and the intra-host link of every host taking part. The NIC's (α, B) is the one the
scenario's transport gives a collective step across hosts
(:meth:`~simdist.network.transport.Protocol.collective_link`); the intra-host link's is
never touched.

With ``cluster.network.intra_host: nvlink`` or ``pcie`` the hosts have NVLink ports
or a PCIe tree instead of one intra-host link (:mod:`simdist.network.intranode`):
:meth:`SwitchTopology.from_scenario` then builds a
:class:`~simdist.network.leaf_spine.LeafSpineTopology` of one leaf, whose collectives
price those links from their communication pattern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from simdist.collectives import FLAT, INTER, INTRA, pattern_s
from simdist.hardware.cluster import Cluster, Device
from simdist.network.leaf_spine import LeafSpineTopology
from simdist.network.link import Link
from simdist.network.topology import Endpoint, Topology, hosts_of, machine_of, nic_links
from simdist.network.transport import PROTOCOLS, Protocol, protocol_of

if TYPE_CHECKING:
    import simpy

    from simdist.scenario import Scenario


class SwitchTopology(Topology):
    """Hosts on one non-blocking switch: a NIC and an intra-host link per host."""

    name: ClassVar[str] = "switch"

    def __init__(
        self,
        env: simpy.Environment,
        cluster: Cluster,
        *,
        nic_latency_s: float,
        nic_bandwidth_Bps: float,
        intra_latency_s: float,
        intra_bandwidth_Bps: float,
        duplex: str = "half",
        sharing: str = "fifo",
        protocol: Protocol | None = None,
    ) -> None:
        super().__init__(cluster)
        #: Prices the collectives' steps across hosts (default ``ideal``: the bare NIC).
        self.protocol = protocol or PROTOCOLS["ideal"]
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
    def from_scenario(
        cls, env: simpy.Environment, cluster: Cluster, scenario: Scenario
    ) -> Topology:
        if scenario.cluster.network.intra_host != "shared":
            # NVLink ports or a PCIe tree inside each host: a non-blocking switch is a
            # leaf-spine network of one leaf, whose collectives price the intra-host links.
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
            protocol=protocol_of(scenario.cluster.network),
        )

    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        a, b = machine_of(src), machine_of(dst)
        if a == b:  # one machine (a worker and its co-located PS too): no NIC
            return [self.intra[a]]
        return [self.tx[a], self.rx[b]]

    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        names = list(hosts_of(devices))
        if len(names) == 1:
            links = [self.intra[names[0]]]
        else:
            links = [link for h in names for link in (self.tx[h], self.rx[h], self.intra[h])]
        intra, nic = self.intra[names[0]], self.tx[names[0]]
        inside = (intra.latency_s, intra.bandwidth_Bps)
        across = nic.latency_s, nic.bandwidth_Bps
        if not self.protocol.ideal_collectives:
            across = self.protocol.collective_link(*across)
        figures = {FLAT: inside if len(names) == 1 else across, INTRA: inside, INTER: across}
        return pattern_s(self.pattern(op, devices, algo), nbytes, figures), links
