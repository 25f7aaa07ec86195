"""``torus``: x × y TPU chips on one host, joined by the inter-chip interconnect (ICI).

TPU chips exchange gradients over the ICI directly, never through a host's NIC,
so simdist keeps every chip on one host and models the ICI as one link
(``<host>/ici``, the scenario's ``links.intra_host``). Every collective's pattern is
priced on the ICI's α and B; a ``torus2d`` one over every chip runs its rings along the
torus's own x and y (:meth:`TorusTopology.grid`), as
:func:`simdist.collectives.torus2d_allreduce_s` writes it. Messages between hosts
(none today) leave through the host NICs, as on a switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from simdist.collectives import FLAT, INTER, INTRA, pattern_s
from simdist.errors import SimdistError
from simdist.hardware.cluster import Cluster, Device
from simdist.network.link import Link
from simdist.network.topology import Endpoint, Topology, machine_of, nic_links

if TYPE_CHECKING:
    import simpy

    from simdist.scenario import Scenario


class TorusTopology(Topology):
    """x·y chips of one host on a 2D torus: the ICI carries every collective."""

    name: ClassVar[str] = "torus"

    def __init__(
        self,
        env: simpy.Environment,
        cluster: Cluster,
        x: int,
        y: int,
        *,
        ici_latency_s: float,
        ici_bandwidth_Bps: float,
        nic_latency_s: float,
        nic_bandwidth_Bps: float,
        duplex: str = "half",
        sharing: str = "fifo",
    ) -> None:
        super().__init__(cluster)
        if x * y != len(cluster.devices):
            raise SimdistError(
                f"a {x}x{y} torus needs {x * y} chips, the cluster has {len(cluster.devices)}"
            )
        self.x, self.y = x, y
        self.ici: dict[str, Link] = {}
        self.tx: dict[str, Link] = {}
        self.rx: dict[str, Link] = {}
        for name in cluster.machines:
            self.ici[name] = self.add_link(
                Link(env, f"{name}/ici", ici_latency_s, ici_bandwidth_Bps, name, sharing=sharing)
            )
            self.tx[name], self.rx[name] = self.add_links(
                nic_links(env, name, nic_latency_s, nic_bandwidth_Bps, duplex, sharing)
            )

    @classmethod
    def from_scenario(
        cls, env: simpy.Environment, cluster: Cluster, scenario: Scenario
    ) -> TorusTopology:
        x, y = scenario.strategy.topology
        links = scenario.cluster.links
        return cls(
            env,
            cluster,
            x,
            y,
            ici_latency_s=links.intra_host.latency_s,
            ici_bandwidth_Bps=links.intra_host.bandwidth_Bps,
            nic_latency_s=links.network.latency_s,
            nic_bandwidth_Bps=links.network.bandwidth_Bps,
            duplex=scenario.cluster.network.duplex,
            sharing=scenario.cluster.network.sharing,
        )

    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        a, b = machine_of(src), machine_of(dst)
        if a == b:
            return [self.ici[a]]
        return [self.tx[a], self.rx[b]]

    def grid(self) -> tuple[int, int]:
        return self.x, self.y

    def collective(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> tuple[float, list[Link]]:
        hosts = {d.host for d in devices}
        if len(hosts) != 1:
            raise SimdistError(f"a torus collective runs on the chips of one host, got {hosts}")
        ici = self.ici[hosts.pop()]
        figures = dict.fromkeys((FLAT, INTRA, INTER), (ici.latency_s, ici.bandwidth_Bps))
        return pattern_s(self.pattern(op, devices, algo), nbytes, figures), [ici]
