"""``local_sgd``: replicas take H local steps alone, then average their parameter deltas.

Local SGD (Stich 2019, "Local SGD converges fast and communicates little", arXiv:1805.09767;
Lin et al. 2020, "Don't use large mini-batches, use local SGD", arXiv:1808.07217) and its
DiLoCo form (Douillard et al. 2023, arXiv:2311.08105, Algorithm 1): every device of every
host holds a replica and its own inner optimizer (the workload's optimizer) and steps on
its share of each global batch with no communication; every ``sync_every`` (H) steps the
replicas all-reduce their parameters' change since the last sync, and the outer optimizer
applies the mean change as a pseudo-gradient to the shared parameters, from which every
replica goes on. ``outer_optimizer`` is SGD with optional (Nesterov) momentum; the default,
rate 1 without momentum, is plain model averaging (Stich's local SGD); DiLoCo's is
``{name: sgd, learning_rate: 0.7, momentum: 0.9, nesterov: true}`` (arXiv:2311.08105,
Sec. 3) with an ``adam`` inner optimizer.

Time: each device walks its own local steps at its own pace (step-time variability and
stragglers), so the replicas drift apart between syncs; the sync's all-reduce of the
parameter bytes starts when the last replica has finished its H-th step, the others wait
(``idle: barrier``), and the network prices it as for the synchronous strategies
(``algorithm``: ``ring`` or ``hierarchical``). A step's stamp (its ``examples_per_s`` and
loss, the replicas' mean) is when its slowest replica finished it. A sync also follows the
last step, so the final parameters are the replicas' average; an evaluation between syncs
reads the shared parameters of the last one (DiLoCo evaluates its global model).

With ``sync_every: 1`` and the default outer optimizer it is synchronous data parallelism
for the workload's sgd and momentum, whose updates are linear in the gradient (the mean of
the replicas' updates is the update of their mean gradient); adam's is not.

Not modelled: failures and checkpoints (refused), the chief's evaluation time (free, as if
offline), and overlapping the sync with the next local steps (DiLoCo's streaming variants).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from simdist.spec import Float, PositiveInt, fail
from simdist.spec import Spec as SpecModel
from simdist.strategies.base import Strategy
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.steps import LocalTrainer
from simdist.strategies.zero import ShardedExecution, algorithm_field, check_algorithm

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario

#: Local steps between syncs by default: a choice (DiLoCo takes H = 500 on language models,
#: arXiv:2311.08105 Sec. 3; small models on small data need fewer to keep up).
DEFAULT_SYNC_EVERY = 8


class OuterOptimizerSpec(SpecModel):
    """``strategy.outer_optimizer``: SGD on the averaged delta, with optional momentum."""

    name: Literal["sgd", "nesterov"] = Field("sgd", examples=["nesterov"])
    # At most 10: the outer step multiplies each sync's averaged change by it, and published
    # outer rates are 0.7 (DiLoCo, arXiv:2311.08105 Sec. 3) to 1 (plain averaging, Stich
    # 2019); 1e308 or inf is a typo that turns the parameters inf.
    learning_rate: Float = Field(1.0, gt=0, le=10, examples=["0.7"])
    momentum: Float = Field(0.0, ge=0, lt=1, examples=["0.9"])
    nesterov: bool = Field(False, examples=["true"])

    @property
    def uses_nesterov(self) -> bool:
        """``name: nesterov`` is ``sgd`` with ``nesterov: true``."""
        return self.nesterov or self.name == "nesterov"

    @property
    def state_copies(self) -> int:
        """Parameter-sized buffers the outer optimizer keeps besides the anchor (momentum)."""
        return 1 if self.momentum > 0 else 0


class Spec(StrategySpecBase):
    """Local SGD / DiLoCo: H local steps per replica, then an all-reduce of the deltas."""

    kind: Literal["local_sgd"]
    sync_every: PositiveInt = Field(DEFAULT_SYNC_EVERY, examples=["10"])
    outer_optimizer: OuterOptimizerSpec = Field(
        default_factory=OuterOptimizerSpec,
        examples=["{name: nesterov, learning_rate: 0.7, momentum: 0.9}"],
    )
    algorithm: Literal["ring", "hierarchical"] = algorithm_field()
    # batched by default: the replicas share no collective between syncs, so one vmap
    # computes the same thing without a program per device.
    execution: ShardedExecution = Field("batched", examples=["devices"])

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of every worker host."""
        return cluster.n_devices

    def extra_state_copies(self) -> int:
        """Every device keeps the parameters of the last sync (the anchor the deltas are
        taken from) and the outer momentum, when there is one: it applies the outer step
        itself after the all-reduce, as every DiLoCo worker does."""
        return 1 + self.outer_optimizer.state_copies

    def check(self, scenario: Scenario) -> None:
        """Nesterov needs momentum; failures and checkpoints are not modelled."""
        super().check(scenario)
        outer = self.outer_optimizer
        if outer.uses_nesterov and outer.momentum == 0:
            raise fail(
                "strategy.outer_optimizer.momentum",
                "got nesterov with momentum 0, which has no momentum to look ahead with; "
                "give a momentum, e.g. momentum: 0.9, or drop nesterov",
            )
        if scenario.faults.failures:
            raise fail(
                "faults.failures",
                "local_sgd does not model failures; remove them or use "
                "strategy: multi_worker_mirrored",
            )
        if scenario.checkpoint is not None:
            raise fail(
                "checkpoint",
                "local_sgd does not write checkpoints; remove the checkpoint section",
            )
        check_algorithm(self, scenario)


class LocalSGDStrategy(Strategy):
    """Replicas on every device; H unsynchronised local steps, then one all-reduce."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        self.sync_every: int = spec.sync_every
        self.algorithm: str = spec.algorithm
        self.syncs = 0
        self.trainer: LocalTrainer | None = None
        self.state: Any = None
        if self.workload is not None:
            from simdist.numerics.local_sgd import LocalSGD, outer_optimizer

            outer = spec.outer_optimizer
            self.trainer = LocalSGD(
                self.workload,
                self.scenario.replicas,
                self.scenario.workload.batch_size,
                outer_optimizer(outer.learning_rate, outer.momentum, outer.uses_nesterov),
                spec.execution,
            )
            self.state = self.trainer.init()

    @property
    def final_params(self) -> Any | None:
        """The shared parameters of the last sync (a sync follows the last step)."""
        if self.state is None or self.trainer is None:
            return None
        return self.workload.variables(self.trainer.anchor(self.state), self.state.model_state)

    def sync_due(self, done: int) -> bool:
        """Whether the replicas sync after (1-based) step ``done``."""
        return done % self.sync_every == 0 or done == self.total_steps

    def process(self) -> Generator[Any, Any, None]:
        import numpy as np

        devices = self.training_devices
        pipeline = self.new_pipeline()
        clocks = np.full(len(devices), float(self.env.now))
        for step in range(self.total_steps):
            start = self.env.now
            if pipeline is not None:  # the batch is there for all when the slowest takes it
                yield from self.input_wait(devices, pipeline, step)
                clocks = np.maximum(clocks, self.env.now)
            for i, device in enumerate(devices):
                seconds = self.compute_s(device, step) + self.optimizer_step_s(device, shards=1)
                self.record_compute(device, float(clocks[i]), seconds, step)
                clocks[i] += seconds
            slowest = float(clocks.max())
            if slowest > self.env.now:
                yield self.env.timeout(slowest - self.env.now)
            done = step + 1
            loss = None
            if self.trainer is not None:
                self.state, loss = self.trainer.local_step(self.state, self.trainer.batch(step))
            if self.sync_due(done):
                yield from self.sync(clocks, step)
                clocks[:] = self.env.now
            if not self.end_step(start, done, loss, lambda: self.final_params):
                return

    def sync(self, clocks: Any, step: int) -> Generator[Any, Any, None]:
        """The replicas wait for the slowest, all-reduce their parameter deltas, and apply
        the outer step."""
        now = self.env.now
        devices = self.training_devices
        for i, device in enumerate(devices):
            if clocks[i] < now:
                self.recorder.event(
                    float(clocks[i]), now, device.host, device.name, "idle", 0, step, "barrier"
                )
        if self.scenario.replicas > 1:
            yield self.net.collective(
                "allreduce",
                devices,
                self.costs.param_nbytes,
                self.algorithm,
                step=step,
                detail=f"all-reduce {self.algorithm} parameter deltas",
            )
        self.syncs += 1
        if self.trainer is not None:
            self.state = self.trainer.sync(self.state)

    def summary(self) -> dict[str, Any]:
        outer = self.scenario.strategy.outer_optimizer
        return {
            "sync_every": self.sync_every,
            "syncs": self.syncs,
            "sync_nbytes": self.costs.param_nbytes,
            "outer_optimizer": outer.name,
            "outer_learning_rate": outer.learning_rate,
            "outer_momentum": outer.momentum,
            "outer_nesterov": outer.uses_nesterov,
        }
