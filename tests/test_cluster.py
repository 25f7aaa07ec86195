"""Hosts, devices, roles and profiles: the pure cluster description (links: test_network)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from simdist.errors import SimdistError
from simdist.hardware.cluster import Cluster
from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.scenario.cluster import ClusterSpec, DeviceSpec


def make_spec(**fields: Any) -> ClusterSpec:
    """A validated cluster section: 2 hosts of 2 v100s and one PS task, unless ``fields``
    (YAML keys) say otherwise."""
    data = {"hosts": 2, "devices_per_host": 2, "ps": 1, "device": {"profile": "v100"}}
    return ClusterSpec.model_validate({**data, **fields})


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
    spec = make_spec(chief=["c0"])
    assert Cluster(spec).coordinator == "c0"
    assert list(Cluster(spec).roles) == ["worker0", "worker1", "c0", "ps0"]
    # a chief that trains is a worker; the coordinator is then TF's implicit "chief"
    trains = make_spec(chief=["worker0"])
    assert Cluster(trains).coordinator == "chief"


def test_empty_clusters_are_refused():
    for field in ("hosts", "devices_per_host"):
        with pytest.raises(ValidationError, match=field):
            make_spec(**{field: 0})
    # A section that skipped validation is refused by the cluster itself.
    with pytest.raises(ValueError, match="at least one worker"):
        Cluster(ClusterSpec.model_construct(hosts=0, devices_per_host=2, ps=0))
    with pytest.raises(ValueError, match="at least one device"):
        Cluster(ClusterSpec.model_construct(hosts=2, devices_per_host=0, ps=0))


def test_cluster_overrides_and_profile_overrides():
    spec = make_spec(
        device={"profile": "tpu-v4", "peak_flops": 1e12, "efficiency": 0.5}, ps=0, hosts=4
    )
    cluster = Cluster(spec)
    assert len(cluster.workers) == 4 and len(cluster.devices) == 8
    assert [h.name for h in cluster.workers] == ["worker0", "worker1", "worker2", "worker3"]
    assert cluster.devices[-1].name == "worker3/tpu1"
    assert cluster.profile.peak_flops == 1e12 and cluster.profile.efficiency == 0.5
    assert DEVICE_PROFILES["tpu-v4"].peak_flops == 275e12


def test_unknown_profile_is_a_user_error():
    with pytest.raises(ValidationError, match="v100"):
        make_spec(device={"profile": "k40"})
    # A section that skipped validation is refused by the cluster itself.
    spec = make_spec()
    spec.device = DeviceSpec.model_construct(profile="k40")
    with pytest.raises(SimdistError, match="v100"):
        Cluster(spec)
