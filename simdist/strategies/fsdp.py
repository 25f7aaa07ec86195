"""``fsdp``: PyTorch's FullyShardedDataParallel, ZeRO stage 3 with FSDP's own options.

Each layer is an FSDP unit (``auto_wrap_policy`` wrapping every layer): its parameters are
all-gathered before its forward, freed after it when ``reshard_after_forward`` (FULL_SHARD,
the default; ``false`` is SHARD_GRAD_OP), all-gathered again before its backward, and its
gradient reduce-scattered as soon as its backward ends. The options that change the clock
(torch.distributed.fsdp docs, ``FullyShardedDataParallel``; ``fully_shard`` for
``reshard_after_forward``):

* ``backward_prefetch`` (``BackwardPrefetch``, default ``backward_pre``): ``backward_pre``
  issues the next unit's all-gather before the current unit's gradient computation
  (most overlap), ``backward_post`` after it (overlapping the current reduce-scatter with
  the next computation), ``none`` when the next unit's backward starts, behind the current
  reduce-scatter: no overlap;
* ``forward_prefetch`` (default false): explicit forward prefetching only changes the
  order in which the CPU thread issues kernels; the next unit's all-gather already
  overlaps the current forward through implicit prefetching, which is always on (PyTorch
  docs, "FSDP Notes: FSDP Prefetch Nuances"). simdist has no model of the CPU issuing
  kernels, so the option is accepted and changes nothing in the clock.

The timing plan, the numerics and everything else are :mod:`simdist.strategies.zero`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from simdist.sharding import Sharding
from simdist.strategies.sharded_plan import ShardingPlanOptions
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.zero import (
    ShardedExecution,
    ZeroStrategy,
    algorithm_field,
    check_algorithm,
    execution_field,
)

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario


class Spec(StrategySpecBase):
    """Fully sharded data parallelism, one FSDP unit per layer, on every device."""

    kind: Literal["fsdp"]
    splits_replica: ClassVar[str] = "fsdp"
    execution: ShardedExecution = execution_field()
    algorithm: Literal["ring", "hierarchical"] = algorithm_field()
    backward_prefetch: Literal["backward_pre", "backward_post", "none"] = Field(
        "backward_pre", examples=["backward_post"]
    )
    forward_prefetch: bool = Field(False, examples=["true"])
    reshard_after_forward: bool = Field(True, examples=["false"])

    @property
    def stage(self) -> int:
        """FSDP shards parameters, gradients and optimizer state: ZeRO stage 3."""
        return 3

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of every worker host: the data group is every device."""
        return cluster.n_devices

    def sharding(self, cluster: ClusterSpec) -> Sharding:
        """Parameters, gradients and optimizer state over the N devices."""
        n = self.replicas(cluster)
        return Sharding(params=n, gradients=n, optimizer=n)

    def check(self, scenario: Scenario) -> None:
        """``hierarchical`` needs equal hosts."""
        super().check(scenario)
        check_algorithm(self, scenario)

    def plan_options(self) -> ShardingPlanOptions:
        """Stage 3, one unit per layer: a reduce-scatter per layer, always overlapped."""
        return ShardingPlanOptions(
            stage=3,
            overlap_comm=True,
            reduce_bucket_nbytes=1,
            forward_prefetch=True,  # implicit forward prefetching (module docstring)
            backward_prefetch=self.backward_prefetch,
            reshard_after_forward=self.reshard_after_forward,
        )


class FSDPStrategy(ZeroStrategy):
    """ZeRO stage 3 with one FSDP unit per layer and FSDP's prefetching rules."""
