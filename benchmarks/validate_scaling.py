"""Reproduce docs/VALIDATION.md: simdist's predicted scaling against two published measurements.

One fixed set of parameters per hardware generation (P100 servers, 2017), never tuned per
case: the p100 device profile (fp32) and the link figures below, taken from the papers'
descriptions of their clusters. Timing only (numerics: false); each point is a short run.

    python benchmarks/validate_scaling.py
"""

from __future__ import annotations

import sys
from typing import Any

from simdist.engine import run
from simdist.scenario import scenario_from_dict

# PCIe 3.0 x16 between the P100 (PCIe) GPUs of a Horovod server: 15.75 GB/s (PCI-SIG).
PCIE_BPS, PCIE_LAT = "15.75GB/s", "5us"
# NVLink 1 on a P100 SXM2 server (Big Basin / DGX-1): 4 links x 20 GB/s per direction;
# a ring over 8 GPUs uses one link per direction per GPU.
NVLINK_BPS, NVLINK_LAT = "20GB/s", "5us"
NIC_LAT = "10us"


def scenario(
    model: str,
    hosts: int,
    per_host: int,
    batch: int,
    nic: str,
    intra: tuple[str, str],
    strategy: dict[str, Any],
    ps: int = 0,
) -> Any:
    return scenario_from_dict(
        {
            "name": f"validate_{model}_{hosts}x{per_host}",
            "seed": 0,
            "numerics": False,
            "cluster": {
                "hosts": hosts,
                "ps": ps,
                "devices_per_host": per_host,
                "device": {"profile": "p100"},
                "links": {
                    "intra_host": {"bandwidth": intra[0], "latency": intra[1]},
                    "network": {"bandwidth": nic, "latency": NIC_LAT},
                },
            },
            "workload": {
                "model": model,
                "batch_size": batch,
                "optimizer": {"name": "sgd", "learning_rate": 0.1},
                "steps": 4 if not ps else 4 * hosts,
            },
            "strategy": strategy,
        }
    )


def throughput(s: Any) -> float:
    return run(s).summary["examples_per_s"]


def horovod() -> list[tuple[str, int, float]]:
    """Sergeev & Del Balso 2018: 4 P100 per server, 25 Gbit/s, batch 64 per GPU."""
    rows = []
    ring = {"kind": "multi_worker_mirrored", "communication": "ring", "bucket_bytes": "64MiB"}
    for model in ("inception_v3", "resnet101"):
        one = throughput(scenario(model, 1, 1, 64, "25Gbit/s", (PCIE_BPS, PCIE_LAT), ring))
        for gpus in (4, 16, 64, 128):
            hosts = gpus // 4
            s = scenario(model, hosts, 4, 64, "25Gbit/s", (PCIE_BPS, PCIE_LAT), ring)
            rows.append((f"{model} horovod (ring)", gpus, throughput(s) / (gpus * one)))
        # standard distributed TensorFlow: parameter servers, one per worker host
        # (TF's usual layout), per-variable transfers overlapped with compute.
        for gpus in (16, 64, 128):
            hosts = gpus // 4
            ps = {"kind": "parameter_server", "mode": "sync", "overlap": True}
            s = scenario(model, hosts, 4, 64, "25Gbit/s", (PCIE_BPS, PCIE_LAT), ps, ps=hosts)
            rows.append((f"{model} parameter servers", gpus, throughput(s) / (gpus * one)))
    return rows


def goyal() -> list[tuple[str, int, float]]:
    """Goyal et al. 2017: 8 P100 (NVLink) per server, 50 Gbit/s Ethernet, batch 32 per GPU."""
    nccl = {"kind": "multi_worker_mirrored", "communication": "nccl"}
    eight = throughput(scenario("resnet50", 1, 8, 32, "50Gbit/s", (NVLINK_BPS, NVLINK_LAT), nccl))
    rows = []
    for gpus in (8, 32, 64, 128, 256):
        s = scenario("resnet50", gpus // 8, 8, 32, "50Gbit/s", (NVLINK_BPS, NVLINK_LAT), nccl)
        rows.append(("resnet50 (vs 8 GPUs)", gpus, throughput(s) / (gpus / 8 * eight)))
    return rows


def main() -> None:
    for name, gpus, efficiency in [*horovod(), *goyal()]:
        print(f"{name:32s} {gpus:4d} GPUs  scaling efficiency {efficiency:6.1%}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
