"""Links, routes and devices: exact simulated times for small hand-checkable cases."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import simpy

from simdist.cluster import DEVICE_PROFILES, Cluster, Link, route, transfer
from simdist.errors import SimdistError

MB = 1e6
GBps = 1e9
US10 = 1e-5


def make_spec(**overrides: object) -> SimpleNamespace:
    spec = SimpleNamespace(
        hosts=2,
        worker_names=["worker0", "worker1"],
        ps=1,
        ps_names=["ps0"],
        devices_per_host=2,
        device=SimpleNamespace(profile="v100", peak_flops=None, efficiency=None),
        links=SimpleNamespace(
            intra_host=SimpleNamespace(bandwidth_Bps=300e9, latency_s=2e-6),
            network=SimpleNamespace(bandwidth_Bps=GBps, latency_s=US10),
        ),
    )
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.fixture
def log() -> list[tuple[str, float, float]]:
    return []


def sender(env, links, nbytes, name, log):
    start, end = yield env.process(transfer(env, links, nbytes))
    log.append((name, start, end))


def test_one_transfer_is_latency_plus_bytes_over_bandwidth(env, log):
    link = Link(env, "a/nic", US10, GBps)
    env.process(sender(env, [link], MB, "x", log))
    env.run()
    assert log == [("x", 0.0, US10 + MB / GBps)]
    assert log[0][2] == pytest.approx(0.00101, rel=1e-12)
    assert link.transfer_time(MB) == US10 + MB / GBps
    assert link.busy_s == MB / GBps  # latency is propagation: the link is free again


def test_concurrent_transfers_on_a_shared_nic_serialise_fifo(env, log):
    nic = Link(env, "ps0/nic", US10, GBps)
    s = MB / GBps
    env.process(sender(env, [nic], MB, "first", log))
    env.process(sender(env, [nic], MB, "second", log))
    env.run()
    # the second message is serialised after the first; latencies overlap
    assert log == [("first", 0.0, US10 + s), ("second", s, US10 + 2 * s)]
    assert nic.busy_s == 2 * s


def test_transfers_on_disjoint_links_overlap(env, log):
    a = Link(env, "a/nic", US10, GBps)
    b = Link(env, "b/nic", US10, GBps)
    t = US10 + MB / GBps
    env.process(sender(env, [a], MB, "on a", log))
    env.process(sender(env, [b], MB, "on b", log))
    env.run()
    assert log == [("on a", 0.0, t), ("on b", 0.0, t)]


def test_two_link_route_sums_latency_and_takes_min_bandwidth(env, log):
    fast = Link(env, "a/nic", US10, 10 * GBps)
    slow = Link(env, "b/nic", 2 * US10, GBps)
    env.process(sender(env, [slow, fast], MB, "x", log))
    env.run()
    assert log == [("x", 0.0, (US10 + 2 * US10) + MB / GBps)]


def test_route_shares_endpoint_and_waits_for_all_links(env, log):
    # a->ps and b->ps both need ps/nic: the second waits although a/nic, b/nic are free.
    a, b, ps = (Link(env, f"{n}/nic", 0.0, GBps) for n in ("a", "b", "ps"))
    t = MB / GBps
    env.process(sender(env, [a, ps], MB, "a->ps", log))
    env.process(sender(env, [b, ps], MB, "b->ps", log))
    env.run()
    assert log == [("a->ps", 0.0, t), ("b->ps", t, 2 * t)]


def test_duplicate_links_are_held_once(env, log):
    link = Link(env, "a/intra", US10, GBps)
    env.process(sender(env, [link, link], MB, "x", log))
    env.run()
    assert log == [("x", 0.0, US10 + MB / GBps)]
    assert link.busy_s == MB / GBps


def test_crossing_routes_do_not_deadlock(env, log):
    a = Link(env, "a/nic", 0.0, GBps)
    b = Link(env, "b/nic", 0.0, GBps)
    t = MB / GBps
    env.process(sender(env, [a, b], MB, "a->b", log))
    env.process(sender(env, [b, a], MB, "b->a", log))
    env.run()
    assert log == [("a->b", 0.0, t), ("b->a", t, 2 * t)]


def test_interrupted_transfer_releases_its_links(env, log):
    nic = Link(env, "a/nic", 0.0, GBps)
    t = MB / GBps

    def victim():
        try:
            yield from transfer(env, [nic], MB)
        except simpy.Interrupt:
            log.append(("interrupted", env.now, env.now))

    def killer(process):
        yield env.timeout(t / 4)
        process.interrupt()

    env.process(killer(env.process(victim())))
    env.process(sender(env, [nic], MB, "next", log))
    env.run()
    assert log == [("interrupted", t / 4, t / 4), ("next", t / 4, t / 4 + t)]
    assert nic.busy_s == t / 4 + t


def test_device_compute_time_from_flops():
    spec = make_spec()
    cluster = Cluster(simpy.Environment(), spec)
    device = cluster.devices[0]
    assert device.compute_time_s(6.28e12) == 6.28e12 / (15.7e12 * 0.4)
    assert device.compute_time_s(6.28e12) == pytest.approx(1.0, rel=1e-12)


def test_cluster_layout_and_names():
    cluster = Cluster(simpy.Environment(), make_spec())
    assert [h.name for h in cluster.workers] == ["worker0", "worker1"]
    assert [h.name for h in cluster.ps_hosts] == ["ps0"]
    assert [h.role for h in cluster.hosts] == ["worker", "worker", "ps"]
    assert [d.name for d in cluster.devices] == [
        "worker0/gpu0",
        "worker0/gpu1",
        "worker1/gpu0",
        "worker1/gpu1",
    ]
    assert cluster.ps_hosts[0].devices == []
    assert cluster.profile is DEVICE_PROFILES["v100"]
    w0, w1 = cluster.workers
    assert route(w0, w0) == [w0.intra]
    assert route(w0, w1) == [w0.nic, w1.nic]
    assert w0.nic.bandwidth_Bps == GBps and w0.intra.latency_s == 2e-6
    assert cluster.host_of(cluster.devices[3]) is w1


def test_cluster_overrides_and_profile_overrides():
    spec = make_spec(
        device=SimpleNamespace(profile="tpu-v4", peak_flops=1e12, efficiency=0.5),
        ps=0,
        ps_names=[],
    )
    cluster = Cluster(simpy.Environment(), spec, n_hosts=4, devices_per_host=2)
    assert len(cluster.workers) == 4 and len(cluster.devices) == 8
    assert [h.name for h in cluster.workers] == ["worker0", "worker1", "worker2", "worker3"]
    assert cluster.devices[-1].name == "worker3/tpu1"
    assert cluster.devices[0].compute_time_s(1e12) == 2.0
    assert DEVICE_PROFILES["tpu-v4"].peak_flops == 275e12


def test_unknown_profile_is_a_user_error():
    spec = make_spec(device=SimpleNamespace(profile="k80", peak_flops=None, efficiency=None))
    with pytest.raises(SimdistError, match="v100"):
        Cluster(simpy.Environment(), spec)
