"""The base of every strategy's scenario section: its fields and the hooks it answers.

Each strategy module's ``Spec`` subclasses :class:`StrategySpecBase`: it narrows ``kind``,
adds its options and answers the hooks the rest of simdist asks instead of comparing
strategy names — how many replicas it runs, how it splits a replica's state
(:meth:`~StrategySpecBase.sharding`), its cross-checks against the scenario, its memory
(:meth:`~StrategySpecBase.check_memory`, :meth:`~StrategySpecBase.off_device_memory`) and
whether the trade-off study starts from it.
"""

from __future__ import annotations

import typing
from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from simdist.sharding import Sharding
from simdist.spec import PositiveInt, Spec, fail

if TYPE_CHECKING:
    from collections.abc import Sequence

    from simdist.hardware.cluster import Cluster
    from simdist.numerics.memory import Footprint
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario
    from simdist.step_costs import Costs

__all__ = ["StrategySpecBase"]


class StrategySpecBase(Spec):
    """Base of each strategy module's ``Spec``: the ``strategy:`` section of one kind.

    A subclass narrows ``kind`` to a ``Literal`` of the names it answers to (the scenario's
    union is discriminated on it), adds its options as fields, says how many replicas it
    runs and checks itself against the rest of the scenario.
    """

    kind: str
    #: Activation recomputation (Korthikanti et al. 2022, Sec. 5): ``selective`` recomputes
    #: the attention core, ``full`` keeps the input of every ``recompute_layers`` blocks
    #: (Megatron's ``--recompute-granularity`` and ``--recompute-num-layers``) and computes
    #: their forward again in the backward pass.
    recompute: Literal["none", "selective", "full"] = Field("none", examples=["full"])
    recompute_layers: PositiveInt = Field(1, examples=["1"])
    #: The precision gradients are reduced in under mixed precision (fp16 / bf16): the
    #: training precision by default, as Megatron and DeepSpeed do; ``fp32`` as Megatron's
    #: ``--accumulate-allreduce-grads-in-fp32``.
    grad_reduce: Literal["precision", "fp32"] = Field("precision", examples=["fp32"])

    # Whether a TF_CONFIG ``chief`` task trains like a worker (it does in every synchronous
    # strategy; in parameter_server it only coordinates, as TF's ClusterCoordinator).
    chief_trains: ClassVar[bool] = True
    # The network this strategy brings along (tpu: its "torus"), or "switch": it runs on
    # whatever the cluster is wired as. Its class's ``topology``, read from the scenario's
    # section without importing the class (whose module may import SimPy).
    wiring: ClassVar[str] = "switch"
    # Whether the devices hold the optimizer state and run the optimizer step (not when
    # parameter servers or the host CPU of central storage do): read by the memory model.
    optimizer_on_device: ClassVar[bool] = True
    # How memory advice names this strategy when it splits a replica over devices (e.g.
    # "zero (stage 1, 2 or 3)"); empty for a strategy that keeps whole replicas.
    splits_replica: ClassVar[str] = ""
    # Whether ``simdist tradeoff`` starts from a scenario of this kind: its options then
    # express the study's synchronous and asynchronous variants (``strategy.mode``,
    # ``backup_workers``, ``staleness_bound``:
    # simdist.studies.tradeoff_variants.strategy_overrides).
    tradeoff_base: ClassVar[bool] = False

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        """The ``kind`` names this spec answers to, e.g. ``("one_device", "default")``."""
        return typing.get_args(cls.model_fields["kind"].annotation)

    @abstractmethod
    def replicas(self, cluster: ClusterSpec) -> int:
        """Model replicas computing a gradient in one step, on this ``ClusterSpec``."""

    def workers(self, cluster: ClusterSpec) -> int:
        """Worker tasks that ``worker N`` faults may target: every training host."""
        return cluster.hosts

    def numeric_devices(self, cluster: ClusterSpec) -> int:
        """JAX devices the numerics run on with ``execution: devices``: one per replica (a
        strategy that splits a replica over devices, tensor_parallel, needs more)."""
        return self.replicas(cluster)

    def sharding(self, cluster: ClusterSpec) -> Sharding:
        """How one replica's model state is split over devices (default: replicated)."""
        return Sharding()

    def extra_state_copies(self) -> int:
        """Float32 copies of the parameters each device keeps besides its model state and
        the workload optimizer's (local_sgd's anchor and outer momentum); counted with the
        optimizer state by the memory model. None by default."""
        return 0

    def device_params(self, params: int, scenario: Scenario) -> int:
        """Of a replica's ``params`` parameters, those one device holds before
        :meth:`sharding` splits them: all of them by default (expert_parallel: the dense
        ones and its share of the experts). The memory model counts parameters, gradients
        and optimizer state from it."""
        del scenario
        return params

    def expert_layer_params(self, scenario: Scenario, names: Sequence[str]) -> list[int] | None:
        """Of each layer's parameters (layers ``names``), those split as
        :meth:`expert_sharding` says instead of :meth:`sharding` (hybrid's expert axis: the
        experts of each MoE layer); None by default: every parameter as :meth:`sharding`."""
        del scenario, names
        return None

    def expert_sharding(self, cluster: ClusterSpec) -> Sharding:
        """How :meth:`expert_layer_params`' parameters are split (default: as
        :meth:`sharding`)."""
        return self.sharding(cluster)

    def check_memory(
        self, scenario: Scenario, footprint: Footprint, source: str, total_steps: int
    ) -> bool:
        """A strategy's own memory check before the run, for one that places its devices
        otherwise than as replicas split as :meth:`sharding` says (pipeline stages): refuse
        a layout that does not fit and return True. False by default: the replica check of
        :func:`simdist.memory.fit.check_device_memory` applies."""
        del scenario, footprint, source, total_steps
        return False

    def off_device_memory(
        self, scenario: Scenario, costs: Costs, cluster: Cluster
    ) -> dict[str, dict]:
        """summary.json's ``memory_off_device``: what holds the optimizer state off the
        training devices (parameter servers, a host CPU), by holder. None by default."""
        del scenario, costs, cluster
        return {}

    def check(self, scenario: Scenario) -> None:
        """Cross-check this strategy against the rest of a ``Scenario``; raise :func:`fail`.

        Called once the cluster's host names are resolved and before the batch is split
        over the replicas; it may fill in values this strategy decides (the tpu sets
        ``devices_per_host``). The default: no parameter-server tasks, which only
        parameter_server uses. Subclasses extend it with ``super().check(scenario)``.
        """
        c = scenario.cluster
        if c.ps > 0:
            raise fail(
                "cluster.ps",
                f"got {c.ps}; parameter-server tasks are only used by strategy: "
                f"parameter_server (strategy here is {self.kind}); remove ps or use ps: 0",
            )

    def check_one_host(self, scenario: Scenario) -> None:
        """For strategies whose replicas are the devices of one host: ``hosts: 1``."""
        hosts = scenario.cluster.hosts
        if hosts != 1:
            raise fail(
                "cluster.hosts",
                f"got {hosts}; strategy {self.kind} runs on one host (hosts: 1); "
                "for several hosts use strategy: multi_worker_mirrored",
            )
