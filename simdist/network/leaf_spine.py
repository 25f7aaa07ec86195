"""``leaf_spine``: racks of hosts behind leaf switches, joined through a spine.

Machines fill the leaves (racks) in order, ``hosts_per_leaf`` each: the worker hosts,
then the parameter-server tasks on machines of their own (:attr:`Cluster.machines`).
Each machine has a NIC (``links.network``; ``<host>/nic/tx`` and ``/rx``, or one
``<host>/nic`` when ``duplex: half``) and an intra-host fabric
(:mod:`simdist.network.intranode`). Each leaf reaches the spine through one uplink,
``leaf<i>/uplink/up`` and ``/down`` (one ``leaf<i>/uplink`` when half duplex), whose
bandwidth per direction is derived, never set:

    uplink = hosts_per_leaf × NIC bandwidth / oversubscription

The oversubscription ratio is the leaf's host-facing bandwidth over its spine-facing
bandwidth: at 1:1 every host can send at full rate out of its rack, at k:1 only 1/k of
it (Al-Fares, Loukissas & Vahdat 2008, "A scalable, commodity data center network
architecture", SIGCOMM, §2.1). The spine is non-blocking (the uplinks of a leaf to every
spine switch counted as one, ECMP spreading the flows evenly), so only the uplinks and
the end points contend. With one leaf there are no uplinks: a non-blocking switch.

Routes: inside a rack, sender's NIC (transmit side) → receiver's NIC (receive side),
through one switch; across racks, NIC → the sender leaf's uplink (up) → the receiver
leaf's uplink (down) → NIC, through three (leaf, spine, leaf). Each switch hop costs
``hop_latency``, split between the two links it joins, so a message pays
``2·α_NIC + hops × hop_latency`` of latency. Inside a machine, and between a device and
its NIC, the fabric's routes apply.

Collectives: the registry's pattern (:mod:`simdist.collectives.registry`) gives the steps
of each scope, :mod:`simdist.network.bottleneck` their (α, B) (the flows of each step,
max-min shared over NIC sides, uplinks and intra-host ports), and the pattern's closed
form (:func:`simdist.collectives.pattern_s`) the time. With the ``shared`` fabric the
network part of a flat collective is its pattern over the hosts (one participant per
host, as the switch's closed forms count it), and the intra-host link prices what stays
inside a host; a hierarchical pattern takes its stages inside hosts from the intra-host
fabric and its stages across hosts from its lines (one per local rank) together.
Within one rack (hop_latency 0), this is exactly the switch's time. A
collective holds every link its flows use, the uplinks included. The scenario's
transport (:mod:`simdist.network.transport`) prices the collectives' flows across
machines: the NICs and uplinks carry ``collective_efficiency`` of their bandwidth, and
every flow between two machines adds ``collective_step_s`` to its α; the intra-host
fabric's links and flows are never touched.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from simdist.collectives import FLAT, INTER, INTRA, Pattern, pattern_s
from simdist.collectives.registry import pattern as registry_pattern
from simdist.hardware.cluster import Cluster, Device
from simdist.network.bottleneck import Flow, Hop, flow
from simdist.network.bottleneck import effective as bottleneck_effective
from simdist.network.intranode import HostFabric, PCIE3_X16_Bps, host_fabric
from simdist.network.link import Link, channel_links
from simdist.network.topology import (
    Endpoint,
    Topology,
    hosts_of,
    machine_of,
    nic_links,
    ranked,
)
from simdist.network.transport import PROTOCOLS, Protocol, protocol_of

if TYPE_CHECKING:
    import simpy

    from simdist.scenario import LinksSpec, NetworkSpec, Scenario

#: How a collective is priced: its pattern, (α, B) per scope, and the links it holds.
Pricing = tuple[Pattern, dict[str, tuple[float, float]], list[Link]]


def uplink_bandwidth_Bps(
    hosts_per_leaf: int, nic_bandwidth_Bps: float, oversubscription: float
) -> float:
    """A leaf's uplink bandwidth per direction: its hosts' NIC bandwidth over the ratio.

    Oversubscription k:1 = host-facing over spine-facing bandwidth (Al-Fares et al. 2008,
    §2.1), so the uplink carries hosts_per_leaf × NIC / k.
    """
    if int(hosts_per_leaf) != hosts_per_leaf or hosts_per_leaf < 1:
        raise ValueError(f"hosts_per_leaf must be a positive integer, got {hosts_per_leaf}")
    if not (oversubscription >= 1 and math.isfinite(oversubscription)):
        raise ValueError(f"oversubscription must be finite and >= 1, got {oversubscription}")
    return hosts_per_leaf * nic_bandwidth_Bps / oversubscription


class LeafSpineTopology(Topology):
    """Racks of ``hosts_per_leaf`` machines; each leaf's uplink is oversubscribed k:1."""

    name: ClassVar[str] = "leaf_spine"

    def __init__(
        self,
        env: simpy.Environment,
        cluster: Cluster,
        *,
        nic_latency_s: float,
        nic_bandwidth_Bps: float,
        intra_latency_s: float,
        intra_bandwidth_Bps: float,
        hosts_per_leaf: int,
        oversubscription: float = 1.0,
        hop_latency_s: float = 0.0,
        duplex: str = "full",
        sharing: str = "fair",
        intra_host: str = "shared",
        pcie_uplink_Bps: float = PCIE3_X16_Bps,
        protocol: Protocol | None = None,
    ) -> None:
        super().__init__(cluster)
        #: Prices the collectives' flows across machines (default ``ideal``: the bare wire).
        self.protocol = protocol or PROTOCOLS["ideal"]
        if not (hop_latency_s >= 0 and math.isfinite(hop_latency_s)):
            raise ValueError(f"hop_latency_s must be finite and >= 0, got {hop_latency_s}")
        self.hosts_per_leaf = hosts_per_leaf
        self.oversubscription = float(oversubscription)
        self.hop_latency_s = float(hop_latency_s)
        self.nic_latency_s = float(nic_latency_s)
        self.nic_bandwidth_Bps = float(nic_bandwidth_Bps)
        self.intra_host = intra_host
        self.uplink_Bps = uplink_bandwidth_Bps(hosts_per_leaf, nic_bandwidth_Bps, oversubscription)
        machines = cluster.machines
        self.leaf_of: dict[str, int] = {m: i // hosts_per_leaf for i, m in enumerate(machines)}
        devices = {h.name: h.devices for h in cluster.workers}
        self.tx: dict[str, Link] = {}  # a machine's NIC, leaving it (== rx when half duplex)
        self.rx: dict[str, Link] = {}
        self.fabric: dict[str, HostFabric] = {}
        # A switch hop's latency is split between the two links it joins: half on each NIC
        # side (host ↔ leaf), and a whole hop on each uplink (half leaf, half spine).
        nic_port_s = self.nic_latency_s + self.hop_latency_s / 2
        for name in machines:
            self.tx[name], self.rx[name] = self.add_links(
                nic_links(env, name, nic_port_s, nic_bandwidth_Bps, duplex, sharing)
            )
            fabric = self.fabric[name] = host_fabric(
                env,
                intra_host,
                name,
                devices.get(name, ()),
                latency_s=intra_latency_s,
                bandwidth_Bps=intra_bandwidth_Bps,
                sharing=sharing,
                pcie_uplink_Bps=pcie_uplink_Bps,
            )
            self.add_links(fabric.links())
        self.up: dict[int, Link] = {}  # leaf → spine (== down when half duplex)
        self.down: dict[int, Link] = {}
        leaves = sorted(set(self.leaf_of.values()))
        for leaf in leaves if len(leaves) > 1 else ():
            self.up[leaf], self.down[leaf] = self.add_links(
                self._uplink(env, leaf, duplex, sharing)
            )
        # The links between machines (NIC sides, uplinks): a collective's flows over them
        # pay the transport (ids, as the links live as long as the topology).
        wire = (self.tx, self.rx, self.up, self.down)
        self._wire = {id(link) for links in wire for link in links.values()}
        self._pricing: dict[tuple[str, str, tuple[str, ...]], Pricing] = {}

    def _uplink(
        self, env: simpy.Environment, leaf: int, duplex: str, sharing: str
    ) -> tuple[Link, Link]:
        return channel_links(
            env,
            f"leaf{leaf}/uplink",
            self.hop_latency_s,
            self.uplink_Bps,
            sharing=sharing,
            duplex=duplex,
            sides=("up", "down"),
        )

    @classmethod
    def from_scenario(
        cls, env: simpy.Environment, cluster: Cluster, scenario: Scenario
    ) -> LeafSpineTopology:
        links, net = scenario.cluster.links, scenario.cluster.network
        # A non-blocking switch is one leaf holding every machine (``switch`` with an
        # nvlink or pcie fabric is built so).
        one_leaf = 0 if net.topology == "leaf_spine" else len(cluster.machines)
        options = _options(links, net, one_leaf)
        return cls(env, cluster, protocol=protocol_of(net), **options)  # type: ignore[arg-type]

    # -- routes --------------------------------------------------------------

    def hops(self, a: str, b: str) -> int:
        """Switch hops between machines ``a`` and ``b``: 1 in a rack, 3 across (0: same)."""
        if a == b:
            return 0
        return 1 if self.leaf_of[a] == self.leaf_of[b] else 3

    def path(self, src: Endpoint, dst: Endpoint) -> list[Hop]:
        """The links a message from ``src`` to ``dst`` crosses, each with its direction."""
        a, b = machine_of(src), machine_of(dst)
        if a == b:
            fabric = self.fabric[a]
            if isinstance(src, Device) and isinstance(dst, Device):
                return fabric.between(src, dst)
            if isinstance(src, Device):
                return fabric.to_host(src)
            if isinstance(dst, Device):
                return fabric.from_host(dst)
            return fabric.host_to_host()
        hops = self.fabric[a].to_nic(src) if isinstance(src, Device) else []
        hops.append((self.tx[a], "tx"))
        la, lb = self.leaf_of[a], self.leaf_of[b]
        if la != lb:
            hops += [(self.up[la], "up"), (self.down[lb], "down")]
        hops.append((self.rx[b], "rx"))
        if isinstance(dst, Device):
            hops += self.fabric[b].from_nic(dst)
        return hops

    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        return [link for link, _ in self.path(src, dst)]

    def latency_s(self, src: Device, dst: Device) -> float:
        """A collective message's α: the fabric's inside a machine, else NIC + switch hops."""
        a, b = machine_of(src), machine_of(dst)
        if a == b:
            return self.fabric[a].latency_s
        latency_s = self.nic_latency_s + self.hops(a, b) * self.hop_latency_s
        if self.protocol.ideal_collectives:
            return latency_s
        return latency_s + self.protocol.collective_step_s

    # -- collectives ---------------------------------------------------------

    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        key = (op, algo, tuple(d.name for d in devices))
        pricing = self._pricing.get(key)
        if pricing is None:
            pricing = self._pricing[key] = self._price(op, devices, algo)
        pattern, figures, links = pricing
        return pattern_s(pattern, nbytes, figures), links

    def effective(self, op: str, devices: Sequence[Device], algo: str) -> dict[str, float]:
        """The (α, B) the closed form of ``op`` over ``devices`` is priced with, by name.

        Flat algorithms: ``latency_s`` and ``bandwidth_Bps``; hierarchical: ``hosts``,
        ``devices_per_host``, ``intra_*`` and ``inter_*``. For reports and for teaching
        (``simdist collectives``).
        """
        _, figures, _ = self._price(op, devices, algo)
        out: dict[str, float] = {}
        if INTER in figures:
            hosts = hosts_of(devices)
            out |= {"hosts": len(hosts), "devices_per_host": len(devices) // len(hosts)}
        prefix = {FLAT: "", INTRA: "intra_", INTER: "inter_"}
        for scope, (latency_s, bandwidth_Bps) in figures.items():
            out[f"{prefix[scope]}latency_s"] = latency_s
            out[f"{prefix[scope]}bandwidth_Bps"] = bandwidth_Bps
        return out

    def _price(self, op: str, devices: Sequence[Device], algo: str) -> Pricing:
        order = ranked(devices)
        pattern = self.pattern(op, order, algo)
        groups = [[d for d in order if d.host == host] for host in hosts_of(order)]
        used: dict[int, Link] = {}
        figures: dict[str, tuple[float, float]] = {}
        for scope in pattern.scopes():
            if scope == INTRA:
                figures[scope] = self._intra_stage(pattern, order, groups, used)
            elif scope == INTER:
                figures[scope] = self._inter_stage(pattern, order, groups, used)
            else:
                figures[scope] = self._flat_stage(op, algo, pattern, order, groups, used)
        self._hold_shared(groups, used)
        return pattern, figures, list(used.values())

    def _flat_stage(
        self,
        op: str,
        algo: str,
        pattern: Pattern,
        order: list[Device],
        groups: list[list[Device]],
        used: dict[int, Link],
    ) -> tuple[float, float]:
        """(α, B) of a flat pattern: the bottleneck over all its steps."""
        fabric = self.fabric[order[0].host]
        if not fabric.ports:
            if len(groups) == 1:
                used[id(fabric.intra)] = fabric.intra
                return fabric.latency_s, fabric.bandwidth_Bps
            order = [group[0] for group in groups]  # the network part, host by host
            pattern = registry_pattern(op, algo, len(order))
        figures = self._line_figures(pattern, FLAT, order, used)
        if figures is None:  # one participant: nothing moves, any figures do
            return fabric.latency_s, fabric.bandwidth_Bps
        return figures

    def _intra_stage(
        self,
        pattern: Pattern,
        order: list[Device],
        groups: list[list[Device]],
        used: dict[int, Link],
    ) -> tuple[float, float]:
        """(α, B) of the stages inside every host at once (hierarchical's first and last)."""
        fabric = self.fabric[groups[0][0].host]
        if not fabric.ports or len(groups[0]) == 1:
            return fabric.latency_s, fabric.bandwidth_Bps
        figures = self._line_figures(pattern, INTRA, order, used)
        assert figures is not None
        return figures

    def _line_figures(
        self, pattern: Pattern, scope: str, order: list[Device], used: dict[int, Link]
    ) -> tuple[float, float] | None:
        """The bottleneck (α, B) of ``pattern``'s steps in ``scope``, every line's message
        its own flow (None: nothing moves)."""
        steps = [
            [
                self._flow([(order[line[s]], order[line[t]])], share, used)
                for line in stage.lines
                for s, t, share in step
            ]
            for stage, step in pattern.steps(scope)
        ]
        return bottleneck_effective(steps, self._capacity(used))

    def _inter_stage(
        self,
        pattern: Pattern,
        order: list[Device],
        groups: list[list[Device]],
        used: dict[int, Link],
    ) -> tuple[float, float]:
        """(α, B) of the stages across hosts, their lines (one per local rank) together.

        Each edge between two hosts is one flow made of the lines' paths, so the NIC they
        share carries all of it and each rank's own PCIe link a d-th.
        """
        if len(groups) == 1:
            return self.nic_latency_s, self.nic_bandwidth_Bps
        bundled = self.fabric[groups[0][0].host].ports
        steps = []
        for stage, step in pattern.steps(INTER):
            lines = stage.lines if bundled else stage.lines[:1]
            steps.append(
                [
                    self._flow([(order[ln[s]], order[ln[t]]) for ln in lines], share, used)
                    for s, t, share in step
                ]
            )
        figures = bottleneck_effective(steps, self._capacity(used))
        assert figures is not None
        return figures

    def _flow(
        self, pairs: list[tuple[Device, Device]], share: float, used: dict[int, Link]
    ) -> Flow:
        paths = [self.path(a, b) for a, b in pairs]
        for path in paths:
            for link, _ in path:
                used.setdefault(id(link), link)
        return flow(paths, share, self.latency_s(*pairs[0]))

    def _hold_shared(self, groups: list[list[Device]], used: dict[int, Link]) -> None:
        """With the shared fabric, a collective over several hosts holds every host's
        intra-host link and both NIC sides, as on the switch."""
        if len(groups) == 1 or self.fabric[groups[0][0].host].ports:
            return
        for group in groups:
            host = group[0].host
            for link in (self.tx[host], self.rx[host], self.fabric[host].intra):
                used.setdefault(id(link), link)

    def _capacity(self, used: dict[int, Link]) -> dict[tuple[str, str], float]:
        """Every direction of the used links, at the link's bandwidth: a collective's share
        of it (the transport's) on the links between machines."""
        share = self.protocol.collective_efficiency
        derate = not self.protocol.ideal_collectives
        return {
            (link.name, side): (
                link.bandwidth_Bps * share
                if derate and id(link) in self._wire
                else link.bandwidth_Bps
            )
            for link in used.values()
            for side in ("tx", "rx", "up", "down", "both")
        }


def _options(
    links: LinksSpec | tuple[tuple[float, float], tuple[float, float]],
    net: NetworkSpec,
    one_leaf: int = 0,
) -> dict[str, float | int | str]:
    """The constructor's keywords from a scenario's ``cluster.links`` (or the (α, B) of the
    NIC and of the intra-host link) and ``cluster.network`` (``one_leaf``: a switch of
    that many machines)."""
    if isinstance(links, tuple):
        (nic_latency_s, nic_bandwidth_Bps), (intra_latency_s, intra_bandwidth_Bps) = links
    else:
        nic_latency_s, nic_bandwidth_Bps = links.network.latency_s, links.network.bandwidth_Bps
        intra = links.intra_host
        intra_latency_s, intra_bandwidth_Bps = intra.latency_s, intra.bandwidth_Bps
    options: dict[str, float | int | str] = {
        "nic_latency_s": nic_latency_s,
        "nic_bandwidth_Bps": nic_bandwidth_Bps,
        "intra_latency_s": intra_latency_s,
        "intra_bandwidth_Bps": intra_bandwidth_Bps,
        "duplex": net.duplex,
        "sharing": net.sharing,
        "intra_host": net.intra_host,
    }
    if net.pcie_uplink_Bps is not None:
        options["pcie_uplink_Bps"] = net.pcie_uplink_Bps
    if one_leaf:
        options["hosts_per_leaf"] = max(one_leaf, 1)
    else:
        options["hosts_per_leaf"] = net.hosts_per_leaf
        options["oversubscription"] = net.oversubscription
        options["hop_latency_s"] = net.hop_latency_s
    return options


def standalone_topology(
    cluster: Cluster,
    network: NetworkSpec,
    *,
    nic_latency_s: float,
    nic_bandwidth_Bps: float,
    intra_latency_s: float,
    intra_bandwidth_Bps: float,
) -> LeafSpineTopology:
    """``cluster``'s hosts wired as ``network`` (a scenario's ``cluster.network`` section)
    says and priced with its transport, on a clock of their own: for pricing collectives
    outside a run (``simdist collectives``)."""
    import simpy

    links = ((nic_latency_s, nic_bandwidth_Bps), (intra_latency_s, intra_bandwidth_Bps))
    one_leaf = 0 if network.topology == "leaf_spine" else len(cluster.machines)
    options = _options(links, network, one_leaf)
    protocol = protocol_of(network)
    return LeafSpineTopology(simpy.Environment(), cluster, protocol=protocol, **options)  # type: ignore[arg-type]
