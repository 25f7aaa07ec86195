"""A small hand-made cluster section for the network tests, which build topologies and
networks on SimPy alone (no scenario file, no JAX)."""

from __future__ import annotations

from types import SimpleNamespace

#: Intra-host (NVLink-class) links of the hand-made clusters: 300 GB/s, 2 us.
INTRA_BW, INTRA_LAT = 300e9, 2e-6


def make_spec(hosts: int = 2, devices: int = 2, ps: int = 1) -> SimpleNamespace:
    """A cluster section: ``hosts`` workers of ``devices`` v100s each and ``ps`` PS tasks."""
    return SimpleNamespace(
        hosts=hosts,
        worker_names=[f"worker{i}" for i in range(hosts)],
        chief_names=[],
        ps=ps,
        ps_names=[f"ps{i}" for i in range(ps)],
        devices_per_host=devices,
        device=SimpleNamespace(profile="v100", peak_flops=None, efficiency=None),
    )
