"""Validation cases: collectives (see validation/__init__.py for the rules).

Each case is a published nccl-tests bus bandwidth (busbw, doc/PERFORMANCE.md of
NVIDIA/nccl-tests) of a large ring all-reduce between hosts, predicted by pricing the same
all-reduce through simdist's topology (:func:`simdist.network.leaf_spine.standalone_topology`,
the code ``simdist collectives`` runs) under the transport the cluster used, then turning
the time into busbw as nccl-tests does. The transports' figures are calibrated once each
in simdist/network/transport.py (NET/IB: 12 GB/s per 100 Gbit/s NIC; NET/Socket: 2.06 GB/s
on 32 Gbit/s) and frozen: every row here is another cluster, NIC count, line rate or NCCL
version.
"""

from __future__ import annotations

from collections.abc import Callable

from simdist.collectives import busbw_Bps
from simdist.hardware.cluster import Cluster
from simdist.network.leaf_spine import standalone_topology
from simdist.scenario.cluster import ClusterSpec, NetworkSpec
from validation import Case

TITLE = "collectives"
TEXT = """\
A large all-reduce between hosts is as fast as the network transport lets NCCL drive the
NICs. simdist prices every collective step that crosses hosts with the transport's share of
line rate and a cost per step (`cluster.network.protocol`, docs/transport.md); the steps
inside a host (NVLink, PCIe) are untouched. Two figures, each calibrated on one published
measurement: **NET/IB** (`rdma` / `nccl-ib`) sustains 96% of line rate (12 GB/s per 100
Gbit/s NIC, NCCL's maintainers' figure, NVIDIA/nccl-tests#119), **NET/Socket** (`tcp` /
`nccl-socket`) 51.5% (2.06 GB/s on 32 Gbit/s with one ring, NVIDIA/nccl#209). Each row is a
ring all-reduce of the published size through `simdist collectives`' topology, a host with
several NICs modelled as one NIC of their summed line rate, and busbw = S/t × 2(n−1)/n.

InfiniBand rows land within a few percent at 100 to 1600 Gbit/s per host: NCCL over IB
drives the NICs near line rate whatever their number, as long as each NIC shares a PCIe
switch with GPUs (GPUDirect RDMA; "if the NIC is attached to the CPU getting 16 GB/s [of 24]
is normal", NVIDIA/nccl#412). The socket rows spread more (−5 to +11%): NCCL's socket
transport moves one TCP stream per ring through host memory, copied by a CPU thread, so what
it reaches depends on the NCCL version (one cluster: 2.06 GB/s with 2.3.7, 1.85 with 2.4.2),
the number of rings, the cloud's per-flow limits and `NCCL_SOCKET_NTHREADS` ×
`NCCL_NSOCKS_PERTHREAD`, none of which simdist models; one share, calibrated on one cluster,
still predicts 25 to 100 Gbit/s clusters within ±15%. With the same share a ring all-reduce
over TCP takes about 1.9× the one over IB on the same wire, the gap behind Horovod's RDMA
speed-up of VGG-16 (Sergeev & Del Balso 2018, Fig. 7), the one model whose 553 MB of
gradients do not hide behind its backward pass.
"""

GB = 1e9
GiB = 2**30


def busbw_GBps(
    protocol: str,
    *,
    hosts: int,
    devices_per_host: int,
    nic_Gbps: float,
    nbytes: float,
    intra_host: str = "nvlink",
    intra_GBps: float = 150.0,
    latency_s: float = 5e-6,
) -> float:
    """nccl-tests' busbw (GB/s) of a ring all-reduce of ``nbytes`` over every device of
    ``hosts`` hosts, each with one NIC of ``nic_Gbps`` line rate, under ``protocol``."""
    network = NetworkSpec.model_validate({"protocol": protocol, "intra_host": intra_host})
    spec = {"hosts": hosts, "devices_per_host": devices_per_host, "device": {"profile": "v100"}}
    topology = standalone_topology(
        Cluster(ClusterSpec.model_validate(spec)),
        network,
        nic_latency_s=latency_s,
        nic_bandwidth_Bps=nic_Gbps * 1e9 / 8,
        intra_latency_s=2e-6,
        intra_bandwidth_Bps=intra_GBps * GB,
    )
    devices = topology.cluster.devices
    seconds = topology.collective("all_reduce", devices, nbytes, "ring")[0]
    return busbw_Bps(nbytes, seconds, len(devices), "all_reduce") / GB


def predict(protocol: str, **layout: float | int | str) -> Callable[[], float]:
    return lambda: busbw_GBps(protocol, **layout)  # type: ignore[arg-type]


CASES: list[Case] = [
    Case(
        source="nccl-tests#29 (NVIDIA, 2019)",
        layout="ring all-reduce, 2 hosts, one 100 Gbit/s EDR IB NIC each, NET/IB, 1 GiB",
        quantity="GB/s busbw",
        published=12.2,  # "12.2 GB/s (for a 100Gbps card) is as good as you can get"
        predict=predict(
            "nccl-ib", hosts=2, devices_per_host=1, nic_Gbps=100, nbytes=GiB, intra_host="shared"
        ),
        quick=True,
    ),
    Case(
        source="NVIDIA/nccl#307 (NVIDIA, 2020)",
        layout="ring all-reduce, 2 DGX-1 V100 hosts (8 GPUs, NVLink), 4 x 100 Gbit/s EDR IB",
        quantity="GB/s busbw",
        published=47.0,  # "I always get 47 GB/s on DGX-1 nodes" (rings, 4 NICs)
        predict=predict("nccl-ib", hosts=2, devices_per_host=8, nic_Gbps=400, nbytes=GiB),
        quick=True,
    ),
    Case(
        source="NVIDIA/nccl#812 (NVIDIA, 2023)",
        layout="ring all-reduce, 2 DGX-A100 hosts (8 GPUs, NVSwitch), 8 x 200 Gbit/s HDR IB",
        quantity="GB/s busbw",
        published=192.0,  # "8x200Gbit/s IB cards, we measure 192GB/s AllReduce BusBW"
        predict=predict(
            "nccl-ib", hosts=2, devices_per_host=8, nic_Gbps=1600, nbytes=8 * GiB, intra_GBps=300
        ),
        quick=True,
    ),
    Case(
        source="nccl-tests#83 (Azure, 2021)",
        layout="ring all-reduce, 2 hosts x 4 V100 (PCIe), 25 Gbit/s TCP, NET/Socket, 2 GiB",
        quantity="GB/s busbw",
        published=1.7,  # "maxed out at 1.7GBps" (NCCL 2.9.6, 4 threads x 2 sockets)
        predict=predict(
            "nccl-socket",
            hosts=2,
            devices_per_host=4,
            nic_Gbps=25,
            nbytes=2 * GiB,
            intra_host="pcie",
            intra_GBps=15.75,
        ),
        quick=True,
    ),
    Case(
        source="NVIDIA/nccl#398 (AWS p3dn, 2020)",
        layout="ring all-reduce, 2 hosts x 8 V100 (NVLink), 100 Gbit/s TCP, NET/Socket, 512 MiB",
        quantity="GB/s busbw",
        published=6.0,  # "8 processes on each node, 16 in total, ... around 6GB/s" (2.4.8)
        predict=predict("nccl-socket", hosts=2, devices_per_host=8, nic_Gbps=100, nbytes=GiB / 2),
        quick=True,
    ),
    Case(
        source="NVIDIA/nccl#209 (2019)",
        layout="ring all-reduce, 2 hosts, 32 Gbit/s TCP, NET/Socket, NCCL 2.4.2, one ring",
        quantity="GB/s busbw",
        published=1.85,  # the calibration's cluster (2.06 GB/s with NCCL 2.3.7), NCCL 2.4.2
        predict=predict(
            "nccl-socket", hosts=2, devices_per_host=1, nic_Gbps=32, nbytes=GiB, intra_host="shared"
        ),
        quick=True,
        note=(
            "the calibration's own cluster under the next NCCL release, whose socket path "
            "was 10% slower with one ring (and faster with more)"
        ),
    ),
]
