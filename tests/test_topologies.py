"""Topologies: leaf-spine racks, NVLink and PCIe inside hosts, with exact simulated times.

Bandwidths and latencies are powers of two, so sums and quotients below are exact binary
fractions and every time is compared with ``==``.
"""

from __future__ import annotations

import itertools

import pytest
import simpy
from helpers.network import make_spec

from simdist.collectives import (
    allreduce_s,
    broadcast_s,
    halving_doubling_allreduce_s,
    hierarchical_allreduce_s,
    pattern,
    reduce_s,
    ring_allreduce_s,
)
from simdist.collectives.pattern import FLAT
from simdist.hardware.cluster import Cluster
from simdist.network import (
    LeafSpineTopology,
    Link,
    Network,
    SwitchTopology,
    TorusTopology,
)
from simdist.network.bottleneck import flow, max_min_rates
from simdist.network.intranode import PCIE3_X16_Bps
from simdist.network.leaf_spine import uplink_bandwidth_Bps
from simdist.network.traffic import double_tree_parents
from simdist.runtime.recorder import Recorder

B = 2.0**30  # NIC bandwidth, bytes/s
ALPHA = 2.0**-16  # NIC latency, s
HOP = 2.0**-20  # one switch hop, s
B_IN = 2.0**34  # intra-host (per GPU port / PCIe link), bytes/s
A_IN = 2.0**-19
S = 2.0**24  # bytes


def leaf_spine(
    hosts: int,
    devices: int = 1,
    hosts_per_leaf: int = 2,
    k: float = 1.0,
    *,
    hop: float = HOP,
    ps: int = 0,
    duplex: str = "full",
    sharing: str = "fair",
    intra_host: str = "shared",
    **extra: float,
) -> tuple[simpy.Environment, Network]:
    env = simpy.Environment()
    topology = LeafSpineTopology(
        env,
        Cluster(make_spec(hosts, devices, ps)),
        nic_latency_s=ALPHA,
        nic_bandwidth_Bps=B,
        intra_latency_s=A_IN,
        intra_bandwidth_Bps=B_IN,
        hosts_per_leaf=hosts_per_leaf,
        oversubscription=k,
        hop_latency_s=hop,
        duplex=duplex,
        sharing=sharing,
        intra_host=intra_host,
        **extra,
    )
    return env, Network(env, topology, Recorder())


def switch(hosts: int, devices: int, duplex: str = "full") -> SwitchTopology:
    return SwitchTopology(
        simpy.Environment(),
        Cluster(make_spec(hosts, devices, 0)),
        nic_latency_s=ALPHA,
        nic_bandwidth_Bps=B,
        intra_latency_s=A_IN,
        intra_bandwidth_Bps=B_IN,
        duplex=duplex,
        sharing="fair",
    )


def names(links) -> list[str]:
    return [link.name for link in links]


# ---------------------------------------------------------------- links()


def held_links(topology) -> dict[int, Link]:
    """Every Link the topology holds: in its attributes, their dicts, lists and tuples, and
    its helper objects (a host's fabric); an oracle for what links() must register."""
    found: dict[int, Link] = {}
    seen: set[int] = set()

    def walk(value) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, Link):
            found[id(value)] = value
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif type(value).__module__.startswith("simdist.network") and hasattr(value, "__dict__"):
            for item in vars(value).values():
                walk(item)

    walk(vars(topology))
    return found


def torus(x: int, y: int, duplex: str) -> TorusTopology:
    cluster = Cluster(make_spec(1, x * y, 0))
    return TorusTopology(
        simpy.Environment(),
        cluster,
        x,
        y,
        ici_latency_s=A_IN,
        ici_bandwidth_Bps=B_IN,
        nic_latency_s=ALPHA,
        nic_bandwidth_Bps=B,
        duplex=duplex,
    )


TOPOLOGIES = {
    **{
        f"switch-{duplex}": lambda duplex=duplex: switch(3, 2, duplex)
        for duplex in ("full", "half")
    },
    **{
        f"leaf_spine-{fabric}-{duplex}": lambda fabric=fabric, duplex=duplex: (
            leaf_spine(3, 2, ps=1, intra_host=fabric, duplex=duplex)[1].topology
        )
        for fabric in ("shared", "nvlink", "pcie")
        for duplex in ("full", "half")
    },
    **{f"torus-{duplex}": lambda duplex=duplex: torus(2, 2, duplex) for duplex in ("full", "half")},
}


@pytest.mark.parametrize("kind", list(TOPOLOGIES))
def test_links_lists_every_link_of_the_topology_once(kind):
    topology = TOPOLOGIES[kind]()
    listed = topology.links()
    assert len({id(link) for link in listed}) == len(listed)
    assert {id(link) for link in listed} == set(held_links(topology))
    cluster = topology.cluster
    ends = [*cluster.devices, *cluster.hosts]
    routed = {id(link) for a, b in itertools.product(ends, ends) for link in topology.route(a, b)}
    assert routed <= {id(link) for link in listed}


def test_links_go_by_host_then_by_name_uplinks_last():
    _, net = leaf_spine(2, 1, hosts_per_leaf=1, intra_host="pcie")
    assert names(net.topology.links()) == [
        *(
            f"worker{h}/{link}"
            for h in range(2)
            for link in ("gpu0/pcie/rx", "gpu0/pcie/tx", "nic/rx", "nic/tx", "pcie/down", "pcie/up")
        ),
        *(f"leaf{leaf}/uplink/{side}" for leaf in range(2) for side in ("down", "up")),
    ]


# ---------------------------------------------------------------- routes


def test_hosts_fill_leaves_in_order_workers_then_ps():
    _, net = leaf_spine(3, ps=2, hosts_per_leaf=2)
    assert net.topology.leaf_of == {"worker0": 0, "worker1": 0, "worker2": 1, "ps0": 1, "ps1": 2}
    assert [link.name for link in net.topology.links() if not link.host] == [
        f"leaf{i}/uplink/{side}" for i in range(3) for side in ("down", "up")
    ]
    _, pcie = leaf_spine(2, 2, ps=1, hosts_per_leaf=2, intra_host="pcie")
    device, ps = pcie.topology.cluster.devices[3], pcie.topology.cluster.ps_hosts[0]
    # a push to a PS in the next rack: up the PCIe tree, out of the NIC, across the spine
    assert names(pcie.route(device, ps)) == [
        "worker1/gpu1/pcie/tx",
        "worker1/pcie/up",
        "worker1/nic/tx",
        "leaf0/uplink/up",
        "leaf1/uplink/down",
        "ps0/nic/rx",
    ]


def test_routes_in_a_rack_and_across_racks():
    _, net = leaf_spine(4)
    w = net.topology.cluster.workers
    assert names(net.route(w[0], w[1])) == ["worker0/nic/tx", "worker1/nic/rx"]
    assert names(net.topology.route(w[0], w[2])) == [
        "worker0/nic/tx",
        "leaf0/uplink/up",
        "leaf1/uplink/down",
        "worker2/nic/rx",
    ]
    _, half = leaf_spine(4, duplex="half")
    w = half.topology.cluster.workers
    assert names(half.topology.route(w[3], w[0])) == [
        "worker3/nic",
        "leaf1/uplink",
        "leaf0/uplink",
        "worker0/nic",
    ]


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_messages_pay_one_hop_in_a_rack_and_three_across(sharing):
    env, net = leaf_spine(4, sharing=sharing)
    w = [h.devices[0] for h in net.topology.cluster.workers]
    near = net.send(w[0], w[1], S, step=0, detail="near")
    far = net.send(w[1], w[3], S, step=0, detail="far")
    env.run()
    assert near.done.value == (0.0, 2 * ALPHA + 1 * HOP + S / B)
    assert far.done.value == (0.0, 2 * ALPHA + 3 * HOP + S / B)  # uplinks of 2B: no slowdown


# ---------------------------------------------------------------- uplinks


def test_uplink_bandwidth_is_hosts_times_nic_over_oversubscription():
    assert uplink_bandwidth_Bps(4, B, 4.0) == B
    assert uplink_bandwidth_Bps(2, B, 4.0) == B / 2
    assert uplink_bandwidth_Bps(4, 1.25e9, 3.0) == 4 * 1.25e9 / 3
    _, net = leaf_spine(4, hosts_per_leaf=2, k=8.0)
    uplinks = [link for link in net.topology.links() if not link.host]
    assert {link.bandwidth_Bps for link in uplinks} == {B / 4}
    assert {link.latency_s for link in uplinks} == {HOP}
    for bad in ((0, B, 1.0), (2, B, 0.5), (2, B, float("inf"))):
        with pytest.raises(ValueError):
            uplink_bandwidth_Bps(*bad)


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_two_cross_rack_flows_share_one_uplink(sharing):
    # 2 hosts per leaf at 2:1: the uplink carries B, two hosts send across at once
    env, net = leaf_spine(4, hosts_per_leaf=2, k=2.0, sharing=sharing)
    w = [h.devices[0] for h in net.topology.cluster.workers]
    a = net.send(w[0], w[2], S, step=0, detail="a")
    b = net.send(w[1], w[3], S, step=0, detail="b")
    env.run()
    latency = 2 * ALPHA + 3 * HOP
    if sharing == "fair":  # B/2 each on leaf0's uplink: both end when fifo's second does
        assert a.done.value == b.done.value == (0.0, latency + 2 * S / B)
    else:
        assert a.done.value == (0.0, latency + S / B)
        assert b.done.value == (S / B, latency + 2 * S / B)
    uplink = next(link for link in net.topology.links() if link.name == "leaf0/uplink/up")
    assert uplink.rates[0] == (0.0, B)


def test_flows_in_opposite_directions_do_not_share_a_full_duplex_uplink():
    env, net = leaf_spine(4, hosts_per_leaf=2, k=2.0)
    w = [h.devices[0] for h in net.topology.cluster.workers]
    a = net.send(w[0], w[2], S, step=0, detail="a")
    b = net.send(w[3], w[1], S, step=0, detail="b")
    env.run()
    assert a.done.value == b.done.value == (0.0, 2 * ALPHA + 3 * HOP + S / B)


# ---------------------------------------------------------------- collectives


@pytest.mark.parametrize("k", [2.0, 4.0, 8.0])
def test_a_cross_rack_ring_pays_exactly_k_times_the_bandwidth_term(k):
    # one host per leaf: every ring edge crosses an uplink of B / k
    _, apart = leaf_spine(4, hosts_per_leaf=1, k=k, hop=0.0)
    _, together = leaf_spine(4, hosts_per_leaf=4, k=k, hop=0.0)
    n, latency = 4, 2 * 3 * ALPHA  # 2(n−1)·α
    cross = apart.collective_s("allreduce", apart.topology.cluster.devices, S, "ring")
    rack = together.collective_s("allreduce", together.topology.cluster.devices, S, "ring")
    assert rack == ring_allreduce_s(n, S, ALPHA, B)
    assert cross == ring_allreduce_s(n, S, ALPHA, B / k)
    assert cross - latency == k * (rack - latency)


@pytest.mark.parametrize(
    ("hosts", "devices", "duplex"),
    list(itertools.product([1, 2, 3, 4, 5, 8], [1, 2, 3, 4], ["full", "half"])),
)
def test_one_rack_prices_every_collective_exactly_as_the_switch(hosts, devices, duplex):
    _, one_rack = leaf_spine(hosts, devices, hosts_per_leaf=hosts, hop=0.0, duplex=duplex)
    flat = switch(hosts, devices, duplex)
    cases = [("allreduce", a) for a in ("ring", "tree", "halving_doubling", "torus2d")]
    cases += [("allreduce", "hierarchical"), ("broadcast", "tree"), ("reduce", "tree")]
    for op, algo in cases:
        got = one_rack.topology.collective(op, one_rack.topology.cluster.devices, S, algo)[0]
        assert got == flat.collective(op, flat.cluster.devices, S, algo)[0], (op, algo)


def test_racks_without_oversubscription_keep_the_ring_formula_with_the_hop_latency():
    _, net = leaf_spine(4, 2, hosts_per_leaf=2, k=1.0)
    devices = net.topology.cluster.devices
    # the ring crosses each uplink once per direction; the worst edge pays 3 hops
    assert net.collective_s("allreduce", devices, S, "ring") == ring_allreduce_s(
        8, S, ALPHA + 3 * HOP, B
    )
    hier = hierarchical_allreduce_s(4, 2, S, A_IN, B_IN, ALPHA + 3 * HOP, B)
    assert net.collective_s("allreduce", devices, S, "hierarchical") == hier


def test_halving_doubling_across_racks_meets_the_uplink_at_its_widest_step():
    # 4 hosts, 2 per leaf at 2:1 (uplink B): the distance-2 step sends two flows per uplink
    _, net = leaf_spine(4, hosts_per_leaf=2, k=2.0, hop=0.0)
    devices = net.topology.cluster.devices
    got = net.collective_s("allreduce", devices, S, "halving_doubling")
    assert got == halving_doubling_allreduce_s(4, S, ALPHA, B / 2)
    assert net.collective_s("allreduce", devices, S, "ring") == ring_allreduce_s(4, S, ALPHA, B)
    # the binomial tree crosses racks once (0 → 2), so no uplink is shared
    assert net.collective_s("broadcast", devices, S, "tree") == broadcast_s(4, S, ALPHA, B)
    assert net.collective_s("reduce", devices, S, "tree") == reduce_s(4, S, ALPHA, B)
    _, wide = leaf_spine(8, hosts_per_leaf=4, k=8.0, hop=0.0)  # uplink B/2
    devices = wide.topology.cluster.devices
    assert wide.collective_s("broadcast", devices, S, "tree") == broadcast_s(8, S, ALPHA, B / 2)


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_a_collective_holds_the_uplinks(sharing):
    env, net = leaf_spine(4, hosts_per_leaf=1, k=4.0, sharing=sharing, hop=0.0)
    devices = net.topology.cluster.devices
    _, links = net.topology.collective("allreduce", devices, S, "ring")
    assert {"leaf0/uplink/up", "leaf3/uplink/down"} <= set(names(links))
    ring = net.collective("allreduce", devices, S, "ring", step=0)
    env.run()
    expected = ring_allreduce_s(4, S, ALPHA, B / 4)
    assert ring.value == (0.0, expected)
    # a message across racks sent at the same instant: under fifo it takes the links first
    # and the all-reduce waits for its serialisation; under fair they share the links
    start = env.now
    ring = net.collective("allreduce", devices, S, "ring", step=1)
    message = net.send(devices[0], devices[1], S, step=1, detail="across")
    env.run()
    alone = 2 * ALPHA + S / (B / 4)
    if sharing == "fifo":
        assert message.done.value == (start, start + alone)
        assert ring.value == (start + S / (B / 4), start + S / (B / 4) + expected)
    else:
        assert ring.value[0] == start and ring.value[1] > start + expected
        assert message.done.value[1] > start + alone


def test_the_double_binary_tree_loads_each_nic_side_with_at_most_two_flows():
    for n in range(2, 65):
        trees = double_tree_parents(n)
        for parents in trees:
            assert sorted(parents).count(-1) == 1  # one root
        _, up = next(pattern("all_reduce", "tree", n).steps(FLAT))
        assert max(sum(1 for s, _, _ in up if s == r) for r in range(n)) <= 2
        assert max(sum(1 for _, d, _ in up if d == r) for r in range(n)) <= 2


def test_max_min_rates_on_a_hand_case():
    # x (4 B/s) carries f and g; g also crosses y (1 B/s): g gets 1, f the other 3
    env = simpy.Environment()
    x, y = Link(env, "x", 0.0, 4.0), Link(env, "y", 0.0, 1.0)
    f = flow([[(x, "tx")]], 1.0, 0.0)
    g = flow([[(x, "tx"), (y, "tx")]], 1.0, 0.0)
    assert max_min_rates([f, g], {("x", "tx"): 4.0, ("y", "tx"): 1.0}) == [3.0, 1.0]


def test_allreduce_s_is_the_closed_form_the_topology_feeds():
    # the pattern only changes (α, B): the formula stays the dispatcher's
    _, net = leaf_spine(8, hosts_per_leaf=2, k=4.0, hop=0.0)
    devices = net.topology.cluster.devices
    for algo in ("ring", "tree", "halving_doubling"):
        figures = net.topology.effective("allreduce", devices, algo)
        expected = allreduce_s(algo, 8, S, figures["latency_s"], figures["bandwidth_Bps"])
        assert net.collective_s("allreduce", devices, S, algo) == expected


# ---------------------------------------------------------------- inside a host


def test_nvlink_routes_and_intra_host_collectives():
    env, net = leaf_spine(2, 4, intra_host="nvlink", hop=0.0)
    host = net.topology.cluster.workers[0]
    d = host.devices
    assert names(net.route(d[0], d[1])) == ["worker0/gpu0/nvlink/tx", "worker0/gpu1/nvlink/rx"]
    assert names(net.route(d[2], host)) == ["worker0/pcie/up"]
    assert names(net.route(host, d[2])) == ["worker0/pcie/down"]
    other = net.topology.cluster.workers[1].devices[3]
    assert names(net.route(d[0], other)) == ["worker0/nic/tx", "worker1/nic/rx"]
    # a message inside the host pays the intra-host latency once, at a port's bandwidth
    move = net.send(d[0], d[1], S, step=0, detail="p2p")
    env.run()
    assert move.done.value == (0.0, A_IN + S / B_IN)
    # four GPUs of one host: ring on the per-GPU port bandwidth, every edge at once
    seconds, links = net.topology.collective("allreduce", d, S, "ring")
    assert seconds == ring_allreduce_s(4, S, A_IN, B_IN)
    assert len(links) == 8  # each GPU's tx and rx port
    # across hosts, the distance-4 step of halving-doubling sends 4 flows per NIC side
    devices = net.topology.cluster.devices
    got = net.collective_s("allreduce", devices, S, "halving_doubling")
    assert got == halving_doubling_allreduce_s(8, S, ALPHA, B / 4)
    hier = hierarchical_allreduce_s(2, 4, S, A_IN, B_IN, ALPHA, B)
    assert net.collective_s("allreduce", devices, S, "hierarchical") == hier


def test_pcie_routes_cross_the_shared_switch_uplink_to_the_nic():
    env, net = leaf_spine(2, 4, intra_host="pcie", hop=0.0, pcie_uplink_Bps=B / 2)
    d = net.topology.cluster.workers[0].devices
    far = net.topology.cluster.workers[1].devices[0]
    assert names(net.route(d[1], far)) == [
        "worker0/gpu1/pcie/tx",
        "worker0/pcie/up",
        "worker0/nic/tx",
        "worker1/nic/rx",
        "worker1/pcie/down",
        "worker1/gpu0/pcie/rx",
    ]
    assert names(net.route(d[0], d[3])) == ["worker0/gpu0/pcie/tx", "worker0/gpu3/pcie/rx"]
    move = net.send(d[1], far, S, step=0, detail="to another host")
    env.run()
    # the PCIe uplink (B/2) is the slowest link; latency: two intra halves + two NIC sides
    assert move.done.value == (0.0, 2 * A_IN + 2 * ALPHA + S / (B / 2))
    devices = net.topology.cluster.devices
    # inside a host, peer to peer through the switch at the device links' bandwidth
    assert net.collective_s("allreduce", d, S, "ring") == ring_allreduce_s(4, S, A_IN, B_IN)
    # across hosts, the four local rings squeeze through the shared uplink together
    hier = hierarchical_allreduce_s(2, 4, S, A_IN, B_IN, ALPHA, B / 2)
    assert net.collective_s("allreduce", devices, S, "hierarchical") == hier
    ring = net.collective_s("allreduce", devices, S, "ring")
    assert ring == ring_allreduce_s(8, S, ALPHA, B / 2)


def test_pcie_uplink_defaults_to_pcie3_x16():
    assert PCIE3_X16_Bps == 8e9 * 16 * 128 / 130 / 8 == pytest.approx(15.754e9, rel=1e-4)
    _, net = leaf_spine(1, 2, intra_host="pcie")
    uplink = next(link for link in net.topology.links() if link.name == "worker0/pcie/up")
    assert uplink.bandwidth_Bps == PCIE3_X16_Bps
