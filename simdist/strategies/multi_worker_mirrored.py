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
* ``auto`` — ``nccl`` when the device profile is a GPU, else ``ring``: TensorFlow's NCCL
  implementation exists only for GPUs, and its ring (CollectiveRing) runs everywhere.

Either way the all-reduce holds every worker's NIC and intra-host link while it runs.

Packs (``bytes_per_pack``): the gradient is cut into ⌈S / bytes_per_pack⌉ packs of
``bytes_per_pack`` bytes (the last one holds the rest), each its own all-reduce. Packs do
**not** overlap with the backward pass: they run back to back after the compute phase,
each paying its own latency terms, so in simdist packing only adds latency. (TensorFlow
packs so that weight *updates* can overlap with the all-reduce; updates are free here, so
there is nothing to overlap with. TF also cuts at variable boundaries, simdist at bytes.)
``bytes_per_pack: 0`` means one pack.

The chief (worker 0) alone pays for writing summaries: at every evaluation point it
runs the forward pass over the test set, split over its own D devices, before joining the
next step; the other workers wait for it at that step's all-reduce. The cost is
:func:`chief_eval_s`, recorded as ``eval`` events on the chief's devices. After the last
step the run ends when the chief has finished its final evaluation. Checkpoints, the other
chief duty, arrive with faults.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from simdist.cluster import Link
from simdist.collectives import (
    allreduce_figures,
    hierarchical_allreduce_s,
    ring_allreduce_s,
    run_allreduce,
)
from simdist.strategies.base import SynchronousStrategy

# Backward ≈ 2 × forward, so a training step is ≈ 3 forward passes (Kaplan et al. 2020,
# "Scaling laws for neural language models", §2.1: C_forward ≈ 2N, C_train ≈ 6N per token).
TRAIN_FLOPS_PER_FORWARD = 3.0


def resolve_communication(requested: str, device_kind: str) -> str:
    """``auto`` → ``nccl`` on GPU profiles, ``ring`` otherwise; explicit choices stay."""
    if requested != "auto":
        return requested
    return "nccl" if device_kind == "gpu" else "ring"


def pack_sizes(nbytes: int, bytes_per_pack: int) -> list[int]:
    """Byte sizes of the packs the gradient is cut into: ⌈nbytes / bytes_per_pack⌉ of them."""
    if bytes_per_pack <= 0 or nbytes <= bytes_per_pack:
        return [nbytes]
    full, rest = divmod(nbytes, bytes_per_pack)
    return [bytes_per_pack] * full + ([rest] if rest else [])


def mwm_allreduce_s(
    communication: str,
    hosts: int,
    devices_per_host: int,
    nbytes: float,
    intra: Link,
    network: Link,
) -> float:
    """Seconds for one all-reduce of ``nbytes`` over hosts × devices_per_host replicas."""
    if communication == "nccl":
        return hierarchical_allreduce_s(
            hosts,
            devices_per_host,
            nbytes,
            intra.latency_s,
            intra.bandwidth_Bps,
            network.latency_s,
            network.bandwidth_Bps,
        )
    link = intra if hosts == 1 else network
    return ring_allreduce_s(hosts * devices_per_host, nbytes, link.latency_s, link.bandwidth_Bps)


def chief_eval_s(compute_s: float, batch_size: int, n_test: int, chief_devices: int) -> float:
    """Seconds the chief spends evaluating the test set on its devices.

    ``compute_s`` is one replica's forward + backward pass on ``batch_size`` examples; the
    chief's devices each take ⌈n_test / chief_devices⌉ test examples, forward only.
    """
    per_device = math.ceil(n_test / chief_devices)
    return compute_s * per_device / (TRAIN_FLOPS_PER_FORWARD * batch_size)


class MultiWorkerMirroredStrategy(SynchronousStrategy):
    """W hosts × D replicas, one (possibly packed) all-reduce per step, a chief that evaluates."""

    kinds = ("multi_worker_mirrored",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        cluster = self.cluster
        self.communication = resolve_communication(spec.communication, cluster.profile.kind)
        self.packs = pack_sizes(self.costs.grad_nbytes, spec.bytes_per_pack)
        chief = cluster.chief
        self.pack_seconds = [
            mwm_allreduce_s(
                self.communication,
                len(cluster.workers),
                cluster.devices_per_host,
                nbytes,
                chief.intra,
                chief.nic,
            )
            for nbytes in self.packs
        ]
        self.links: list[Link] = (
            [chief.intra]
            if len(cluster.workers) == 1
            else [link for host in cluster.workers for link in (host.nic, host.intra)]
        )
        self.eval_s = chief_eval_s(
            self.costs.compute_s,
            self.scenario.workload.batch_size,
            self._n_test(),
            len(chief.devices),
        )

    def _n_test(self) -> int:
        """Test-set size; in timing-only mode the dataset is loaded just to count it."""
        if self.workload is not None:
            return len(self.workload.dataset.x_test)
        from simdist.numerics.data import load_dataset

        return len(load_dataset(self.scenario.workload.dataset, self.scenario.seed).x_test)

    def compute_phase(self, step: int) -> Generator[Any, Any, None]:
        """As the base phase, except that after an evaluation point the chief evaluates first."""
        env, start = self.env, self.env.now
        chief = self.cluster.chief.name
        eval_s = self.eval_s if step > 0 and self.eval_due(step) else 0.0
        plan = [
            (d, eval_s if d.host == chief else 0.0, self.compute_s(d, step))
            for d in self.training_devices
        ]
        longest = max(offset + seconds for _, offset, seconds in plan)
        end = start + longest
        for d, offset, seconds in plan:
            begin, done = start + offset, start + offset + seconds
            self.recorder.event(start, begin, d.host, d.name, "eval", 0, step, "chief")
            self.record_compute(d, begin, seconds, step)
            self.recorder.event(done, end, d.host, d.name, "idle", 0, step, "barrier")
        yield env.timeout(longest)

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        if self.scenario.replicas == 1:
            return
        count = len(self.packs)
        for i, (nbytes, seconds) in enumerate(zip(self.packs, self.pack_seconds, strict=True)):
            start, end = yield self.env.process(run_allreduce(self.env, self.links, seconds))
            detail = f"all-reduce {self.communication}"
            if count > 1:
                detail += f" pack {i + 1}/{count}"
            self.record_comm(start, end, nbytes, step, detail)

    def evaluate(self, step: int, params: Any) -> None:
        """Test metrics, stamped when the chief finishes evaluating (``eval_s`` from now)."""
        if self.workload is None:
            return
        for name, value in self.workload.evaluate(params).items():
            self.recorder.metric(self.env.now + self.eval_s, step, name, value)

    def process(self) -> Generator[Any, Any, None]:
        yield from super().process()
        done = self.steps_done
        if self.diverged_at is not None or done == 0 or not self.eval_due(done):
            return
        start, end = self.env.now, self.env.now + self.eval_s
        chief = self.cluster.chief.name
        for d in self.training_devices:
            kind, detail = ("eval", "chief") if d.host == chief else ("idle", "waiting for chief")
            self.recorder.event(start, end, d.host, d.name, kind, 0, done, detail)
        yield self.env.timeout(self.eval_s)

    def summary(self) -> dict[str, Any]:
        allreduce_s = sum(self.pack_seconds)
        return {
            "communication": self.communication,
            "packs": len(self.packs),
            "bytes_per_pack": self.scenario.strategy.bytes_per_pack,
            **allreduce_figures(self.costs.grad_nbytes, allreduce_s, self.scenario.replicas),
            "chief": self.cluster.chief.name,
            "chief_eval_s": self.eval_s,
        }
