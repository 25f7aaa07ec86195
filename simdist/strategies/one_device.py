"""``one_device`` (alias ``default``): a single replica.

The baseline every other strategy is checked against.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Literal

from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.sync import SynchronousStrategy

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec


class Spec(StrategySpecBase):
    """A single replica on one device: the baseline."""

    kind: Literal["one_device", "default"] = "one_device"

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica, however many hosts and devices the cluster has."""
        del cluster
        return 1

    def workers(self, cluster: ClusterSpec) -> int:
        """One worker: only the first host trains."""
        del cluster
        return 1


class OneDeviceStrategy(SynchronousStrategy):
    """One replica on the first device: compute, apply, nothing moves."""

    def requested_execution(self) -> str:
        """One replica: its gradient is one batched evaluation."""
        return "batched"

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        del step
        yield from ()
