"""``mirrored``: N devices in one host, synchronous, gradients summed by an all-reduce.

As ``tf.distribute.MirroredStrategy``: each replica gets global_batch/N
examples, the gradients are all-reduced over the intra-host links (NVLink /
PCIe) and every replica applies the identical update.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simdist.collectives import allreduce_s, run_allreduce
from simdist.strategies.base import SynchronousStrategy


class MirroredStrategy(SynchronousStrategy):
    """One host, N replicas, one all-reduce of the full gradient per step."""

    kinds = ("mirrored",)

    def allreduce_seconds(self) -> float:
        """Duration of one all-reduce of the gradient over the intra-host link."""
        link = self.scenario.cluster.links.intra_host
        return allreduce_s(
            self.scenario.strategy.all_reduce,
            self.scenario.replicas,
            self.costs.grad_nbytes,
            link.latency_s,
            link.bandwidth_Bps,
        )

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        if self.scenario.replicas == 1:
            return
        host = self.cluster.workers[0]
        start, end = yield self.env.process(
            run_allreduce(self.env, [host.intra], self.allreduce_seconds())
        )
        self.record_comm(
            start,
            end,
            self.costs.grad_nbytes,
            step,
            f"all-reduce {self.scenario.strategy.all_reduce}",
        )
