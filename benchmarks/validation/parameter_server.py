"""Validation cases: parameter server (see validation/__init__.py for the rules).

Every case is a timing-only run of a few synchronous steps, step-time variability on, in the
layout the publication used, expressed with parameter_server's TensorFlow options
(docs/strategies.md, "TensorFlow's parameter-server layouts"). Scaling efficiencies are
throughput / (GPUs × one GPU's throughput), the published one from the publication's own
1-GPU figure, simdist's from its own one_device run of the same device and batch: the
row then measures the distributed mechanism, not the roofline's single-GPU error
(validation/single_gpu.py has those).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from validation import Case

TITLE = "parameter server"

#: tf_cnn_benchmarks ``variable_update=distributed_replicated`` (the EC2 distributed table):
#: each GPU keeps a copy; gradients summed on the worker, pushed once per variable to a PS
#: copy placed by ``replica_device_setter``'s default round robin; a per-variable barrier,
#: then the variable read back to the host and copied to every GPU (variable_mgr.py, May
#: 2017). gRPC between TensorFlow tasks (``server_protocol`` grpc, the default).
DISTRIBUTED_REPLICATED = {
    "kind": "parameter_server",
    "mode": "sync",
    "partitioner": "round_robin",
    "overlap": True,
    "host_staging": True,
    "pull": "on_update",
}
#: tf_cnn_benchmarks ``variable_update=parameter_server`` (distributed): variables placed by
#: GreedyLoadBalancingStrategy, each read once per worker onto a caching device at the start
#: of the step, the towers' gradients summed on the worker's CPU and pushed per variable.
PARAMETER_SERVER = {
    "kind": "parameter_server",
    "mode": "sync",
    "partitioner": "greedy",
    "overlap": True,
    "host_staging": True,
}
#: BytePS (Jiang et al., OSDI 2020, §3-4): tensors cut into partitions of
#: BYTEPS_PARTITION_BYTES = 4,096,000 bytes (bytedance/byteps docs/env.md), spread over
#: the CPU summation servers; each partition pushed as its gradient is ready (after the
#: machine's local NCCL reduction) and pulled as soon as it is summed; ZeroMQ over TCP.
BYTEPS = {
    "kind": "parameter_server",
    "mode": "sync",
    "partitioner": "min_size",
    "min_shard_bytes": "4096000B",
    "max_shards": 4096,
    "overlap": True,
    "pull": "on_update",
}
#: Horovod: a ring all-reduce (hierarchical on NVLink servers: NCCL) with 64 MiB fusion.
HOROVOD = {"kind": "multi_worker_mirrored", "communication": "nccl", "bucket_bytes": "64MiB"}

# p2.8xlarge: 8 K80 GPUs (4 boards) on PCIe 3.0, "10 Gigabit" networking (AWS EC2 instance
# types, P2); PCIe 3.0 x16 15.75 GB/s (PCI-SIG). Horovod's servers: 4 P100 on PCIe 3.0,
# 25 Gbit/s (Sergeev & Del Balso 2018, §8). BytePS' cloud VMs: 8 V100 with NVLink (NVLink 2,
# 25 GB/s per link per direction, NVIDIA V100 whitepaper), 20 Gbit/s TCP (byteps
# docs/performance.md).
PCIE = "15.75GB/s"
NVLINK2 = "25GB/s"


def scenario(
    model: str,
    hosts: int,
    per_host: int,
    strategy: dict[str, Any],
    *,
    profile: str,
    nic: str,
    intra: str = PCIE,
    batch: int = 64,
    ps: int = 0,
    placement: str = "colocated",
    protocol: str = "grpc",
    steps: int = 4,
) -> Any:
    """A timing-only scenario with step-time variability on (the default)."""
    cluster: dict[str, Any] = {
        "hosts": hosts,
        "ps": ps,
        "devices_per_host": per_host,
        "device": {"profile": profile},
        "links": {
            "intra_host": {"bandwidth": intra, "latency": "5us"},
            "network": {"bandwidth": nic, "latency": "10us"},
        },
        "network": {"protocol": protocol},
    }
    if ps:
        cluster["ps_placement"] = placement
    return scenario_from_dict(
        {
            "name": f"validate_ps_{model}_{hosts}x{per_host}",
            "seed": 0,
            "numerics": False,
            "cluster": cluster,
            "workload": {
                "model": model,
                "batch_size": batch,
                "optimizer": {"name": "sgd", "learning_rate": 0.1},
                "steps": steps,
            },
            "strategy": strategy,
        }
    )


def throughput(s: Any) -> float:
    return float(run(s).summary["examples_per_s"])


@cache
def one_gpu(model: str, profile: str, batch: int) -> float:
    """simdist's images/s of one GPU alone, the denominator of its scaling efficiency."""
    s = scenario(model, 1, 1, {"kind": "one_device"}, profile=profile, nic="10Gbit/s", batch=batch)
    return throughput(s)


def efficiency(model: str, gpus: int, per_host: int, strategy: dict[str, Any], **kw: Any) -> float:
    """simdist's scaling efficiency, in percent, of ``gpus`` GPUs in hosts of ``per_host``."""
    hosts = gpus // per_host
    kw.setdefault("ps", hosts)
    rate = throughput(scenario(model, hosts, per_host, strategy, **kw))
    return 100.0 * rate / (gpus * one_gpu(model, kw["profile"], kw.get("batch", 64)))


def byteps_over_horovod(model: str, hosts: int) -> float:
    """BytePS' throughput over Horovod's on the same cluster (k = n CPU summation servers)."""
    kw: dict[str, Any] = {"profile": "v100", "nic": "20Gbit/s", "intra": NVLINK2}
    kw["protocol"] = "tcp"
    horovod = throughput(scenario(model, hosts, 8, HOROVOD, **kw))
    byteps = throughput(scenario(model, hosts, 8, BYTEPS, ps=hosts, placement="separate", **kw))
    return byteps / horovod


K80 = {"profile": "k80", "nic": "10Gbit/s"}
HOROVOD_PS = {"profile": "p100", "nic": "25Gbit/s"}

HOROVOD_NOTE = (
    "'about half' is read off the paper's Fig. 1 and text; the PS count and flags are not "
    "given. Over plain TCP the same layout reaches 87 %, so gRPC's serialisation on each "
    "machine's CPU (shared by its worker and its PS task) is what brings it down to 64 %; "
    "a worker task per GPU gives 17 %. The rest is unmodelled TensorFlow runtime: the "
    "per-step sync-queue barrier, chief work, gRPC's per-stream flow control"
)
BYTEPS_NOTE = (
    "the ordering is right (BytePS ahead) once parameter servers overlap on multi-GPU hosts "
    "and pull each partition as soon as it is summed; the ratio also depends on the "
    "all-reduce's transport (NCCL's one-ring socket share on TCP, which the all-reduce rows "
    "find pessimistic, would favour BytePS) and on the GPU count, not stated beside the "
    "published ratios (32 GPUs assumed)"
)

TF_PAGE = "tf_cnn_benchmarks 2017, EC2 distributed K80 table"
EC2 = "p2.8xlarge × {}: 8 K80 each, 10 GbE, gRPC, distributed_replicated, {} PS colocated, {}"

CASES: list[Case] = [
    Case(
        source=TF_PAGE,
        layout=EC2.format(2, 2, "ResNet-50 batch 64"),
        quantity="% scaling efficiency (16 GPUs; 751 img/s vs 16 × 52.4)",
        published=100 * 751 / (16 * 52.4),
        predict=lambda: efficiency("resnet50", 16, 8, DISTRIBUTED_REPLICATED, **K80, steps=3),
        quick=True,
    ),
    Case(
        source=TF_PAGE,
        layout=EC2.format(8, 8, "ResNet-50 batch 64"),
        quantity="% scaling efficiency (64 GPUs; 2,744 img/s vs 64 × 52.4)",
        published=100 * 2744 / (64 * 52.4),
        predict=lambda: efficiency("resnet50", 64, 8, DISTRIBUTED_REPLICATED, **K80, steps=3),
    ),
    Case(
        source=TF_PAGE,
        layout=EC2.format(8, 6, "Inception V3 batch 64"),
        quantity="% scaling efficiency (64 GPUs; 1,783 img/s vs 64 × 29.7)",
        published=100 * 1783 / (64 * 29.7),
        predict=lambda: efficiency(
            "inception_v3", 64, 8, DISTRIBUTED_REPLICATED, **K80, ps=6, steps=3
        ),
    ),
    Case(
        source="Horovod paper (Sergeev & Del Balso 2018), §2 and Fig. 1",
        layout="32 servers × 4 P100 (PCIe), 25 GbE, gRPC, tf_cnn_benchmarks parameter_server, "
        "32 PS colocated, Inception V3 batch 64",
        quantity="% scaling efficiency (128 GPUs; 'about half')",
        published=50.0,
        predict=lambda: efficiency("inception_v3", 128, 4, PARAMETER_SERVER, **HOROVOD_PS, steps=1),
        expect_within_pct=35.0,
        note=HOROVOD_NOTE,
    ),
    Case(
        source="Horovod paper (Sergeev & Del Balso 2018), §2 and Fig. 1",
        layout="32 servers × 4 P100 (PCIe), 25 GbE, gRPC, tf_cnn_benchmarks parameter_server, "
        "32 PS colocated, ResNet-101 batch 64",
        quantity="% scaling efficiency (128 GPUs; 'about half')",
        published=50.0,
        predict=lambda: efficiency("resnet101", 128, 4, PARAMETER_SERVER, **HOROVOD_PS, steps=1),
        expect_within_pct=35.0,
        note=HOROVOD_NOTE,
    ),
    Case(
        source="BytePS docs/performance.md (OSDI 2020 artefact)",
        layout="4 VMs × 8 V100 (NVLink), 20 Gbit/s TCP, 4 CPU summation servers, ResNet-50 "
        "batch 64",
        quantity="BytePS / Horovod throughput",
        published=1.44,
        predict=lambda: byteps_over_horovod("resnet50", 4),
    ),
    Case(
        source="BytePS docs/performance.md (OSDI 2020 artefact)",
        layout="4 VMs × 8 V100 (NVLink), 20 Gbit/s TCP, 4 CPU summation servers, VGG-16 batch 64",
        quantity="BytePS / Horovod throughput",
        published=2.00,
        predict=lambda: byteps_over_horovod("vgg16", 4),
        expect_within_pct=20.0,
        note=BYTEPS_NOTE,
    ),
]

TEXT = """
TensorFlow's parameter servers as the 2017–2018 benchmarks ran them: one worker task per
machine with a tower per GPU, PS tasks on the workers' machines, gRPC between them, every
variable its own message overlapped with compute, GPU tensors copied to host memory before
gRPC encodes them and after it decodes them (`host_staging`), and the variables placed
whole on PS tasks as TensorFlow's device setters did (docs/strategies.md, "TensorFlow's
parameter-server layouts"). Two of tf_cnn_benchmarks' modes appear: `distributed_replicated`
(TensorFlow's EC2 distributed K80 table: round-robin placement, a barrier per variable, each
variable pulled as soon as every worker's gradient for it is in: `pull: on_update`) and
`parameter_server` (the Horovod paper's "standard distributed TensorFlow": greedy
placement, every variable read at the start of the step). The BytePS rows compare two
simulations, BytePS' layout (4 MB partitions over as many CPU summation servers as GPU
machines, pulled as soon as summed) against Horovod's all-reduce on the same cluster.

Rows are scaling efficiencies against each source's own one-GPU figure (simdist's against
its own one-GPU run), so they test the distributed mechanism; they move when the roofline's
single-GPU times move, because the compute a step has to hide communication behind changes.

One layout for every model: at 16 GPUs (4 servers × 4 P100, 25 GbE, 4 PS tasks, gRPC)
the `parameter_server` layout keeps VGG-16 at 33 %, ResNet-101 at 74 % and Inception V3 at
81 % of linear scaling (`distributed_replicated`: 33, 81, 85 %; a worker task per GPU: 9,
30, 38 %). VGG-16 falls furthest not only for its 553 MB but for its placement: fc6's 411 MB
kernel is one variable, so greedy placement leaves 423 MB on one PS task (round robin 454
MB), whose NIC and CPU then carry four fifths of every push and pull. These figures were
measured before VGG-16's convolutions were priced as the Winograd cuDNN runs (about 2.3×
faster since); with less compute to hide the same communication behind, it scales worse
still.

Why rows miss:

- **Horovod paper, ≈ 50 % at 128 GPUs** (simdist 65–67 %): "about half" is read off
  Fig. 1 and the text, not a table, and the paper does not give the number of PS tasks or
  the tf_cnn_benchmarks flags. Modelled as one PS task per server with tf_cnn_benchmarks'
  `parameter_server` mode. Host staging barely matters here (64.1 % with it, 64.3 % without:
  PCIe moves a model copy per GPU far faster than 25 GbE moves one per machine); what
  drives the result is gRPC's serialisation on every machine's CPU, which the per-machine
  PS task shares with its worker (over plain TCP the same layout reaches 87 %). The `grpc`
  preset may even overcharge TensorFlow here: its one 1.6 GB/s CPU link per machine
  encodes every message, but TensorFlow's tensor path shares a tensor of more than 1 KB
  with the gRPC slice instead of copying it (`EncodeTensorToByteBuffer`,
  tensorflow/core/distributed_runtime/rpc/grpc_tensor_coding.cc), so only the receiving
  side copies, and a machine serves its streams on several threads — priced so, this row
  would be more optimistic still. The other layout these runs could have used, a worker
  task per GPU (`fetch`/`push: per_device`), gives 17 % — four copies of every pull and
  push through one NIC and one CPU — so the published figure lies between the two, nearer
  the per-machine worker. Not modelled and plausibly the rest: tf_cnn_benchmarks'
  per-step sync-queue barrier and chief work, gRPC's HTTP/2 flow-control windows per
  stream (a 100 MB tensor is not streamed at the fair share of an idle link), and fewer PS
  tasks than servers.
- **BytePS over Horovod** (simdist 1.38× for ResNet-50, 1.71× for VGG-16; published 1.44×
  and 2×): the ordering is right since parameter servers overlap on multi-GPU hosts and
  pull each partition as soon as it is summed (before, simdist had Horovod ahead:
  0.76× and 0.59×). With the all-reduce priced by NCCL's socket transport and VGG-16's
  convolutions by Winograd, both rows are within the band; VGG-16 stays the lower, as the
  Horovod side's ring gets a share of the TCP wire measured on one ring. The GPU count is
  not stated beside the published ratios; 4 machines (32 GPUs) are assumed.
- **EC2 rows** (within the band): `distributed_replicated`'s round-robin placement and
  per-variable barriers over gRPC on 10 GbE, predicted with no constant of their own; the
  64-GPU rows also pay simdist's step-time variability (every synchronous step waits for
  the slowest of 64 GPUs), a few points.
"""
