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
along y, then the two all-gathers back — with the ICI's α and B, holding the ICI link
(the ``torus`` topology, :mod:`simdist.network.torus`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from simdist.catalog import Execution
from simdist.collectives import allreduce_figures
from simdist.spec import Bytes, Latency, PositiveInt, fail
from simdist.strategies.bucketing import (
    AllReduceSpecBase,
    Bucketing,
    bucket_bytes_field,
    bucketing_field,
    cycle_time_field,
    fusion_threshold_field,
    overlap_field,
)
from simdist.strategies.sync import AllReduceStrategy

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario


class Spec(AllReduceSpecBase):
    """Synchronous replicas on a 2D torus of TPU chips."""

    kind: Literal["tpu"]
    wiring: ClassVar[str] = "torus"  # TPUStrategy.topology
    topology: list[PositiveInt] = Field(
        default_factory=lambda: [2, 2], min_length=2, max_length=2, examples=[[2, 2]]
    )
    execution: Execution = "auto"
    overlap: bool = overlap_field()
    bucket_bytes: Bytes = bucket_bytes_field()
    bucketing: Bucketing = bucketing_field()
    fusion_threshold_nbytes: Bytes | None = fusion_threshold_field()
    cycle_time_s: Latency | None = cycle_time_field()

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per chip of the x × y torus."""
        del cluster
        x, y = self.topology
        return x * y

    def check(self, scenario: Scenario) -> None:
        """All x·y chips on one host (see the module docstring): ``hosts: 1``, and
        ``devices_per_host`` 1 or x·y, which it sets to x·y; the profile defaults to tpu-v4."""
        super().check(scenario)
        c, (x, y) = scenario.cluster, self.topology
        if len(c.profiles) > 1:
            raise fail(
                "cluster.hosts",
                f"got hosts with device profiles {', '.join(c.profiles)}; strategy tpu runs "
                "a torus of identical chips on one host, so it takes one profile, e.g. "
                "hosts: 1 and device: {profile: tpu-v4}",
            )
        if c.hosts != 1:
            raise fail(
                "cluster.hosts",
                f"got {c.hosts}; strategy tpu puts all {x}x{y} chips on one host linked by "
                "intra_host (the ICI); use hosts: 1 and size the torus with strategy.topology",
            )
        if c.devices_per_host not in (1, x * y):
            raise fail(
                "cluster.devices_per_host",
                f"got {c.devices_per_host}; strategy tpu takes its chip count from "
                f"strategy.topology ({x}x{y} = {x * y} chips); remove devices_per_host",
            )
        c.set_devices_per_host(x * y)
        if "profile" not in c.device.model_fields_set:
            c.device.profile = "tpu-v4"


class TPUStrategy(AllReduceStrategy):
    """x·y chips on one host, 2D-torus all-reduces of the gradient over the ICI."""

    topology = "torus"
    algorithm = "torus2d"

    @property
    def label(self) -> str:
        x, y = self.scenario.strategy.topology
        return f"all-reduce torus2d {x}x{y}"

    def summary(self) -> dict[str, Any]:
        x, y = self.scenario.strategy.topology
        nbytes = self.costs.grad_nbytes
        seconds = self.net.collective_s("allreduce", self.training_devices, nbytes, "torus2d")
        return {
            "topology": [x, y],
            **allreduce_figures(nbytes, seconds, self.scenario.replicas),
        }
