"""Time on the wire: links, topologies, and the :class:`Network` that sends and reduces.

``Network.send`` / ``allreduce`` / ``broadcast`` / ``reduce`` are SimPy events
that route, price, hold links and record. A topology is one module with one
:class:`Topology` subclass, listed in :data:`TOPOLOGIES`.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simdist.hardware.cluster import Cluster
from simdist.network.arbiter import LinkArbiter
from simdist.network.core import Network, links_on
from simdist.network.hold import hold_links
from simdist.network.leaf_spine import LeafSpineTopology
from simdist.network.link import Link
from simdist.network.switch import SwitchTopology
from simdist.network.topology import Endpoint, Topology
from simdist.network.torus import TorusTopology
from simdist.network.transfer import Transfer
from simdist.network.transport import PROTOCOLS, Message, Protocol, protocol_of

if TYPE_CHECKING:
    import simpy

    from simdist.scenario import Scenario

TOPOLOGIES: dict[str, type[Topology]] = {
    cls.name: cls for cls in (SwitchTopology, LeafSpineTopology, TorusTopology)
}


def build_topology(
    name: str, env: simpy.Environment, cluster: Cluster, scenario: Scenario
) -> Topology:
    """Topology ``name`` for ``scenario``'s cluster, with its links on ``env``.

    ``switch`` is what a strategy asks for when any network will do: the scenario's
    ``cluster.network.topology`` (``switch`` or ``leaf_spine``) then decides. A strategy
    with a topology of its own (tpu: ``torus``) gets it.
    """
    if name == "switch":
        name = scenario.cluster.network.topology
    return TOPOLOGIES[name].from_scenario(env, cluster, scenario)


__all__ = [
    "PROTOCOLS",
    "TOPOLOGIES",
    "Endpoint",
    "LeafSpineTopology",
    "Link",
    "LinkArbiter",
    "Message",
    "Network",
    "Protocol",
    "SwitchTopology",
    "Topology",
    "TorusTopology",
    "Transfer",
    "build_topology",
    "hold_links",
    "links_on",
    "protocol_of",
]
