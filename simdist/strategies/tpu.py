"""``tpu``: synchronous replicas on an x × y torus of TPU chips, a 2D-ring all-reduce.

As ``tf.distribute.TPUStrategy``: one replica per chip, each on global_batch / (x·y)
examples, gradients summed by an all-reduce over the inter-chip interconnect (ICI), the
identical update applied everywhere — numerically one_device with the global batch.

Layout: ``strategy.topology: [x, y]`` gives the torus. simdist puts all x·y chips on one
host (``worker0/tpu0`` … in row-major order: chip (i, j) is device i·y + j), and the
host's ``intra_host`` link stands for the ICI. TPU chips exchange gradients over ICI
directly, never through the hosts' NICs, so how chips are spread over host machines does
not change the all-reduce; the scenario therefore keeps ``hosts: 1`` and takes the chip
count from the topology. The device profile defaults to ``tpu-v4``.

All-reduce: :func:`simdist.collectives.torus2d_allreduce_s` — reduce-scatter along x, then
along y, then the two all-gathers back — with the ICI's α and B, holding the ICI link.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simdist.cluster import Cluster
from simdist.collectives import allreduce_figures, run_allreduce, torus2d_allreduce_s
from simdist.strategies.base import SynchronousStrategy


class TPUStrategy(SynchronousStrategy):
    """x·y chips on one host, one 2D-torus all-reduce of the gradient per step."""

    kinds = ("tpu",)

    @classmethod
    def build_cluster(cls, env: Any, scenario: Any) -> Cluster:
        """One host holding the x·y chips of the torus; its intra-host link is the ICI."""
        x, y = scenario.strategy.topology
        return Cluster(env, scenario.cluster, n_hosts=1, devices_per_host=x * y)

    def allreduce_seconds(self) -> float:
        """Duration of one 2D-torus all-reduce of the gradient over the ICI."""
        x, y = self.scenario.strategy.topology
        ici = self.cluster.workers[0].intra
        return torus2d_allreduce_s(x, y, self.costs.grad_nbytes, ici.latency_s, ici.bandwidth_Bps)

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        if self.scenario.replicas == 1:
            return
        ici = self.cluster.workers[0].intra
        start, end = yield self.env.process(
            run_allreduce(self.env, [ici], self.allreduce_seconds())
        )
        x, y = self.scenario.strategy.topology
        self.record_comm(start, end, self.costs.grad_nbytes, step, f"all-reduce torus2d {x}x{y}")

    def summary(self) -> dict[str, Any]:
        x, y = self.scenario.strategy.topology
        return {
            "topology": [x, y],
            **allreduce_figures(
                self.costs.grad_nbytes, self.allreduce_seconds(), self.scenario.replicas
            ),
        }
