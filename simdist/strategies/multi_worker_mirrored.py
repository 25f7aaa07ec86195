"""``multi_worker_mirrored``: W hosts × D devices, synchronous, all-reduce across the network.

As ``tf.distribute.MultiWorkerMirroredStrategy``: every device of every worker host holds
a replica; each gets global_batch / (W·D) examples; the summed gradient is all-reduced and
every replica applies the identical update, so the run equals one_device with the global
batch. The cluster may be given by counts (``hosts: 2``) or TF_CONFIG-style
(``worker: [w0:2222, w1:2222]``); only the host names differ.

``strategy.communication`` picks the all-reduce (``tf.distribute.experimental.
CommunicationImplementation``):

* ``ring`` — one flat ring over all W·D devices. W of its edges cross the network, and a
  ring step lasts as long as its slowest edge, so with W > 1 the cost is the ring formula
  with the *network* α and B (each NIC carries one ring edge each way); with W = 1 the
  ring stays inside the host and uses the intra-host link, as mirrored does.
* ``nccl`` — hierarchical: reduce-scatter inside each host over the intra-host link, ring
  across hosts, all-gather inside (:func:`simdist.collectives.hierarchical_allreduce_s`).
* ``auto`` — on GPUs the cheaper of ``nccl`` and ``ring`` for this gradient, each priced
  through the topology (``Network.collective_s``: oversubscribed uplinks, NVLink or PCIe
  inside the hosts), ``nccl`` on a tie; else ``ring``: TensorFlow's NCCL implementation
  exists only for GPUs, and its ring (CollectiveRing) runs everywhere.

The network (:mod:`simdist.network.switch`) prices either and holds every worker's NIC and
intra-host link while it runs.

Overlap (``overlap: true``, the default, with a per-layer cost profile): the gradients are
all-reduced in buckets of ``bucket_bytes`` that start as soon as backward has produced them
(:class:`simdist.strategies.sync.AllReduceStrategy`). Without overlap, packs
(``bytes_per_pack``): the gradient is cut into ⌈S / bytes_per_pack⌉ packs of
``bytes_per_pack`` bytes (the last one holds the rest), each its own all-reduce, run back to
back after the compute phase, each paying its own latency terms, so packing only adds
latency. (TF also cuts at variable boundaries, simdist at bytes.) ``bytes_per_pack: 0``
means one pack.

Mixed clusters (``cluster.hosts`` listed with different device profiles): each device
computes at its own profile's speed, and the all-reduce waits for the slowest, so a step
lasts as long as the slowest device's compute plus the communication. Hosts may hold
different device counts; ``nccl`` (hierarchical) then has no equal groups to reduce in, so
it is refused and ``auto`` chooses ``ring``.

The chief (worker 0) alone pays for writing summaries: at every evaluation point it
runs the forward pass over the test set, split over its own D devices, before joining the
next step; the other workers wait for it at that step's all-reduce. The cost is
:func:`chief_eval_s`, recorded as ``eval`` events on the chief's devices. After the last
step the run ends when the chief has finished its final evaluation. Checkpoints, the other
chief duty, arrive with faults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from simdist.catalog import Execution
from simdist.collectives import allreduce_figures
from simdist.spec import Bytes, Latency, fail
from simdist.strategies.bucketing import (
    AllReduceSpecBase,
    Bucketing,
    bucket_bytes_field,
    bucketing_field,
    cycle_time_field,
    fusion_threshold_field,
    overlap_field,
)
from simdist.strategies.compression import CompressionSpec, compression_field
from simdist.strategies.steps import Collective
from simdist.strategies.sync import AllReduceStrategy

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario


class Spec(AllReduceSpecBase):
    """Synchronous replicas on every device of every host; hierarchical collectives."""

    kind: Literal["multi_worker_mirrored"]
    communication: Literal["auto", "ring", "nccl"] = Field("auto", examples=["ring"])
    bytes_per_pack: Bytes = Field(0, ge=0, examples=["4MiB"])
    execution: Execution = "auto"
    overlap: bool = overlap_field()
    bucket_bytes: Bytes = bucket_bytes_field()
    bucketing: Bucketing = bucketing_field()
    fusion_threshold_nbytes: Bytes | None = fusion_threshold_field()
    cycle_time_s: Latency | None = cycle_time_field()
    compression: CompressionSpec | None = compression_field()

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of every worker host."""
        return cluster.n_devices

    def check(self, scenario: Scenario) -> None:
        """``nccl`` (hierarchical) needs the same device count on every host."""
        super().check(scenario)
        if self.compression is not None and self.bytes_per_pack:
            raise fail(
                "strategy.bytes_per_pack",
                "packs the uncompressed gradient, and compression is on; remove bytes_per_pack "
                "(a compressed gradient goes as one group, or per bucket with overlap: true)",
            )
        c = scenario.cluster
        if self.communication == "nccl" and not c.uniform_devices:
            raise fail(
                "strategy.communication",
                f"got 'nccl' with hosts holding {c.device_counts} devices; hierarchical "
                "all-reduce needs the same count on every host, e.g. communication: ring",
            )


# Backward ≈ 2 × forward, so a training step is ≈ 3 forward passes (Kaplan et al. 2020,
# "Scaling laws for neural language models", §2.1: C_forward ≈ 2N, C_train ≈ 6N per token).
TRAIN_FLOPS_PER_FORWARD = 3.0

#: The all-reduce algorithm behind each TF communication implementation.
ALGORITHM = {"ring": "ring", "nccl": "hierarchical"}


def resolve_communication(
    requested: str,
    device_kind: str,
    uniform: bool = True,
    price: Callable[[str], float] | None = None,
) -> str:
    """``auto`` → ``nccl`` on GPU profiles, ``ring`` otherwise (or when the hosts hold
    different device counts: ``uniform`` False); explicit choices stay.

    With ``price`` (seconds of the gradient's all-reduce per algorithm, priced through
    the topology: :meth:`simdist.network.Network.collective_s`), ``auto`` on GPUs takes
    the cheaper of ``nccl`` (hierarchical) and ``ring``, ``nccl`` on a tie, as NCCL's own
    tuner picks its algorithm from a cost model of the topology (NCCL src/graph/tuning.cc):
    so an oversubscribed uplink or a slow intra-host link decides with its real cost.
    """
    if requested != "auto":
        return requested
    if device_kind != "gpu" or not uniform:
        return "ring"
    if price is not None and price(ALGORITHM["ring"]) < price(ALGORITHM["nccl"]):
        return "ring"
    return "nccl"


def pack_sizes(nbytes: int, bytes_per_pack: int) -> list[int]:
    """Byte sizes of the packs the gradient is cut into: ⌈nbytes / bytes_per_pack⌉ of them."""
    if bytes_per_pack <= 0 or nbytes <= bytes_per_pack:
        return [nbytes]
    full, rest = divmod(nbytes, bytes_per_pack)
    return [bytes_per_pack] * full + ([rest] if rest else [])


def chief_eval_s(compute_s: float, batch_size: int, n_test: int, chief_devices: int) -> float:
    """Seconds the chief spends evaluating the test set on its devices.

    ``compute_s`` is one replica's forward + backward pass on ``batch_size`` examples; the
    chief's devices each take ⌈n_test / chief_devices⌉ test examples, forward only.
    """
    per_device = math.ceil(n_test / chief_devices)
    return compute_s * per_device / (TRAIN_FLOPS_PER_FORWARD * batch_size)


class MultiWorkerMirroredStrategy(AllReduceStrategy):
    """W hosts × D replicas, bucketed or packed all-reduces, a chief that evaluates."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        cluster = self.cluster
        self.packs = pack_sizes(self.costs.grad_nbytes, spec.bytes_per_pack)
        sizes = self.bucket_sizes() or self.packs

        def price(algorithm: str) -> float:
            """Seconds of the step's all-reduces with ``algorithm``, on this topology."""
            devices = self.training_devices
            return sum(self.net.collective_s("allreduce", devices, s, algorithm) for s in sizes)

        self.communication = resolve_communication(
            spec.communication, cluster.profile.kind, len(set(cluster.device_counts)) == 1, price
        )
        self.algorithm = ALGORITHM[self.communication]
        self.eval_s = chief_eval_s(
            self.costs.compute_s,
            self.scenario.workload.batch_size,
            self.costs.test_examples,
            len(cluster.chief.devices),
        )
        self.eval_delay_s = self.eval_s

    @property
    def label(self) -> str:
        return f"all-reduce {self.communication}"

    def step_eval(self, step: int) -> tuple[float, str | None]:
        """After an evaluation point the chief evaluates before it computes."""
        eval_s = self.eval_s if step > 0 and self.eval_due(step) else 0.0
        return eval_s, self.cluster.chief.name

    def step_collectives(self) -> list[Collective]:
        """The packs' all-reduces, one after another (one compressed group: no packs)."""
        count = len(self.packs)
        return [
            Collective(
                "allreduce",
                nbytes,
                self.label if count == 1 else f"{self.label} pack {i + 1}/{count}",
            )
            for i, nbytes in enumerate(self.packs)
        ]

    def process(self) -> Generator[Any, Any, None]:
        yield from super().process()
        done = self.steps_done
        stopped = self.diverged_at is not None or self.rerun_with is not None
        if stopped or done == 0 or not self.eval_due(done):
            return
        start, end = self.env.now, self.env.now + self.eval_s
        chief = self.cluster.chief.name
        for d in self.training_devices:
            kind, detail = ("eval", "chief") if d.host == chief else ("idle", "waiting for chief")
            self.recorder.event(start, end, d.host, d.name, kind, 0, done, detail)
        yield self.env.timeout(self.eval_s)

    def summary(self) -> dict[str, Any]:
        devices = self.training_devices
        allreduce_s = sum(
            self.net.collective_s("allreduce", devices, nbytes, self.algorithm)
            for nbytes in self.packs
        )
        return {
            "communication": self.communication,
            "packs": len(self.packs),
            "bytes_per_pack": self.scenario.strategy.bytes_per_pack,
            **allreduce_figures(self.costs.grad_nbytes, allreduce_s, self.scenario.replicas),
            "chief": self.cluster.chief.name,
            "chief_eval_s": self.eval_s,
            **self.compression_summary(),
        }
