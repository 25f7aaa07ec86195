"""Transports price collectives: every step across hosts, from the protocol's two figures.

A protocol gives a collective's inter-host steps ``collective_efficiency`` of the line rate
and adds ``collective_step_s`` to their α (simdist/network/transport.py); steps inside a
host are untouched. On 4 hosts of one device each, a ring all-reduce of S bytes takes
2·3·(α + step + S/(4·share·B)): the tcp/rdma gap below is that formula's, by hand.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import simpy
from typer.testing import CliRunner

from simdist.cli import app
from simdist.cli.common import console
from simdist.collectives import hierarchical_allreduce_s, ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.hardware.cluster import Cluster
from simdist.network import PROTOCOLS, Network, build_topology, protocol_of
from simdist.network.transport import ALIASES, PROTOCOL_NAMES
from simdist.runtime.engine import simulate
from simdist.runtime.recorder import Recorder
from simdist.scenario import load_scenario
from simdist.scenario.cluster import NetworkSpec
from simdist.step_costs import Costs

C = 1e-3  # seconds of compute per replica step
S = 1_000_000  # gradient bytes
STEPS = 3
ALPHA, B = 50e-6, 1.25e9  # mwm_2x4_ring.yaml's NIC: 50 us, 10 Gbit/s
INTRA_ALPHA, INTRA_B = 2e-6, 300e9  # and its NVLink

# The presets' figures, as transport.py cites them.
TCP_SHARE, TCP_STEP = 2.06 / 4.0, 14e-6 + 15e-6  # NCCL NET/Socket; NCCL's step + socket's
RDMA_SHARE, RDMA_STEP = 12.0 / 12.5, 14e-6  # NCCL NET/IB; NCCL's step


def costs() -> Costs:
    return Costs(
        compute_s=C,
        grad_nbytes=S,
        flops_per_replica_step=0.0,
        total_steps=STEPS,
        param_leaves=(("params/w", (1000, 250), S),),
    )


def ring_run(protocol: str, *overrides: str):
    """mwm's flat ring over 4 hosts x 1 device, exact timing, under ``protocol``."""
    scenario = load_scenario(
        "scenarios/mwm_2x4_ring.yaml",
        [
            "numerics=false",
            "cluster.device.variability=0",
            "workload.eval_every=0",
            "cluster.hosts=4",
            "cluster.devices_per_host=1",
            f"cluster.network.protocol={protocol}",
            *overrides,
        ],
    )
    return simulate(scenario, costs())


def test_ring_allreduce_over_tcp_is_slower_than_over_rdma_by_the_constants():
    tcp = ring_run("tcp").summary["allreduce_s"]
    rdma = ring_run("rdma").summary["allreduce_s"]
    ideal = ring_run("ideal").summary["allreduce_s"]
    # 2(n-1) = 6 steps, each alpha + step cost + S/n over the derated NIC
    tcp_step = ALPHA + TCP_STEP + S / (4 * TCP_SHARE * B)  # 79 us + 388.35 us
    rdma_step = ALPHA + RDMA_STEP + S / (4 * RDMA_SHARE * B)  # 64 us + 208.33 us
    assert tcp == pytest.approx(6 * tcp_step, rel=1e-12)
    assert tcp == pytest.approx(2.804097087e-3, rel=1e-9)
    assert rdma == pytest.approx(6 * rdma_step, rel=1e-12)
    assert rdma == pytest.approx(1.634e-3, rel=1e-12)
    assert tcp / rdma == pytest.approx(tcp_step / rdma_step, rel=1e-12)  # 1.716
    assert ideal == ring_allreduce_s(4, S, ALPHA, B)  # the bare wire, as before
    # the step is compute plus the priced all-reduce, to the last bit
    assert ring_run("tcp").summary["simulated_time_s"] == pytest.approx(STEPS * (C + tcp))


def network_on(protocol: str) -> tuple[simpy.Environment, Network]:
    scenario = load_scenario(
        "scenarios/mwm_2x4_ring.yaml",
        [
            "numerics=false",
            "cluster.hosts=4",
            "cluster.devices_per_host=1",
            f"cluster.network.protocol={protocol}",
        ],
    )
    env = simpy.Environment()
    topology = build_topology("switch", env, Cluster(scenario.cluster), scenario)
    return env, Network(env, topology, Recorder(), protocol_of(scenario.cluster.network))


@pytest.mark.parametrize(
    "op, rounds, per_round",
    [
        ("reduce_scatter", 3, S / 4),  # ring: n-1 rounds of S/n
        ("broadcast", 2, S),  # binomial tree: ceil(log2 4) rounds of S
    ],
)
def test_other_collectives_pay_the_transport_on_every_round(op, rounds, per_round):
    held = {}
    for name in ("tcp", "rdma"):
        env, net = network_on(name)
        devices = net.topology.cluster.devices
        process = net.collective(op, devices, S, step=0)
        env.run()
        start, end = process.value
        held[name] = end - start
    tcp = rounds * (ALPHA + TCP_STEP + per_round / (TCP_SHARE * B))
    rdma = rounds * (ALPHA + RDMA_STEP + per_round / (RDMA_SHARE * B))
    assert held["tcp"] == pytest.approx(tcp, rel=1e-12)
    assert held["rdma"] == pytest.approx(rdma, rel=1e-12)
    assert held["tcp"] / held["rdma"] == pytest.approx(tcp / rdma, rel=1e-12)


def test_steps_inside_a_host_are_not_priced_by_the_transport():
    # NCCL's hierarchical all-reduce on 2 hosts x 4: only the ring across hosts pays tcp.
    scenario = load_scenario(
        "scenarios/mwm_2x4_nccl.yaml",
        [
            "numerics=false",
            "cluster.device.variability=0",
            "workload.eval_every=0",
            "cluster.network.protocol=tcp",
        ],
    )
    tcp = simulate(scenario, costs()).summary["allreduce_s"]
    expected = hierarchical_allreduce_s(
        2, 4, S, INTRA_ALPHA, INTRA_B, ALPHA + TCP_STEP, B * TCP_SHARE
    )
    assert tcp == pytest.approx(expected, rel=1e-12)
    # one host: every step inside it, so the transport changes nothing
    one_host = [
        "numerics=false",
        "cluster.device.variability=0",
        "workload.eval_every=0",
        "cluster.hosts=1",
    ]
    by_protocol = {
        name: simulate(
            load_scenario(
                "scenarios/mwm_2x4_ring.yaml", [*one_host, f"cluster.network.protocol={name}"]
            ),
            costs(),
        ).summary["allreduce_s"]
        for name in ("ideal", "tcp", "rdma")
    }
    assert by_protocol["tcp"] == by_protocol["rdma"] == by_protocol["ideal"]
    assert by_protocol["ideal"] == ring_allreduce_s(4, S, INTRA_ALPHA, INTRA_B)


def test_leaf_spine_derates_nics_and_uplinks_not_nvlink():
    scenario = load_scenario(
        "scenarios/leaf_spine_2racks.yaml",
        ["numerics=false", "cluster.network.protocol=nccl-ib"],
    )
    env = simpy.Environment()
    topology = build_topology("switch", env, Cluster(scenario.cluster), scenario)
    devices = topology.cluster.devices
    uplink = topology.uplink_Bps  # 2 x NIC / 4: the flat ring's bottleneck
    nic = scenario.cluster.links.network
    flat = topology.effective("allreduce", devices, "ring")
    assert flat["bandwidth_Bps"] == pytest.approx(uplink * RDMA_SHARE, rel=1e-12)
    hop = scenario.cluster.network.hop_latency_s
    assert flat["latency_s"] == pytest.approx(nic.latency_s + 3 * hop + RDMA_STEP, rel=1e-12)
    hier = topology.effective("allreduce", devices, "hierarchical")
    ideal = load_scenario("scenarios/leaf_spine_2racks.yaml", ["numerics=false"])
    bare = build_topology("switch", simpy.Environment(), Cluster(ideal.cluster), ideal)
    bare_hier = bare.effective("allreduce", bare.cluster.devices, "hierarchical")
    assert hier["intra_bandwidth_Bps"] == bare_hier["intra_bandwidth_Bps"]
    assert hier["intra_latency_s"] == bare_hier["intra_latency_s"]
    assert hier["inter_bandwidth_Bps"] == pytest.approx(
        bare_hier["inter_bandwidth_Bps"] * RDMA_SHARE, rel=1e-12
    )


def test_nccl_names_are_aliases_and_the_schema_takes_every_name():
    for alias, preset in ALIASES.items():
        assert protocol_of(NetworkSpec(protocol=alias)) is PROTOCOLS[preset]
    literal = typing.get_args(NetworkSpec.model_fields["protocol"].annotation)
    assert set(literal) == set(PROTOCOL_NAMES)
    assert PROTOCOLS["ideal"].ideal_collectives
    for name in ("tcp", "rdma", "grpc"):
        p = PROTOCOLS[name]
        assert not p.ideal_collectives and "nccl" in p.source.lower()
    assert PROTOCOLS["grpc"].collective_link(ALPHA, B) == PROTOCOLS["tcp"].collective_link(ALPHA, B)


def test_scenario_figures_override_the_collective_preset():
    spec = NetworkSpec.model_validate(
        {"protocol": "tcp", "collective_efficiency": 0.8, "collective_step": "5us"}
    )
    p = protocol_of(spec)
    assert (p.collective_efficiency, p.collective_step_s) == (0.8, 5e-6)
    assert p.efficiency == PROTOCOLS["tcp"].efficiency  # messages keep the preset's
    ran = ring_run("tcp", "cluster.network.collective_efficiency=0.8")
    step = ALPHA + TCP_STEP + S / (4 * 0.8 * B)
    assert ran.summary["allreduce_s"] == pytest.approx(6 * step, rel=1e-12)


def test_a_bad_protocol_is_one_error_listing_the_choices():
    with pytest.raises(ScenarioError) as info:
        ring_run("infiniband")
    assert info.value.field == "cluster.network.protocol"
    for name in PROTOCOL_NAMES:
        assert repr(name) in info.value.message
    result = invoke("--protocol", "infiniband")
    assert result.exit_code != 0
    assert "--protocol" in result.output and "'nccl-ib'" in result.output
    assert "Traceback" not in result.output


# -- simdist collectives --protocol --------------------------------------------------


runner = CliRunner()


def invoke(*args: str):
    width = console.width
    console.width = 200
    try:
        return runner.invoke(app, ["collectives", *args])
    finally:
        console.width = width


def ring_row(protocol: str) -> list[str]:
    result = invoke(
        "--algo", "ring", "--n", "4", "--size", "1MB", "--bandwidth", "10Gbit/s",
        "--latency", "50us", "--protocol", protocol,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in result.output.splitlines()]
    (row,) = [row for row in cells if len(row) == 7 and row[0]]
    if protocol != "ideal":
        assert f"{protocol}:" in result.output and "per step across hosts" in result.output
    return row


def test_cli_prices_the_collective_with_the_protocol():
    # the same ring as the scenario test above: 2.804 ms over tcp, 1.634 ms over rdma
    assert ring_row("tcp")[2:4] == ["ring", "2.8 ms"]
    assert ring_row("nccl-socket")[2:4] == ["ring", "2.8 ms"]
    assert ring_row("rdma")[2:4] == ["ring", "1.63 ms"]
    assert ring_row("ideal")[2:4] == ["ring", "1.5 ms"]  # 6 (50 us + 200 us)


def test_cli_protocol_goes_through_the_topology_too():
    result = invoke(
        "--algo", "ring", "--n", "8", "--devices-per-host", "4", "--size", "1GB",
        "--bandwidth", "100Gbit/s", "--latency", "0", "--intra-host", "nvlink",
        "--protocol", "nccl-ib",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "B 12 GB/s" in result.output  # 0.96 x 12.5 GB/s: the NIC, derated


def test_the_collective_validation_cases_stay_in_their_band(monkeypatch):
    # benchmarks/validation/collectives.py: published nccl-tests busbw, predicted (quick rows)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from validation import collectives

    assert len(collectives.CASES) >= 3 and collectives.TEXT
    for case in collectives.CASES:
        if case.quick:
            error = case.error_pct(case.predict())
            assert abs(error) <= case.expect_within_pct, (case.source, error)
