"""The tensor_parallel strategy: D copies of a tensor group of T devices, Megatron-style.

Devices sit on the mesh's ``data`` × ``tensor`` axes, tensor innermost (consecutive
devices, inside a host: :mod:`simdist.hardware.mesh`). Every device of a tensor group walks the same
step (:func:`~.plan.step_plan`, run by :func:`~simdist.strategies.steps.walk`): compute
spans of its share of each layer, and the tensor collectives on the critical path — each
waits for the group's slowest device and holds every device until it ends, as Megatron's
synchronous NCCL calls do. The D groups walk concurrently; after the slowest has finished
its backward, each data group (the devices holding the same shard in every copy) all-
reduces its gradient, T all-reduces at once — after backward, not overlapped with it, as
Megatron-LM's DistributedDataParallel does by default (``overlap_grad_reduce = False``,
megatron/core/distributed/ distributed_data_parallel_config.py). Then every device applies
its shard's update.

Numerics (:mod:`simdist.numerics.tensor_parallel`): the mlp's column/row-parallel pairs as
sharded matmuls on D × T emulated JAX devices under ``shard_map``, ≡ one_device with the
global batch.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.strategies.steps import Compute, GroupRunner, Plan, walk
from simdist.strategies.sync import SynchronousStrategy, SyncState
from simdist.strategies.tensor_parallel.plan import (
    compute_steps,
    device_grad_nbytes,
    layer_roles,
    step_plan,
)

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device


class TensorParallelStrategy(SynchronousStrategy):
    """Megatron tensor parallelism over T devices, × D data-parallel copies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        self.T: int = spec.tensor_size(self.scenario.cluster)
        self.D: int = spec.data
        self.sp: bool = spec.sequence_parallel
        self.algo: str = spec.all_reduce
        layers = self.costs.layers
        if not layers:
            raise SimdistError(
                f"{self.scenario.name}: strategy tensor_parallel needs the model's per-layer "
                "costs (which layers are split); this run has one cost for the whole step"
            )
        model = self.scenario.workload.clock_model.name
        self.roles = layer_roles(model, [layer.name for layer in layers])
        # The mlp's whole layers work example by example: on the split rows, no all-gather.
        self.gather_whole = model != "mlp"
        self.tensor_groups = [list(g) for g in self.mesh.groups("tensor")]
        self.data_groups = [list(g) for g in self.mesh.groups("data")]
        self.plan = self.plan_of(self.costs.layers)
        self._class_seconds: dict[str, list[float]] = {}
        leaves = {path: nbytes for path, _, nbytes in self.costs.param_leaves}
        self.grad_nbytes = device_grad_nbytes(layers, self.roles, self.T, leaves)
        if self.workload is not None:
            from simdist.numerics.tensor_parallel import TensorParallelTrainer

            self.trainer = TensorParallelTrainer(
                self.workload,
                self.D,
                self.T,
                self.scenario.workload.batch_size,
                SyncState,
                sequence_parallel=self.sp,
            )
            self.state = self.trainer.init()

    def plan_of(self, layers: Sequence[Any]) -> Plan:
        """A tensor group's step on layers of these costs."""
        return step_plan(layers, self.roles, self.T, self.sp, gather_whole=self.gather_whole)

    def requested_execution(self) -> str:
        """The data-parallel trainer the base class builds is replaced by the sharded one;
        ``batched`` keeps it from asking for devices."""
        return "batched"

    def build_mesh(self) -> Mesh[Device]:
        """D copies × T devices, tensor innermost: a group is consecutive devices."""
        return Mesh.of(self.cluster.devices, {"data": self.D, "tensor": self.T})

    @cached_property
    def training_devices(self) -> list[Device]:
        """Every device of every tensor group computes."""
        return list(self.mesh.devices)

    def class_seconds(self, device: Device) -> list[float]:
        """The seconds of each compute span of the step as ``device``'s class computes it
        (its own layer times)."""
        label = device.profile if self.costs.per_profile else ""
        if label not in self._class_seconds:
            layers = self.device_costs(device).layers if label else self.costs.layers
            plan = self.plan_of(layers)
            self._class_seconds[label] = [op.seconds for op in compute_steps(plan)]
        return self._class_seconds[label]

    # -- the clock -----------------------------------------------------------

    def compute(self, step: int) -> Generator[Any, Any, None]:
        """Each tensor group walks its step; the data-parallel all-reduce waits for all."""
        if len(self.tensor_groups) == 1:
            yield from self.walk(self.tensor_groups[0], step)
            return
        walks = [self.env.process(self.walk(group, step)) for group in self.tensor_groups]
        yield self.env.all_of(walks)
        now = self.env.now
        for group, done in zip(self.tensor_groups, walks, strict=True):
            if done.value < now:
                self.record_devices(group, done.value, now, "idle", step, "barrier")

    def walk(self, group: list[Device], step: int) -> Generator[Any, Any, float]:
        """One tensor group's forward and backward, collectives on the critical path;
        returns when it ended."""
        yield from walk(self.plan, TensorGroup(self, group, step))
        return self.env.now

    def _algo(self, kind: str) -> str:
        return self.algo if kind == "allreduce" else "ring"

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """The data groups all-reduce their shards' gradients, all at once (none for D = 1)."""
        if self.D == 1:
            return
        moves = [
            self.net.collective(
                "allreduce", group, self.grad_nbytes, self.algo, step=step, detail="data all-reduce"
            )
            for group in self.data_groups
        ]
        yield self.env.all_of(moves)

    def summary(self) -> dict[str, Any]:
        """The layout, and the tensor collectives of one step (closed forms on group 0)."""
        group = self.tensor_groups[0]
        moves = self.plan.collectives
        return {
            "tensor": self.T,
            "data": self.D,
            "sequence_parallel": self.sp,
            "tensor_collectives_per_step": len(moves),
            "tensor_comm_nbytes_per_step": sum(c.nbytes for c in moves),
            "tensor_comm_s_per_step": sum(
                self.net.collective_s(c.op, group, c.nbytes, self._algo(c.op)) for c in moves
            ),
            "data_allreduce_nbytes": self.grad_nbytes if self.D > 1 else 0,
        }


class TensorGroup(GroupRunner):
    """A tensor group walking its step: each device its own class's span times (×
    variability and straggler factor), the collectives on the critical path."""

    def __init__(self, strategy: TensorParallelStrategy, group: list[Device], step: int) -> None:
        super().__init__(strategy, group, step, strategy.algo)
        self.tp = strategy

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """The group computes span ``op``; the next collective waits for the slowest device."""
        tp, group, step = self.tp, self.group, self.step
        start, detail = self.env.now, op.detail
        if not (tp.variability or tp.stragglers or tp.costs.per_profile):
            seconds = op.seconds
            if seconds > 0:
                yield self.env.timeout(seconds)
                tp.record_devices(group, start, start + seconds, "compute", step, detail)
            return
        plan = [
            (d, tp.class_seconds(d)[op.unit], tp.pace(d, step), tp.slowdown(d, step)) for d in group
        ]
        longest = max(seconds * (pace * factor) for _, seconds, pace, factor in plan)
        if longest <= 0:
            return
        yield self.env.timeout(longest)
        for d, seconds, pace, factor in plan:
            done = tp.record_scaled(d, start, seconds, factor, step, detail, pace)
            if done < start + longest:
                tp.recorder.event(done, start + longest, d.host, d.name, "idle", 0, step, "barrier")
