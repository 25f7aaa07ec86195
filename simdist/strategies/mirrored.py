"""``mirrored``: N devices in one host, synchronous, gradients summed by an all-reduce.

As ``tf.distribute.MirroredStrategy``: each replica gets global_batch/N
examples, the gradients are all-reduced over the intra-host links (NVLink /
PCIe) and every replica applies the identical update. With a per-layer cost
profile the all-reduce runs in buckets that overlap with backward
(``overlap``, ``bucket_bytes``; see :class:`~simdist.strategies.sync.AllReduceStrategy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from simdist.catalog import Execution
from simdist.spec import Bytes, Latency
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
from simdist.strategies.sync import AllReduceStrategy

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario


class Spec(AllReduceSpecBase):
    """Synchronous replicas on the devices of one host, all-reduce over intra-host links."""

    kind: Literal["mirrored"]
    execution: Execution = "auto"
    all_reduce: Literal["ring", "tree"] = Field("ring", examples=["ring"])
    overlap: bool = overlap_field()
    bucket_bytes: Bytes = bucket_bytes_field()
    bucketing: Bucketing = bucketing_field()
    fusion_threshold_nbytes: Bytes | None = fusion_threshold_field()
    cycle_time_s: Latency | None = cycle_time_field()
    compression: CompressionSpec | None = compression_field()

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of the one host."""
        return cluster.devices_per_host

    def check(self, scenario: Scenario) -> None:
        """One host (``hosts: 1``), no parameter-server tasks."""
        self.check_one_host(scenario)
        super().check(scenario)


class MirroredStrategy(AllReduceStrategy):
    """One host, N replicas, the gradient all-reduced over the intra-host link."""

    @property
    def algorithm(self) -> str:
        """``strategy.all_reduce``: ring or tree."""
        return self.scenario.strategy.all_reduce
