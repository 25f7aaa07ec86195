"""Topologies in scenarios: network sections that load, fail with the field named, and run.

Bandwidths and latencies are powers of two, so sums and quotients below are exact binary
fractions and every time is compared with ``==``.
"""

from __future__ import annotations

import pytest
import simpy
import yaml

from simdist.collectives import hierarchical_allreduce_s, ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.hardware.cluster import Cluster
from simdist.network import LeafSpineTopology, SwitchTopology, build_topology
from simdist.runtime.engine import simulate
from simdist.scenario import dump_scenario, scenario_from_dict
from simdist.step_costs import Costs
from simdist.strategies.multi_worker_mirrored import resolve_communication

B = 2.0**30  # NIC bandwidth, bytes/s
ALPHA = 2.0**-16  # NIC latency, s
HOP = 2.0**-20  # one switch hop, s
B_IN = 2.0**34  # intra-host (per GPU port / PCIe link), bytes/s
A_IN = 2.0**-19
S = 2.0**24  # bytes


def names(links) -> list[str]:
    return [link.name for link in links]


# ---------------------------------------------------------------- scenarios


def scenario(network: dict, strategy: object = "multi_worker_mirrored", **cluster: object):
    data = {
        "name": "topologies",
        "numerics": False,
        "cluster": {
            "hosts": 4,
            "devices_per_host": 1,
            # variability off: exact, hand-checkable times
            "device": {"profile": "cpu", "variability": 0},
            "links": {
                "network": {"bandwidth": B, "latency": ALPHA},
                "intra_host": {"bandwidth": B_IN, "latency": A_IN},
            },
            "network": network,
            **cluster,
        },
        "workload": {
            "model": "mlp",
            "batch_size": 8,
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "steps": 3,
        },
        "strategy": strategy,
    }
    return scenario_from_dict(data)


def costs(steps: int = 3, compute_s: float = 2.0**-8) -> Costs:
    return Costs(
        compute_s=compute_s,
        grad_nbytes=int(S),
        flops_per_replica_step=0,
        total_steps=steps,
        param_leaves=(("params/w", (int(S) // 4,), int(S)),),
    )


def test_a_leaf_spine_scenario_runs_the_ring_across_oversubscribed_uplinks():
    network = {"topology": "leaf_spine", "hosts_per_leaf": 1, "oversubscription": "4:1"}
    s = scenario(network)
    assert (s.cluster.network.oversubscription, s.cluster.network.hop_latency_s) == (4.0, 0.0)
    result = simulate(s, costs())
    step = 2.0**-8 + ring_allreduce_s(4, S, ALPHA, B / 4)
    assert result.summary["simulated_time_s"] == step + step + step
    assert result.summary["communication"] == "ring"  # auto on cpu


def test_auto_prices_nccl_and_ring_through_the_topology():
    # GPUs whose intra-host link is far slower than the NIC: the flat ring wins
    slow = {"bandwidth": B / 64, "latency": A_IN}
    device = {"profile": "v100", "compute_time": "4ms"}
    links = {"network": {"bandwidth": B, "latency": ALPHA}, "intra_host": slow}
    shape = {"hosts": 2, "devices_per_host": 2, "device": device, "links": links}
    chosen = simulate(scenario({}, **shape), costs(1)).summary["communication"]
    assert chosen == "ring"
    fast = {**links, "intra_host": {"bandwidth": B_IN, "latency": A_IN}}
    chosen = simulate(scenario({}, **{**shape, "links": fast}), costs(1)).summary["communication"]
    assert chosen == "nccl"
    assert resolve_communication("auto", "gpu", True, {"ring": 1.0, "hierarchical": 2.0}.get) == (
        "ring"
    )
    assert resolve_communication("auto", "gpu", True, {"ring": 2.0, "hierarchical": 2.0}.get) == (
        "nccl"
    )
    assert resolve_communication("auto", "gpu") == "nccl"


def test_switch_with_nvlink_is_one_leaf():
    s = scenario({"intra_host": "nvlink"}, hosts=2, devices_per_host=2)
    topology = build_topology("switch", simpy.Environment(), Cluster(s.cluster), s)
    assert isinstance(topology, LeafSpineTopology)
    assert set(topology.leaf_of.values()) == {0}
    assert "worker1/cpu1/nvlink/rx" in names(topology.links())
    s = scenario({})
    assert isinstance(
        build_topology("switch", simpy.Environment(), Cluster(s.cluster), s), SwitchTopology
    )


@pytest.mark.parametrize(
    ("network", "field", "words"),
    [
        (
            {"hosts_per_leaf": 2},
            "cluster.network.hosts_per_leaf",
            "only used by topology: leaf_spine",
        ),
        ({"oversubscription": 4}, "cluster.network.oversubscription", "topology here is switch"),
        ({"hop_latency": "1us"}, "cluster.network.hop_latency", "set topology: leaf_spine"),
        ({"topology": "leaf_spine"}, "cluster.network.hosts_per_leaf", "missing"),
        ({"topology": "leaf_spine", "hosts_per_leaf": 0}, "cluster.network.hosts_per_leaf", "1"),
        (
            {"topology": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": "1:4"},
            "cluster.network.oversubscription",
            "at least 1:1",
        ),
        (
            {"topology": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": "four"},
            "cluster.network.oversubscription",
            "e.g. oversubscription: 4",
        ),
        (
            {"topology": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": True},
            "cluster.network.oversubscription",
            "ratio",
        ),
        (
            {"topology": "leaf_spine", "hosts_per_leaf": 2, "hop_latency": "fast"},
            "cluster.network.hop_latency",
            "",
        ),
        ({"topology": "fat_tree"}, "cluster.network.topology", "leaf_spine"),
        ({"intra_host": "infiniband"}, "cluster.network.intra_host", "nvlink"),
        ({"pcie_uplink": "8GB/s"}, "cluster.network.pcie_uplink", "intra_host: pcie"),
    ],
)
def test_network_errors_name_the_field(network, field, words):
    with pytest.raises(ScenarioError) as error:
        scenario(network)
    assert error.value.field == field
    assert words in str(error.value)


def test_good_network_sections_load():
    s = scenario(
        {
            "topology": "leaf_spine",
            "hosts_per_leaf": 2,
            "oversubscription": 3,
            "hop_latency": "500ns",
            "intra_host": "pcie",
            "pcie_uplink": "8GB/s",
        }
    )
    net = s.cluster.network
    assert (net.hosts_per_leaf, net.oversubscription, net.hop_latency_s) == (2, 3.0, 5e-7)
    assert (net.intra_host, net.pcie_uplink_Bps) == ("pcie", 8e9)
    again = scenario_from_dict(yaml.safe_load(dump_scenario(s))).cluster.network
    assert again == net
    assert (
        scenario(
            {"topology": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": "6:2"}
        ).cluster.network.oversubscription
        == 3.0
    )


def test_tpu_keeps_its_torus():
    tpu = {"kind": "tpu", "topology": [2, 2]}
    with pytest.raises(ScenarioError) as error:
        scenario(
            {"intra_host": "nvlink"},
            strategy=tpu,
            hosts=1,
            devices_per_host=4,
            device={"profile": "tpu-v4"},
        )
    assert error.value.field == "cluster.network.intra_host"


@pytest.mark.parametrize("communication", ["ring", "nccl", "auto"])
def test_the_teaching_scenario_prices_both_algorithms_at_the_uplink(communication):
    from simdist.scenario import load_scenario

    s = load_scenario(
        "scenarios/leaf_spine_2racks.yaml",
        # variability off: exact, hand-checkable times
        [f"strategy.communication={communication}", "cluster.device.variability=0"],
    )
    links, hop = s.cluster.links, s.cluster.network.hop_latency_s
    uplink = 2 * links.network.bandwidth_Bps / 4
    alpha = links.network.latency_s + 3 * hop
    c = costs(2)
    if communication == "ring":
        allreduce = ring_allreduce_s(16, S, alpha, uplink)
    else:
        intra = links.intra_host
        allreduce = hierarchical_allreduce_s(
            4, 4, S, intra.latency_s, intra.bandwidth_Bps, alpha, uplink
        )
    result = simulate(s, c)
    step = c.compute_s + allreduce
    assert result.summary["simulated_time_s"] == step + step
    assert result.summary["communication"] == ("ring" if communication == "ring" else "nccl")
    assert result.summary["allreduce_s"] == allreduce
