"""The network layer: links, routes, sends and collectives, with exact simulated times.

Everything here runs on SimPy alone (no JAX): a :class:`SwitchTopology` over a small
hand-made cluster, a :class:`Network` that routes, prices, holds links and records.
"""

from __future__ import annotations

from functools import partial
from itertools import pairwise

import pytest
import simpy
from helpers import count_steps
from helpers.network import INTRA_BW, INTRA_LAT, make_spec

from simdist.collectives import (
    broadcast_s,
    hierarchical_allreduce_s,
    reduce_s,
    ring_allreduce_s,
    torus2d_allreduce_s,
)
from simdist.hardware.cluster import Cluster
from simdist.network import (
    TOPOLOGIES,
    Link,
    Network,
    SwitchTopology,
    TorusTopology,
    Transfer,
    hold_links,
)
from simdist.network.transport import PROTOCOLS
from simdist.runtime.recorder import Recorder

MB = 1e6
GBps = 1e9
US10 = 1e-5


def make_net(
    hosts: int = 2, devices: int = 2, ps: int = 1, sharing: str = "fifo"
) -> tuple[simpy.Environment, Network]:
    env = simpy.Environment()
    cluster = Cluster(make_spec(hosts, devices, ps))
    topology = SwitchTopology(
        env,
        cluster,
        nic_latency_s=US10,
        nic_bandwidth_Bps=GBps,
        intra_latency_s=INTRA_LAT,
        intra_bandwidth_Bps=INTRA_BW,
        sharing=sharing,
    )
    return env, Network(env, topology, Recorder())


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.fixture
def log() -> list[tuple[str, float, float]]:
    return []


def sender(links, nbytes, name, log):
    moving = Transfer(links[0].arbiter.env, links, nbytes)
    start, end = yield moving.done
    log.append((name, start, end))


# -- links -----------------------------------------------------------------


def test_one_transfer_is_latency_plus_bytes_over_bandwidth(env, log):
    link = Link(env, "a/nic", US10, GBps)
    env.process(sender([link], MB, "x", log))
    env.run()
    assert log == [("x", 0.0, US10 + MB / GBps)]
    assert log[0][2] == pytest.approx(0.00101, rel=1e-12)
    assert link.transfer_time(MB) == US10 + MB / GBps


def test_concurrent_transfers_on_a_shared_nic_serialise_fifo(env, log):
    nic = Link(env, "ps0/nic", US10, GBps)
    s = MB / GBps
    env.process(sender([nic], MB, "first", log))
    env.process(sender([nic], MB, "second", log))
    env.run()
    # the second message is serialised after the first; latencies overlap
    assert log == [("first", 0.0, US10 + s), ("second", s, US10 + 2 * s)]


def test_transfers_on_disjoint_links_overlap(env, log):
    a = Link(env, "a/nic", US10, GBps)
    b = Link(env, "b/nic", US10, GBps)
    t = US10 + MB / GBps
    env.process(sender([a], MB, "on a", log))
    env.process(sender([b], MB, "on b", log))
    env.run()
    assert log == [("on a", 0.0, t), ("on b", 0.0, t)]


def test_two_link_route_sums_latency_and_takes_min_bandwidth(env, log):
    fast = Link(env, "a/nic", US10, 10 * GBps)
    slow = Link(env, "b/nic", 2 * US10, GBps)
    env.process(sender([slow, fast], MB, "x", log))
    env.run()
    assert log == [("x", 0.0, (US10 + 2 * US10) + MB / GBps)]


def test_route_shares_endpoint_and_waits_for_all_links(env, log):
    # a->ps and b->ps both need ps/nic: the second waits although a/nic, b/nic are free.
    a, b, ps = (Link(env, f"{n}/nic", 0.0, GBps) for n in ("a", "b", "ps"))
    t = MB / GBps
    env.process(sender([a, ps], MB, "a->ps", log))
    env.process(sender([b, ps], MB, "b->ps", log))
    env.run()
    assert log == [("a->ps", 0.0, t), ("b->ps", t, 2 * t)]


def test_duplicate_links_are_held_once(env, log):
    link = Link(env, "a/intra", US10, GBps)
    env.process(sender([link, link], MB, "x", log))
    env.run()
    assert log == [("x", 0.0, US10 + MB / GBps)]


def test_crossing_routes_do_not_deadlock(env, log):
    a = Link(env, "a/nic", 0.0, GBps)
    b = Link(env, "b/nic", 0.0, GBps)
    t = MB / GBps
    env.process(sender([a, b], MB, "a->b", log))
    env.process(sender([b, a], MB, "b->a", log))
    env.run()
    assert log == [("a->b", 0.0, t), ("b->a", t, 2 * t)]


def test_cancelled_transfer_releases_its_links_and_never_arrives(env, log):
    nic = Link(env, "a/nic", 0.0, GBps)
    t = MB / GBps
    victim = Transfer(env, [nic], MB)

    def killer():
        yield env.timeout(t / 4)
        victim.cancel()

    env.process(killer())
    env.process(sender([nic], MB, "next", log))
    env.run()
    assert log == [("next", t / 4, t / 4 + t)]
    assert not victim.done.triggered and victim.state == "cancelled"


def test_hold_links_waits_for_a_busy_link(env, log):
    nic0, nic1 = Link(env, "w0/nic", US10, GBps), Link(env, "w1/nic", US10, GBps)
    seconds = ring_allreduce_s(2, MB, US10, GBps)

    def allreduce():
        log.append(("allreduce", *(yield env.process(hold_links(env, [nic0, nic1], seconds)))))

    env.process(sender([nic1], MB, "transfer", log))
    env.process(allreduce())
    env.run()
    # the transfer holds nic1 only while its bytes are serialised; its latency is
    # propagation, so the all-reduce may start on the link before the bytes arrive
    t = MB / GBps
    assert log == [("transfer", 0.0, US10 + t), ("allreduce", t, t + seconds)]


def test_invalid_links_and_sizes_are_refused(env):
    with pytest.raises(ValueError, match="bandwidth"):
        Link(env, "x", 0.0, 0.0)
    with pytest.raises(ValueError, match="latency"):
        Link(env, "x", -1.0, GBps)
    with pytest.raises(ValueError, match="negative"):
        Transfer(env, [Link(env, "y", 0.0, GBps)], -1)


# -- the switch topology and the network --------------------------------------


def test_switch_routes_inside_and_between_hosts():
    _, net = make_net()
    w0, w1 = net.topology.cluster.workers
    (ps0,) = net.topology.cluster.ps_hosts
    d00, d01 = w0.devices
    assert [link.name for link in net.route(d00, d01)] == ["worker0/intra"]
    assert [link.name for link in net.route(w0, d01)] == ["worker0/intra"]
    assert [link.name for link in net.route(w0, w1)] == ["worker0/nic", "worker1/nic"]
    assert [link.name for link in net.route(ps0, w1.devices[1])] == ["ps0/nic", "worker1/nic"]
    assert TOPOLOGIES["switch"] is SwitchTopology and TOPOLOGIES["torus"] is TorusTopology


def test_send_between_hosts_pays_both_latencies_and_records_on_the_ps():
    env, net = make_net()
    w0 = net.topology.cluster.workers[0]
    ps0 = net.topology.cluster.ps_hosts[0]
    arrived = []
    moving = net.send(ps0, w0, MB, step=3, detail="pull ps0", then=lambda: arrived.append(env.now))
    env.run()
    s = MB / GBps
    assert moving.done.value == (0.0, 2 * US10 + s)
    assert arrived == [2 * US10 + s]
    events = net.recorder.events_frame()
    # the PS's NIC serialised the bytes for s; the worker host (with devices) records nothing
    assert events.to_dict("records") == [
        {
            "start_s": 0.0,
            "end_s": s,
            "host": "ps0",
            "device": "ps0",
            "kind": "comm",
            "nbytes": int(MB),
            "step": 3,
            "detail": "pull ps0",
            "links": "ps0/nic",
        }
    ]


def test_sends_to_a_device_record_the_wait_and_the_delivery():
    env, net = make_net(hosts=1, devices=2, ps=0)
    host = net.topology.cluster.workers[0]
    d0, d1 = host.devices
    for device in (d0, d1):
        net.send(host, device, MB, step=0, detail="fetch", wait_detail="waiting")
    env.run()
    s = MB / INTRA_BW
    rows = net.recorder.events_frame()[["start_s", "end_s", "device", "kind", "links"]]
    assert rows.values.tolist() == [
        [0.0, s + INTRA_LAT, "worker0/gpu0", "comm", "worker0/intra"],
        [0.0, s, "worker0/gpu1", "idle", ""],
        [s, 2 * s + INTRA_LAT, "worker0/gpu1", "comm", "worker0/intra"],
    ]


def test_wait_all_records_one_phase_on_the_hosts_devices():
    env, net = make_net(hosts=1, devices=1, ps=2)
    (worker,) = net.topology.cluster.workers
    ps0, ps1 = net.topology.cluster.ps_hosts

    def pull():
        moves = [net.send(p, worker, MB, step=0, detail=f"pull {p.name}") for p in (ps0, ps1)]
        yield from net.wait_all(worker.devices, moves, step=0, detail="pull", nbytes=2 * MB)

    env.process(pull())
    env.run()
    s = MB / GBps
    # both messages enter through the worker's one NIC: the second is serialised after
    # the first, and each pays both NIC latencies
    assert env.now == pytest.approx(2 * s + 2 * US10, rel=1e-12)
    events = net.recorder.events_frame()
    phase = events[events["detail"] == "pull"]
    assert phase[["start_s", "host", "kind", "nbytes", "links"]].values.tolist() == [
        [0.0, "worker0", "comm", int(2 * MB), "worker0/nic"]
    ]
    assert phase["end_s"].iloc[0] == env.now


def test_allreduce_inside_a_host_uses_the_intra_link():
    env, net = make_net(hosts=1, devices=4, ps=0)
    devices = net.topology.cluster.devices
    done = net.collective("allreduce", devices, MB, "ring", step=7)
    env.run()
    seconds = ring_allreduce_s(4, MB, INTRA_LAT, INTRA_BW)
    assert done.value == (0.0, seconds)
    events = net.recorder.events_frame()
    assert len(events) == 4
    assert set(events["detail"]) == {"all-reduce ring"}
    assert set(events["links"]) == {"worker0/intra"}
    assert set(events["step"]) == {7}


def test_allreduce_across_hosts_holds_every_nic_and_intra_link():
    env, net = make_net(hosts=2, devices=2, ps=0)
    devices = net.topology.cluster.devices
    flat = net.collective_s("allreduce", devices, MB, "ring")
    hier = net.collective_s("allreduce", devices, MB, "hierarchical")
    assert flat == ring_allreduce_s(4, MB, US10, GBps)
    assert hier == hierarchical_allreduce_s(2, 2, MB, INTRA_LAT, INTRA_BW, US10, GBps)
    # a message already on worker1's intra link delays the all-reduce, which needs it too
    w1 = net.topology.cluster.workers[1]
    moving = net.send(w1.devices[0], w1.devices[1], MB, step=0, detail="p2p")
    done = net.collective(
        "allreduce", devices, MB, "hierarchical", step=0, detail="all-reduce nccl"
    )
    env.run()
    s = MB / INTRA_BW
    assert moving.done.value == (0.0, s + INTRA_LAT)
    assert done.value == (s, s + hier)
    rows = net.recorder.events_frame()
    reduce_rows = rows[rows["detail"] == "all-reduce nccl"]
    assert (
        reduce_rows["links"].tolist()
        == ["worker0/intra;worker0/nic"] * 2 + ["worker1/intra;worker1/nic"] * 2
    )


def test_broadcast_and_reduce_are_binomial_trees():
    env, net = make_net(hosts=1, devices=4, ps=0)
    devices = net.topology.cluster.devices
    net.collective("broadcast", devices, MB, step=0)
    env.run()
    assert env.now == broadcast_s(4, MB, INTRA_LAT, INTRA_BW) == 2 * (INTRA_LAT + MB / INTRA_BW)
    assert net.collective_s("reduce", devices, MB, "tree") == reduce_s(4, MB, INTRA_LAT, INTRA_BW)
    assert broadcast_s(5, MB, US10, GBps) == pytest.approx(3 * (US10 + MB / GBps), rel=1e-12)
    assert broadcast_s(1, MB, US10, GBps) == 0.0
    assert set(net.recorder.events_frame()["detail"]) == {"broadcast tree"}


def test_torus_topology_prices_the_2d_ring_on_the_ici():
    env = simpy.Environment()
    cluster = Cluster(make_spec(hosts=1, devices=8, ps=0))
    topology = TorusTopology(
        env,
        cluster,
        4,
        2,
        ici_latency_s=INTRA_LAT,
        ici_bandwidth_Bps=INTRA_BW,
        nic_latency_s=US10,
        nic_bandwidth_Bps=GBps,
    )
    net = Network(env, topology, Recorder())
    net.collective("allreduce", cluster.devices, MB, "torus2d", step=0)
    env.run()
    assert env.now == torus2d_allreduce_s(4, 2, MB, INTRA_LAT, INTRA_BW)
    assert set(net.recorder.events_frame()["links"]) == {"worker0/ici"}


# -- joins ------------------------------------------------------------------


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_join_fires_in_the_step_all_of_would(sharing):
    """``Network.join`` counts its messages as they arrive and schedules only the last
    one's ``done``: every event, tied ones included, is processed in the order
    ``env.all_of`` over the ``done`` events gives — with fewer SimPy steps."""

    def simulate(join):
        env, net = make_net(hosts=3, devices=1, ps=2, sharing=sharing)
        workers, servers = net.topology.cluster.workers, net.topology.cluster.ps_hosts
        order = []
        steps = count_steps(env)

        def noticed(what):  # at the arrival, and in a step of its own at the same instant
            order.append((*what, env.now))
            env.timeout(0).callbacks.append(lambda _: order.append(("noticed", *what, env.now)))

        def worker(w):
            for i in range(4):  # equal messages from equal starts: ties at every arrival
                moves = [
                    net.send(
                        ps,
                        workers[w],
                        MB * (1 + (w + k) % 2),
                        step=i,
                        detail="pull",
                        then=lambda w=w, k=k: noticed(("arrived", w, k)),
                    )
                    for k, ps in enumerate(servers)
                ]
                yield join(env, net, moves)
                order.append(("joined", w, i, env.now))

        def observer():  # timers landing on the same instants as the joins
            for _ in range(40):
                yield env.timeout(MB / GBps / 2)
                order.append(("tick", env.now))

        for w in range(len(workers)):
            env.process(worker(w))
        env.process(observer())
        env.run()
        return order, steps[0]

    counted, counted_steps = simulate(lambda env, net, moves: net.join(moves))
    reference, reference_steps = simulate(
        lambda env, net, moves: env.all_of([move.done for move in moves])
    )
    assert counted == reference
    assert sum(entry[0] == "joined" for entry in counted) == 12
    assert any(a[-1] == b[-1] and a[0] != b[0] for a, b in pairwise(counted))  # ties
    # one ``done`` left out per joined message but the last (all_of's own step stays)
    assert counted_steps == reference_steps - 12


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
@pytest.mark.parametrize("protocol", ["ideal", "grpc"])
def test_a_message_triggers_the_event_it_is_given_where_then_would(sharing, protocol):
    """``net.send(done=event)``: the receiver's event is triggered at the arrival, in the
    SimPy step ``then=event.succeed`` scheduled it, with the arrival's times as its value;
    the message's own ``done`` step, which nobody listened to, is gone."""

    def simulate(given):
        env, net = make_net(hosts=3, devices=1, ps=1, sharing=sharing)
        net = Network(env, net.topology, Recorder(), PROTOCOLS[protocol])
        steps = count_steps(env)
        workers, (server,) = net.topology.cluster.workers, net.topology.cluster.ps_hosts
        order = []

        def noticed(w, i):  # at the arrival, and in a step of its own at the same instant
            order.append(("arrived", w, i, env.now))
            env.timeout(0).callbacks.append(lambda _: order.append(("noticed", w, i)))

        def receiver(w):
            for i in range(4):  # waits before or after the arrival, ties at every arrival
                ready = env.event()
                if given:
                    then = partial(noticed, w, i)
                    net.send(server, workers[w], MB, step=i, detail="pull", then=then, done=ready)
                else:

                    def then(w=w, i=i, ready=ready):
                        noticed(w, i)
                        ready.succeed()

                    net.send(server, workers[w], MB, step=i, detail="pull", then=then)
                if w == 1:
                    yield env.timeout(MB / GBps)
                yield ready
                order.append((w, i, env.now))
                env.timeout(0).callbacks.append(lambda _, w=w, i=i: order.append(("then", w, i)))

        for w in range(len(workers)):
            env.process(receiver(w))
        env.run()
        return order, steps[0], net.recorder

    given, given_steps, given_rows = simulate(True)
    reference, reference_steps, reference_rows = simulate(False)
    assert given == reference
    assert len(given) == 48
    assert given_steps == reference_steps - 12  # one ``done`` step per message
    assert given_rows.events_frame().equals(reference_rows.events_frame())
