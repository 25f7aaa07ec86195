"""``zero``: sharded data parallelism, ZeRO stages 1, 2 and 3 (DeepSpeed's ZeRO optimizer).

Every device of every host holds a replica's share of the global batch, as
multi_worker_mirrored; what differs is what each device keeps and what moves
(Rajbhandari et al. 2020, "ZeRO: memory optimizations toward training trillion parameter
models", Sec. 5): stage 1 shards the optimizer state over the N devices, stage 2 the
gradients too (a reduce-scatter instead of an all-reduce), stage 3 the parameters too
(each layer all-gathered before its forward and again before its backward). Which
collective moves what, and when, is the plan (:mod:`simdist.strategies.sharded_plan`);
the network prices each one; the numerics are the real sharded update on JAX devices
(:mod:`simdist.numerics.sharded`), equal to one_device with the global batch.

Options, after DeepSpeed's ``zero_optimization`` config (deepspeed/runtime/zero/config.py,
``DeepSpeedZeroConfig``): ``overlap_comm`` (default: on for stage 3 only, as DeepSpeed's
validator sets it), ``reduce_bucket_size`` and ``allgather_bucket_size`` (DeepSpeed counts
elements, 5e8 of each by default; simdist takes bytes, and 5e8 float32 elements are
2 GB), and ``prefetch`` (stage 3: the next layer's all-gather issued one layer ahead, as
DeepSpeed does with ``stage3_prefetch_bucket_size`` > 0).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field

from simdist.sharding import Sharding
from simdist.spec import Bytes, fail, number_choice
from simdist.step_costs import LayerCost
from simdist.strategies.multi_worker_mirrored import TRAIN_FLOPS_PER_FORWARD
from simdist.strategies.sharded_plan import ShardingPlanOptions, plan_step
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.steps import Collective, Compute, walk
from simdist.strategies.sync import SynchronousStrategy, SyncState

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.numerics.executor import Workload
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario

#: DeepSpeed's reduce_bucket_size and allgather_bucket_size default, 5e8 elements
#: (deepspeed/runtime/zero/config.py), as bytes of float32 parameters.
DEEPSPEED_BUCKET_BYTES = 500_000_000 * 4

ShardedExecution = Literal["devices", "batched"]


def execution_field() -> Any:
    """``strategy.execution``: ``devices`` (one JAX device per replica, the default) or
    ``batched`` (the same per-device step under ``vmap`` on one device)."""
    return Field("devices", examples=["batched"])


def algorithm_field() -> Any:
    """``strategy.algorithm``: the reduce-scatter / all-gather / all-reduce algorithm."""
    return Field("ring", examples=["hierarchical"])


def check_algorithm(spec: StrategySpecBase, scenario: Scenario) -> None:
    """``hierarchical`` needs the same device count on every host (equal groups)."""
    c = scenario.cluster
    if getattr(spec, "algorithm", "ring") == "hierarchical" and not c.uniform_devices:
        raise fail(
            "strategy.algorithm",
            f"got 'hierarchical' with hosts holding {c.device_counts} devices; it needs the "
            "same count on every host, e.g. algorithm: ring",
        )


class Spec(StrategySpecBase):
    """Sharded data parallelism on every device of every host: ZeRO stage 1, 2 or 3."""

    kind: Literal["zero"]
    splits_replica: ClassVar[str] = "zero (stage 1, 2 or 3)"
    stage: Annotated[Literal[1, 2, 3], number_choice(1, 2, 3)] = Field(3, examples=["2"])
    execution: ShardedExecution = execution_field()
    algorithm: Literal["ring", "hierarchical"] = algorithm_field()
    overlap_comm: bool | None = Field(None, examples=["true"])
    reduce_bucket_size: Bytes = Field(DEEPSPEED_BUCKET_BYTES, gt=0, examples=["200MB"])
    # Options of some stages only: None when not given (a dumped scenario keeps it so).
    allgather_bucket_size: Bytes | None = Field(None, gt=0, examples=["200MB"])
    prefetch: bool | None = Field(None, examples=["false"])

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of every worker host: the data group is every device."""
        return cluster.n_devices

    def sharding(self, cluster: ClusterSpec) -> Sharding:
        """Stage 1: the optimizer state over the N devices; 2: + gradients; 3: + parameters."""
        n = self.replicas(cluster)
        return Sharding(
            params=n if self.stage == 3 else 1,
            gradients=n if self.stage >= 2 else 1,
            optimizer=n,
        )

    def check(self, scenario: Scenario) -> None:
        """Options of one stage given with another, and ``hierarchical`` on unequal hosts."""
        super().check(scenario)
        if self.prefetch is not None and self.stage != 3:
            raise fail(
                "strategy.prefetch",
                f"got prefetch with stage {self.stage}; only stage 3 gathers parameters per "
                "layer, so there is nothing to prefetch: remove prefetch or use stage: 3",
            )
        if self.allgather_bucket_size is not None and self.stage == 3:
            raise fail(
                "strategy.allgather_bucket_size",
                "got allgather_bucket_size with stage 3, which gathers each layer's parameters "
                "when it needs them, not in buckets after the step: remove it or use stage: 1 "
                "or 2",
            )
        check_algorithm(self, scenario)

    def plan_options(self) -> ShardingPlanOptions:
        """The plan of a step under these options (:mod:`~simdist.strategies.sharded_plan`)."""
        overlap = self.stage == 3 if self.overlap_comm is None else self.overlap_comm
        prefetch = self.prefetch is not False
        gather = self.allgather_bucket_size
        return ShardingPlanOptions(
            stage=self.stage,
            overlap_comm=overlap,
            reduce_bucket_nbytes=self.reduce_bucket_size,
            allgather_bucket_nbytes=DEEPSPEED_BUCKET_BYTES if gather is None else gather,
            forward_prefetch=prefetch,
            backward_prefetch="backward_pre" if prefetch else "none",
        )


class ZeroTrainer:
    """The numerics of a sharded step: the global batch split over N devices, each holding
    and updating its shard of the flat parameters and optimizer state
    (:class:`simdist.numerics.sharded.ShardedStep`). A
    :class:`~simdist.strategies.steps.DispatchTrainer`, as
    :class:`~simdist.strategies.sync.SyncTrainer`; its state's ``params`` is the flat vector."""

    def __init__(
        self, workload: Workload, replicas: int, per_replica_batch: int, stage: int, execution: str
    ) -> None:
        from simdist.numerics.sharded import FlatShards, ShardedStep

        self.workload = workload
        self.replicas = replicas
        self.global_batch = replicas * per_replica_batch
        self.shards = FlatShards.of(workload.params, replicas)
        # Shared by the Workloads differing only in seed (tests/test_compile_sharing.py).
        self.step = workload.shared_program(
            ("zero", replicas, self.global_batch, stage, execution),
            lambda: ShardedStep(
                workload.replica_loss_and_grad(self.global_batch),
                workload.optimizer,
                self.shards,
                stage,
                execution,
            ),
        )

    def init(self) -> SyncState:
        """The initial parameters, flattened and placed, and the optimizer state over them."""
        flat, opt_state = self.step.init(self.workload.params)
        return SyncState(flat, opt_state, self.workload.model_state)

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        return self.workload.batches.batch(step, self.global_batch)

    def dispatch(self, state: SyncState, batch: tuple[Any, Any]) -> tuple[SyncState, Any]:
        """One sharded step: the new state and the global batch's mean loss."""
        from simdist.numerics.data import shard

        x, y = batch
        xs, ys = shard(x, self.replicas), shard(y, self.replicas)
        flat, opt_state, loss, moments = self.step(state.params, state.opt_state, xs, ys)
        model_state = self.workload.update_state(state.model_state, moments)
        return SyncState(flat, opt_state, model_state), loss

    def update(self, state: SyncState, batch: tuple[Any, Any]) -> tuple[SyncState, float]:
        """One sharded step, its loss read back."""
        state, loss = self.dispatch(state, batch)
        return state, float(loss)

    def params(self, state: SyncState) -> Any:
        """The parameter tree of ``state`` (gathered from the shards)."""
        import jax
        import numpy as np

        return self.shards.tree(np.asarray(jax.device_get(state.params)))


class AheadOfClock:
    """The data group carrying a step's program out (:func:`~simdist.strategies.steps.walk`):
    each device computes its layers in program order, ahead of the clock (its own time,
    paced by its variability, × its straggler factor), waiting where the program waits for
    a collective; a collective is issued when the last device has issued it. Records each
    device's compute, straggle and barrier spans as one grid when the step ends."""

    def __init__(self, strategy: ZeroStrategy, step: int) -> None:
        import numpy as np

        self.strategy, self.step = strategy, step
        self.env = env = strategy.env
        self.devices = devices = strategy.training_devices
        self.names = [layer.name for layer in strategy.plan_layers()]
        self.seconds = dict(zip(("forward", "backward"), strategy.layer_seconds(step), strict=True))
        self.factor = (
            np.array([strategy.slowdown(d, step) for d in devices]) if strategy.stragglers else None
        )
        self.t = np.full(len(devices), env.now)
        self.columns: list[tuple[Any, Any, str, str]] = []

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Every device computes ``op`` from its own time (no clock event)."""
        t, seconds = self.t, self.seconds[op.phase][:, op.unit]
        end = t + seconds
        self.columns.append((t, end, "compute", f"{op.phase} {self.names[op.unit]}"))
        if self.factor is not None:
            slow = t + seconds * self.factor
            self.columns.append((end, slow, "straggle", ""))
            end = slow
        self.t = end
        yield from ()

    def issued_s(self) -> float:
        """The last device's time."""
        return float(self.t.max())

    def start(self, index: int, c: Collective) -> Any:
        """Collective ``c`` over the data group."""
        del index
        return self.strategy.collective(c, self.step)

    def waited(self, span: tuple[float, float]) -> None:
        """Each device idles from its time to the collective's end."""
        import numpy as np

        start, end = span
        t = self.t
        self.columns.append((t, np.maximum(t, start), "idle", "barrier"))
        self.t = np.maximum(t, end)

    def send(self, op: Any) -> None:
        raise TypeError(f"a ZeRO step sends no messages; got {op}")

    def receive(self, op: Any) -> Generator[Any, Any, None]:
        raise TypeError(f"a ZeRO step receives no messages; got {op}")

    def finish(self) -> Generator[Any, Any, None]:
        """Record the spans; the step ends when the last device is done."""
        self.strategy.record_walk(self.devices, self.columns, self.factor, self.step)
        last = float(self.t.max())
        if last > self.env.now:
            yield self.env.timeout(last - self.env.now)


class ZeroStrategy(SynchronousStrategy):
    """N replicas on every device; ZeRO's collectives per layer or bucket, overlapped with
    compute as the plan says; real sharded numerics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        self.algorithm: str = spec.algorithm
        self.plan = plan_step(self.plan_layers(), self.plan_options())
        if self.workload is not None:
            self.trainer = ZeroTrainer(  # type: ignore[assignment]
                self.workload,
                self.scenario.replicas,
                self.scenario.workload.batch_size,
                self.stage,
                spec.execution,
            )
            self.state = self.trainer.init()

    @property
    def stage(self) -> int:
        """The ZeRO stage (3 for fsdp)."""
        return self.scenario.strategy.stage

    def plan_options(self) -> ShardingPlanOptions:
        """What moves when, from the strategy section."""
        return self.scenario.strategy.plan_options()

    def requested_execution(self) -> str:
        """The sync trainer the base class builds is replaced by :class:`ZeroTrainer`, which
        places the replicas itself: the base class need not look for devices."""
        return "batched"

    @property
    def final_params(self) -> Any | None:
        if self.state is None or self.trainer is None:
            return None
        params = self.trainer.params(self.state)  # type: ignore[attr-defined]
        return self.workload.variables(params, self.state.model_state)

    def plan_layers(self, device: Device | None = None) -> tuple[LayerCost, ...]:
        """The layers a step walks (of ``device``'s class); without a per-layer profile, the
        model as one layer whose forward is a third of the step (backward ≈ 2 × forward)."""
        costs = self.costs if device is None else self.device_costs(device)
        if costs.layers:
            return costs.layers
        forward = costs.compute_s / TRAIN_FLOPS_PER_FORWARD
        return (
            LayerCost(
                "model",
                forward,
                costs.compute_s - forward,
                costs.grad_nbytes,
                param_nbytes=costs.param_nbytes,
            ),
        )

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """Nothing after the step: :meth:`compute` walks the whole plan."""
        del step
        yield from ()

    def compute(self, step: int) -> Generator[Any, Any, None]:
        if self.scenario.replicas == 1:
            yield from self.compute_phase(self.training_devices, step)
            return
        yield from walk(self.plan, AheadOfClock(self, step))

    def collective(self, c: Collective, step: int) -> Any:
        """Start collective ``c`` over the data group (the network prices and records it)."""
        devices, net, algo = self.training_devices, self.net, self.algorithm
        return net.collective(c.op, devices, c.nbytes, algo, step=step, detail=c.detail)

    def layer_seconds(self, step: int) -> tuple[Any, Any]:
        """Each device's forward and backward seconds per layer at ``step`` (devices ×
        layers), paced by its variability (not its straggler factor)."""
        import numpy as np

        devices = self.training_devices
        rows: dict[str, tuple[list[float], list[float]]] = {}
        for device in devices:
            if device.profile not in rows:
                layers = self.plan_layers(device)
                rows[device.profile] = (
                    [layer.forward_s for layer in layers],
                    [layer.backward_s for layer in layers],
                )
        forward = np.array([rows[d.profile][0] for d in devices])
        backward = np.array([rows[d.profile][1] for d in devices])
        if self.variability:
            pace = np.array([self.pace(d, step) for d in devices])[:, None]
            forward, backward = forward * pace, backward * pace
        return forward, backward

    def record_walk(
        self,
        devices: list[Device],
        columns: list[tuple[Any, Any, str, str]],
        factor: Any,
        step: int,
    ) -> None:
        """The walk's spans, one column per program step, recorded as one grid."""
        import numpy as np

        if not columns:
            return
        shape = (len(devices), len(columns))
        begins, ends = np.empty(shape), np.empty(shape)
        kinds, details = np.empty(shape, dtype=object), np.empty(shape, dtype=object)
        for k, (begin, end, kind, detail) in enumerate(columns):
            begins[:, k], ends[:, k] = begin, end
            kinds[:, k], details[:, k] = kind, detail
        keep = ends > begins
        if factor is not None:
            straggle = kinds == "straggle"
            for i in np.flatnonzero(keep[:, straggle[0]].any(axis=1)):
                details[i, straggle[0]] = f"x{factor[i]:.3g}"
        self.recorder.device_grid(devices, begins, ends, kinds, details, keep, step)

    def summary(self) -> dict[str, Any]:
        """The stage, and the bytes each kind of collective moves per step."""
        moved: dict[str, int] = {"allreduce": 0, "reduce_scatter": 0, "all_gather": 0}
        for c in self.plan.collectives:
            moved[c.op] += c.nbytes
        return {
            "zero_stage": self.stage,
            "collectives_per_step": len(self.plan.collectives),
            **{f"{op}_nbytes_per_step": nbytes for op, nbytes in moved.items()},
        }
