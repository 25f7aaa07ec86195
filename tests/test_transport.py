"""Transport protocols and co-located parameter servers, with exact times on hand cases.

Sizes, bandwidths and latencies are powers of two (efficiency 1/2), so every simulated
time below is an exact binary fraction, compared with ``==``. One NIC: B = 1024 B/s and
α = 1/4 s, so a bare 1024-byte message between two machines takes 2α + 1 = 1.5 s.
"""

from __future__ import annotations

import pytest
import simpy
import yaml
from helpers.ps_timing import ALPHA_INTRA as PS_ALPHA_INTRA
from helpers.ps_timing import B_INTRA as PS_B_INTRA
from helpers.ps_timing import FIFO, L, S, applied_times, costs, scenario
from helpers.ps_timing import B as PS_B

from simdist.errors import ScenarioError
from simdist.hardware.cluster import Cluster
from simdist.network import PROTOCOLS, Message, Network, Protocol, SwitchTopology, protocol_of
from simdist.network.topology import machine_of
from simdist.runtime.engine import simulate
from simdist.runtime.recorder import Recorder
from simdist.scenario import scenario_from_dict
from simdist.scenario.cluster import ClusterSpec, NetworkSpec

B, ALPHA = 1024.0, 0.25  # NIC bandwidth (B/s) and latency (s)
B_INTRA, ALPHA_INTRA = 4096.0, 2.0**-4
N = 1024  # bytes of a message
WIRE = 2 * ALPHA + N / B  # 1.5 s: a bare message between two machines


def make_net(
    protocol: Protocol | None = None,
    *,
    hosts: int = 2,
    ps: int = 2,
    placement: object = "separate",
    duplex: str = "full",
    sharing: str = "fair",
) -> tuple[simpy.Environment, Network]:
    spec = ClusterSpec(
        hosts=hosts, devices_per_host=1, ps=ps, ps_placement=placement, device={"profile": "cpu"}
    )
    env = simpy.Environment()
    topology = SwitchTopology(
        env,
        Cluster(spec),
        nic_latency_s=ALPHA,
        nic_bandwidth_Bps=B,
        intra_latency_s=ALPHA_INTRA,
        intra_bandwidth_Bps=B_INTRA,
        duplex=duplex,
        sharing=sharing,
    )
    return env, Network(env, topology, Recorder(), protocol)


def custom(efficiency: float = 1.0, overhead_s: float = 0.0, cpu_Bps: float | None = None):
    return Protocol("custom", efficiency, overhead_s, cpu_Bps)


def one_message(protocol: Protocol) -> tuple[float, float]:
    env, net = make_net(protocol)
    w0 = net.topology.cluster.workers[0]
    ps0 = net.topology.cluster.ps_hosts[0]
    move = net.send(w0, ps0, N, step=0, detail="push ps0")
    env.run()
    return move.done.value


# -- each knob alone ------------------------------------------------------


def test_ideal_is_the_bare_wire_and_the_default():
    assert PROTOCOLS["ideal"].ideal
    assert protocol_of(NetworkSpec()) is PROTOCOLS["ideal"]
    assert one_message(PROTOCOLS["ideal"]) == (0.0, WIRE)
    _env, net = make_net()
    assert net.transport.protocol is PROTOCOLS["ideal"]


def test_efficiency_stretches_the_serialisation_only():
    # 1024 payload bytes at half the line rate: 2 s on the wire, latency unchanged
    assert one_message(custom(efficiency=0.5)) == (0.0, 2 * ALPHA + N / (0.5 * B))


def test_per_message_overhead_is_paid_once_and_holds_no_link():
    assert one_message(custom(overhead_s=0.125)) == (0.0, WIRE + 0.125)
    # Two messages queued on one NIC (fifo): the second's transmission overlaps the
    # first's overhead, so each arrives 0.125 s after the bare wire's time.
    env, net = make_net(custom(overhead_s=0.125), duplex="half", sharing="fifo")
    w0 = net.topology.cluster.workers[0]
    ps0, ps1 = net.topology.cluster.ps_hosts
    a = net.send(w0, ps0, N, step=0, detail="push ps0")
    b = net.send(w0, ps1, N, step=0, detail="push ps1")
    env.run()
    assert a.done.value == (0.0, WIRE + 0.125)
    assert b.done.value == (1.0, 1.0 + WIRE + 0.125)


def test_cpu_cost_encodes_before_and_decodes_after_the_wire():
    # 2048 B/s of serialisation: 0.5 s to encode on the sender, 0.5 s to decode after
    assert one_message(custom(cpu_Bps=2048.0)) == (0.0, 0.5 + WIRE + 0.5)


def test_all_knobs_add_up():
    p = custom(efficiency=0.5, overhead_s=0.125, cpu_Bps=2048.0)
    assert one_message(p) == (0.0, 0.5 + (2 * ALPHA + 2.0) + 0.125 + 0.5)
    assert p.alone_s(N, 2 * ALPHA, B) == 0.5 + (2 * ALPHA + 2.0) + 0.125 + 0.5


@pytest.mark.parametrize(
    "sharing, duplex, ends",
    [
        # fair: both encode at 1024 B/s (1 s), share the NIC's tx (2 s), decode apart
        ("fair", "full", [(0.0, 1.0 + 2.0 + 2 * ALPHA + 0.5)] * 2),
        # fifo: encodes one after the other (0.5 s each), the NIC in turn
        ("fifo", "half", [(0.0, 0.5 + WIRE + 0.5), (0.5, 1.5 + WIRE + 0.5)]),
    ],
)
def test_two_messages_share_the_sending_hosts_cpu(sharing, duplex, ends):
    env, net = make_net(custom(cpu_Bps=2048.0), duplex=duplex, sharing=sharing)
    w0 = net.topology.cluster.workers[0]
    ps0, ps1 = net.topology.cluster.ps_hosts
    moves = [net.send(w0, ps, N, step=0, detail="push") for ps in (ps0, ps1)]
    env.run()
    assert [m.done.value for m in moves] == ends
    assert all(isinstance(m, Message) for m in moves)
    assert "worker0/cpu" in {link.name for link in moves[0].links}
    cpu = net.transport.cpu["worker0"]
    assert cpu.bandwidth_Bps == 2048.0 and cpu.host == "worker0"


def test_two_pushes_share_the_receiving_hosts_cpu():
    # encodes apart (0.5 s), the PS's rx shared (2 s), both decode at once on its CPU (1 s)
    env, net = make_net(custom(cpu_Bps=2048.0), ps=1)
    w0, w1 = net.topology.cluster.workers
    (ps0,) = net.topology.cluster.ps_hosts
    moves = [net.send(w, ps0, N, step=0, detail="push") for w in (w0, w1)]
    env.run()
    assert [m.done.value for m in moves] == [(0.0, 0.5 + 2.0 + 2 * ALPHA + 1.0)] * 2


def test_a_cancelled_message_never_arrives_and_frees_the_cpu():
    env, net = make_net(custom(cpu_Bps=2048.0))
    w0 = net.topology.cluster.workers[0]
    ps0, ps1 = net.topology.cluster.ps_hosts
    cut = net.send(w0, ps0, N, step=0, detail="push ps0")
    kept = net.send(w0, ps1, N, step=0, detail="push ps1")
    env.run(until=0.25)
    cut.cancel()
    env.run()
    assert not cut.done.triggered and cut.state == "cancelled"
    # 0.25 s at half the CPU (256 bytes encoded), the other 768 bytes alone: 0.375 s
    assert kept.done.value == (0.0, 0.625 + WIRE + 0.5)


def test_device_to_host_copies_pay_no_protocol():
    env, net = make_net(PROTOCOLS["grpc"])
    w0 = net.topology.cluster.workers[0]
    move = net.send(w0.devices[0], w0, N, step=0, detail="fetch")
    env.run()
    assert move.done.value == (0.0, ALPHA_INTRA + N / B_INTRA)
    assert not isinstance(move, Message) and net.transport.cpu == {}


def ps_rows(direction: str) -> set[tuple]:
    env, net = make_net(custom(cpu_Bps=2048.0))
    w0 = net.topology.cluster.workers[0]
    ps0 = net.topology.cluster.ps_hosts[0]
    if direction == "pull":
        net.send(ps0, w0.devices[0], N, step=0, detail="pull ps0")
    else:
        net.send(w0.devices[0], ps0, N, step=0, detail="push ps0")
    env.run()
    rows = net.recorder.events_frame().itertuples()
    return {(r.detail, r.start_s, r.end_s, r.links) for r in rows if r.host == "ps0"}


def test_recorded_ps_rows_cover_its_cpu_and_nic_work():
    # the sender: its encode and its NIC's transmission
    assert ps_rows("pull") == {("pull ps0", 0.0, 0.5 + N / B, "ps0/cpu;ps0/nic/tx")}
    # the receiver: from the first byte on the wire to the end of its decode
    assert ps_rows("push") == {("push ps0", 0.5, 0.5 + WIRE + 0.5, "ps0/cpu;ps0/nic/rx")}


# -- presets ------------------------------------------------------------------


def test_presets_load_cite_and_order_as_published():
    for name in ("tcp", "rdma", "grpc"):
        spec = scenario_from_dict(
            {**yaml.safe_load(MIRRORED), "cluster": {"network": {"protocol": name}}}
        ).cluster.network
        p = protocol_of(spec)
        assert p is PROTOCOLS[name] and p.name == name and not p.ideal
        assert len(p.source) > 80  # every preset says where its figures come from
    assert PROTOCOLS["tcp"].efficiency == 1460 / 1538  # RFC 6349 §3.3.1
    assert "assumed" in PROTOCOLS["grpc"].source and "RFC 6349" in PROTOCOLS["tcp"].source
    # 32 MiB over 25 Gbit/s: rdma < tcp < grpc, and gRPC's CPU makes it several times slower
    times = {name: PROTOCOLS[name].alone_s(32 * 2**20, 2e-5, 25e9 / 8) for name in PROTOCOLS}
    assert times["ideal"] < times["rdma"] < times["tcp"] < times["grpc"]
    assert 4 < times["grpc"] / times["rdma"] < 6


def test_explicit_figures_override_the_preset():
    spec = scenario_from_dict(
        {
            **yaml.safe_load(MIRRORED),
            "cluster": {
                "network": {
                    "protocol": "grpc",
                    "efficiency": 0.5,
                    "per_message_overhead": "1ms",
                    "serialization_bandwidth": "8Gbit/s",
                }
            },
        }
    ).cluster.network
    p = protocol_of(spec)
    assert (p.efficiency, p.per_message_overhead_s, p.serialization_Bps) == (0.5, 1e-3, 1e9)
    assert p.source.endswith("overridden by the scenario")


# -- co-located parameter servers ------------------------------------------------


def test_colocated_ps_tasks_keep_their_names_on_worker_machines():
    _env, net = make_net(placement="colocated", hosts=2, ps=3)
    cluster = net.topology.cluster
    assert [h.name for h in cluster.ps_hosts] == ["ps0", "ps1", "ps2"]
    assert [machine_of(h) for h in cluster.ps_hosts] == ["worker0", "worker1", "worker0"]
    assert cluster.machines == ["worker0", "worker1"]
    assert "ps0" not in net.topology.tx and "ps0" in cluster.roles
    _env, net = make_net(placement=["worker1", "worker1"])
    assert [machine_of(h) for h in net.topology.cluster.ps_hosts] == ["worker1", "worker1"]


def test_a_push_to_the_own_machines_ps_crosses_no_nic():
    env, net = make_net(placement="colocated")
    w0, w1 = net.topology.cluster.workers
    ps0, _ = net.topology.cluster.ps_hosts
    assert [link.name for link in net.route(w0, ps0)] == ["worker0/intra"]
    assert [link.name for link in net.route(w1, ps0)] == ["worker1/nic/tx", "worker0/nic/rx"]
    local = net.send(w0, ps0, N, step=0, detail="push ps0")
    remote = net.send(w1, ps0, N, step=0, detail="push ps0")
    env.run()
    assert local.done.value == (0.0, ALPHA_INTRA + N / B_INTRA)
    assert remote.done.value == (0.0, WIRE)


def test_loopback_pays_cpu_and_overhead_but_no_wire_framing():
    p = custom(efficiency=0.5, overhead_s=0.125, cpu_Bps=2048.0)
    env, net = make_net(p, placement="colocated")
    w0 = net.topology.cluster.workers[0]
    ps0 = net.topology.cluster.ps_hosts[0]
    move = net.send(w0, ps0, N, step=0, detail="push ps0")
    env.run()
    # one CPU encodes then decodes; the intra-host link at its full rate
    assert move.done.value == (0.0, 0.5 + ALPHA_INTRA + N / B_INTRA + 0.125 + 0.5)
    assert {link.name for link in move.links} == {"worker0/cpu", "worker0/intra"}


@pytest.mark.parametrize(
    "placement, end", [("separate", WIRE), ("colocated", 2 * N / B + 2 * ALPHA)]
)
def test_ps_and_worker_traffic_share_one_nic_when_colocated(placement, end):
    # worker0 pushes to ps1 while ps0 serves worker1's pull: co-located, ps0's parameters
    # and worker0's gradient both leave worker0's NIC and split it (fair sharing)
    env, net = make_net(placement=placement)
    w0, w1 = net.topology.cluster.workers
    ps0, ps1 = net.topology.cluster.ps_hosts
    push = net.send(w0, ps1, N, step=0, detail="push ps1")
    pull = net.send(ps0, w1, N, step=0, detail="pull ps0")
    env.run()
    assert push.done.value == pull.done.value == (0.0, end)
    rows = {r.host: r.links for r in net.recorder.events_frame().itertuples()}
    assert rows["ps0"] == ("worker0/nic/tx" if placement == "colocated" else "ps0/nic/tx")


def test_a_colocated_parameter_server_run_routes_through_worker_nics():
    # 2 workers, 2 PS tasks on their machines; fifo, half duplex: exact, no fair rates
    s = scenario(2, ps=2)
    s.cluster.ps_placement = "colocated"
    result = simulate(s, costs(2.0**-4, 4, leaves=(2**20, 2**20)))
    events = result.events
    links = set(";".join(events["links"].dropna()).split(";")) - {""}
    assert links and all(name.startswith(("worker0/", "worker1/")) for name in links)
    assert set(events["host"]) >= {"worker0", "worker1", "ps0", "ps1"}
    # every worker pushes half its gradient to its own machine's PS, without the NIC
    local = events[(events["host"] == "ps0") & (events["detail"] == "push ps0")]
    assert set(local["links"]) == {"worker0/intra", "worker0/nic"}  # half duplex


@pytest.mark.parametrize("placement", ["separate", "colocated"])
def test_a_ps_step_pays_the_protocol_on_pull_and_push(placement):
    # One worker, one PS, fifo and half duplex (tests/test_ps_timing.py's model), with
    # efficiency 1/2, 2**-12 s per message and 2**31 B/s of serialisation. Separate, a pull
    # or push costs encode + L + S/(B/2) + overhead + decode; co-located, the loopback over
    # the worker's intra-host link: encode + α_intra + S/B_intra + overhead + decode.
    network = {
        **FIFO,
        "efficiency": 0.5,
        "per_message_overhead": 2.0**-12,
        "serialization_bandwidth": 2.0**31,
    }
    s = scenario(1, network=network)
    s.cluster.ps_placement = placement
    c, steps = 2.0**-4, 3
    result = simulate(s, costs(c, steps))
    cpu = S / 2.0**31
    wire = L + S / (0.5 * PS_B) if placement == "separate" else PS_ALPHA_INTRA + S / PS_B_INTRA
    step_s = c + 2 * (cpu + wire + 2.0**-12 + cpu)
    assert applied_times(result) == [k * step_s for k in range(1, steps + 1)]


# -- scenario errors --------------------------------------------------------------

MIRRORED = """
name: t
numerics: false
cluster: {}
workload: {model: mlp, dataset: digits, batch_size: 8, optimizer: {name: sgd,
  learning_rate: 0.1}, steps: 1}
strategy: mirrored
"""


def load(cluster: dict, strategy: object = "mirrored"):
    data = yaml.safe_load(MIRRORED)
    data["cluster"], data["strategy"] = cluster, strategy
    return scenario_from_dict(data)


@pytest.mark.parametrize(
    "cluster, strategy, field, words",
    [
        ({"network": {"protocol": "udp"}}, "mirrored", "cluster.network.protocol", "grpc"),
        ({"network": {"efficiency": 1.5}}, "mirrored", "cluster.network.efficiency", "1"),
        (
            {"network": {"serialization_bandwidth": "fast"}},
            "mirrored",
            "cluster.network.serialization_bandwidth",
            "fast",
        ),
        ({"ps_placement": "colocated"}, "mirrored", "cluster.ps_placement", "no parameter-server"),
        (
            {"hosts": 2, "ps": 2, "ps_placement": ["worker0"]},
            "parameter_server",
            "cluster.ps_placement",
            "lists 1 hosts for 2 parameter-server tasks",
        ),
        (
            {"hosts": 2, "ps": 1, "ps_placement": ["ps0"]},
            "parameter_server",
            "cluster.ps_placement[0]",
            "not a worker host",
        ),
        (
            {"hosts": 2, "ps": 1, "ps_placement": "beside"},
            "parameter_server",
            "cluster.ps_placement",
            "colocated",
        ),
    ],
)
def test_scenario_errors(cluster, strategy, field, words):
    with pytest.raises(ScenarioError) as info:
        load(cluster, strategy)
    assert info.value.field == field
    assert words in info.value.message
