"""A small validated cluster section for the network tests, which build topologies and
networks on SimPy alone (no scenario file, no JAX)."""

from __future__ import annotations

from simdist.scenario.cluster import ClusterSpec

#: Intra-host (NVLink-class) links of the hand-made clusters: 300 GB/s, 2 us.
INTRA_BW, INTRA_LAT = 300e9, 2e-6


def make_spec(hosts: int = 2, devices: int = 2, ps: int = 1) -> ClusterSpec:
    """A validated cluster section: ``hosts`` hosts of ``devices`` v100s, ``ps`` PS tasks."""
    return ClusterSpec(hosts=hosts, devices_per_host=devices, ps=ps, device={"profile": "v100"})
