"""``mirrored``: N devices in one host, synchronous, gradients summed by an all-reduce.

As ``tf.distribute.MirroredStrategy``: each replica gets global_batch/N
examples, the gradients are all-reduced over the intra-host links (NVLink /
PCIe) and every replica applies the identical update.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal

from pydantic import Field

from simdist.catalog import Execution
from simdist.spec import StrategySpecBase
from simdist.strategies.sync import SynchronousStrategy


class Spec(StrategySpecBase):
    """Synchronous replicas on the devices of one host, all-reduce over intra-host links."""

    kind: Literal["mirrored"]
    execution: Execution = "auto"
    all_reduce: Literal["ring", "tree"] = Field("ring", examples=["ring"])

    def replicas(self, cluster: Any) -> int:
        """One replica per device of the one host."""
        return cluster.devices_per_host

    def check(self, scenario: Any) -> None:
        """One host (``hosts: 1``), no parameter-server tasks."""
        self.check_one_host(scenario)
        super().check(scenario)


class MirroredStrategy(SynchronousStrategy):
    """One host, N replicas, one all-reduce of the full gradient per step."""

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        if self.scenario.replicas == 1:
            return
        algo = self.scenario.strategy.all_reduce
        yield self.net.allreduce(self.training_devices, self.costs.grad_nbytes, algo, step=step)
