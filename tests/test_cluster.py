"""Hosts, devices, roles and profiles: the pure cluster description (links: test_network)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simdist.cluster import Cluster
from simdist.errors import SimdistError
from simdist.profiles import DEVICE_PROFILES


def make_spec(**overrides: object) -> SimpleNamespace:
    spec = SimpleNamespace(
        hosts=2,
        worker_names=["worker0", "worker1"],
        ps=1,
        ps_names=["ps0"],
        chief_names=[],
        devices_per_host=2,
        device=SimpleNamespace(profile="v100", peak_flops=None, efficiency=None),
    )
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


def test_cluster_layout_and_names():
    cluster = Cluster(make_spec())
    assert [h.name for h in cluster.workers] == ["worker0", "worker1"]
    assert [h.name for h in cluster.ps_hosts] == ["ps0"]
    assert [h.role for h in cluster.hosts] == ["worker", "worker", "ps"]
    assert [d.name for d in cluster.devices] == [
        "worker0/gpu0",
        "worker0/gpu1",
        "worker1/gpu0",
        "worker1/gpu1",
    ]
    assert cluster.ps_hosts[0].devices == ()
    assert cluster.profile is DEVICE_PROFILES["v100"]
    assert cluster.devices[3].host == "worker1" and cluster.devices_per_host == 2
    assert cluster.chief is cluster.workers[0]
    assert cluster.roles == {
        "worker0": "worker",
        "worker1": "worker",
        "chief": "chief",
        "ps0": "ps",
    }


def test_a_chief_that_does_not_train_is_the_coordinator():
    spec = make_spec(chief_names=["c0"])
    assert Cluster(spec).coordinator == "c0"
    assert list(Cluster(spec).roles) == ["worker0", "worker1", "c0", "ps0"]
    # a chief that trains is a worker; the coordinator is then TF's implicit "chief"
    trains = make_spec(chief_names=["worker0"])
    assert Cluster(trains).coordinator == "chief"


def test_empty_clusters_are_refused():
    with pytest.raises(ValueError, match="at least one worker"):
        Cluster(make_spec(hosts=0))
    with pytest.raises(ValueError, match="at least one device"):
        Cluster(make_spec(devices_per_host=0))


def test_cluster_overrides_and_profile_overrides():
    spec = make_spec(
        device=SimpleNamespace(profile="tpu-v4", peak_flops=1e12, efficiency=0.5),
        ps=0,
        ps_names=[],
        hosts=4,
        worker_names=None,
    )
    cluster = Cluster(spec)
    assert len(cluster.workers) == 4 and len(cluster.devices) == 8
    assert [h.name for h in cluster.workers] == ["worker0", "worker1", "worker2", "worker3"]
    assert cluster.devices[-1].name == "worker3/tpu1"
    assert cluster.profile.peak_flops == 1e12 and cluster.profile.efficiency == 0.5
    assert DEVICE_PROFILES["tpu-v4"].peak_flops == 275e12


def test_unknown_profile_is_a_user_error():
    spec = make_spec(device=SimpleNamespace(profile="k40", peak_flops=None, efficiency=None))
    with pytest.raises(SimdistError, match="v100"):
        Cluster(spec)
