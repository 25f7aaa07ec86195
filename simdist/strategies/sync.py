"""The synchronous family: its state, its checkpoints, and the one training loop they share.

one_device, mirrored, multi_worker_mirrored, central_storage and tpu all train
the same way — every replica computes its shard of global batch k, the
gradients are summed, one update is applied — and differ only in what moves
between compute and apply (:meth:`SynchronousStrategy.communicate`).

The numeric half is Optax-style: an immutable :class:`SyncState` and a pure
``state, loss = trainer.update(state, batch)``; a :class:`Checkpoint` is a
named snapshot of it. Neither needs SimPy.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Generator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from simdist.hardware.faults import FailureSchedule, ProgressWatch
from simdist.strategies.base import Strategy
from simdist.strategies.bucketing import Bucket, bucket_plan, gradient_buckets
from simdist.strategies.compression import CompressedWire, compression_of
from simdist.strategies.layer_step import backward_s, forward_s, span_seconds
from simdist.strategies.reserved_rows import DEFERRED
from simdist.strategies.steps import (
    Collective,
    Compute,
    GroupRunner,
    Plan,
    Receive,
    Send,
    collectives_in_order,
    walk,
)
from simdist.strategies.sync_trainer import Checkpoint, SyncState, SyncTrainer, resolve_execution
from simdist.strategies.tensor_fusion import TensorFusion

#: The trainer's names stay importable from here (they lived in this module).
__all__ = [
    "AllReduceStrategy",
    "Checkpoint",
    "SyncState",
    "SyncTrainer",
    "SynchronousStrategy",
    "resolve_execution",
]

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.scenario.effects import FailureSpec


class SynchronousStrategy(Strategy):
    """Lock-step training: all replicas compute, communicate, then apply one update.

    Subclasses say what moves between compute and apply (:meth:`communicate`).
    The step ends when the slowest replica has finished (max rule), so a
    straggler's extra time shows up as idle time on every other device.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trainer: SyncTrainer | None = None
        self.state: SyncState | None = None
        if self.workload is not None:
            execution = resolve_execution(self.requested_execution(), self.scenario.replicas)
            self.trainer = SyncTrainer(
                self.workload,
                self.scenario.replicas,
                self.scenario.workload.batch_size,
                execution,
                compression_of(
                    getattr(self.scenario.strategy, "compression", None), self.scenario.replicas
                ),
                self.scenario.seed,
            )
            self.state = self.trainer.init()

    def requested_execution(self) -> str:
        """``strategy.execution``: how the replicas' gradients run (``auto``, ``batched``,
        ``devices``; see :func:`resolve_execution`)."""
        return self.scenario.strategy.execution

    @property
    def final_params(self) -> Any | None:
        """The parameters, and the model state with them (``params.npz``, evaluation)."""
        if self.state is None:
            return None
        return self.workload.variables(self.state.params, self.state.model_state)

    @abstractmethod
    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """Move this step's gradients (and parameters) between devices, after
        :meth:`compute` (what the step's plan has not moved already)."""

    def compute(self, step: int) -> Generator[Any, Any, None]:
        """Every replica computes its gradient of step ``step``: :attr:`step_plan` walked."""
        yield from walk(self.step_plan, ComputeThenMove(self, self.training_devices, step))

    @cached_property
    def step_plan(self) -> Plan:
        """A step that does not overlap, as typed steps: the compute, then the collectives
        that follow it (none here: :meth:`communicate` moves what the strategy moves)."""
        return Plan([], [Compute(0, "compute")])

    def overlapped_step(
        self,
        step: int,
        algo: str,
        label: str,
        buckets: Sequence[Bucket],
        *,
        eval_s: float = 0.0,
        eval_host: str | None = None,
        fusion: TensorFusion | None = None,
    ) -> Generator[Any, Any, None]:
        """Forward, then backward layer by layer, each bucket all-reduced as soon as it is ready.

        Every device runs the forward pass, then the backward pass in reverse layer order
        (times × its straggler factor; the chief's devices start ``eval_s`` late after an
        evaluation point). A bucket is ready when its last gradient is ready on every
        device; the buckets are all-reduced one after another, each starting when it is
        ready and the previous one has ended, so communication overlaps with the rest of
        backward. The step ends with the last all-reduce. Each device records ``forward``,
        one ``backward`` span per bucket (``straggle`` for a straggler's excess) and an
        ``idle: barrier`` until the slowest device has its last bucket ready; the network
        records the all-reduces.

        With ``fusion`` (Horovod's tensor fusion) the buckets are this step's fused buffers,
        decided from when each gradient is ready on every device, and each is handed over
        at the start of the cycle that takes it (:class:`TensorFusion`).
        """
        import numpy as np

        start = self.env.now
        devices = self.training_devices
        hosts, names = self.recorder.device_columns(devices)
        t = start + np.where(hosts == eval_host, eval_s, 0.0)
        cycles: list[float] | None = None
        if fusion is not None:
            tensor_ready = self.backward_grid(devices, fusion.tensors, step, t)[1][:, 4::2]
            fused = fusion.buffers([float(v) for v in tensor_ready.max(axis=0)], start)
            buckets = [bucket for bucket, _ in fused]
            cycles = [cycle for _, cycle in fused]
        begins, ends, factor = self.backward_grid(devices, buckets, step, t)
        ready = ends[:, 4::2]  # when each device has each bucket's gradients
        keep = ends > begins
        keep[:, 2::2] &= np.reshape(np.asarray(factor) > 1.0, (-1, 1))
        kinds = np.empty_like(begins, dtype=object)
        details = np.empty_like(begins, dtype=object)
        kinds[:], details[:] = "straggle", ""
        kinds[:, 0], details[:, 0] = "eval", "chief"
        kinds[:, 1::2] = "compute"
        details[:, 1::2] = [
            "forward",
            *(f"backward {b + 1}/{len(buckets)}" for b in range(len(buckets))),
        ]
        for i in np.flatnonzero(keep[:, 2::2].any(axis=1)):
            details[i, 2::2] = f"x{factor[i]:.3g}"
        self.recorder.device_grid(devices, begins, ends, kinds, details, keep, step)
        bucket_ready = [float(v) for v in ready.max(axis=0)]
        self.recorder.events(
            ready[:, -1], bucket_ready[-1], hosts, names, "idle", 0, step, "barrier"
        )
        group = "bucket"
        if cycles is not None:  # a buffer goes at its cycle (never before its gradients)
            bucket_ready = [max(r, c) for r, c in zip(bucket_ready, cycles, strict=True)]
            group = "buffer"
        many = len(buckets) > 1 or cycles is not None
        plan = bucket_plan(
            buckets,
            [
                f"{label} {group} {b + 1}/{len(buckets)}" if many else label
                for b in range(len(buckets))
            ],
        )
        yield from walk(plan, BucketsReady(self, devices, buckets, bucket_ready, algo, step))

    def reduce_group(
        self, devices: Sequence[Device], group: Bucket, algo: str, step: int, detail: str
    ) -> Any:
        """The collective(s) that sum the gradients of ``group`` over ``devices``: one
        all-reduce of its bytes, or what its compression sends (:class:`AllReduceStrategy`)."""
        return self.net.collective(
            "allreduce", devices, group.nbytes, algo, step=step, detail=detail
        )

    def backward_grid(
        self, devices: Sequence[Device], buckets: Sequence[Bucket], step: int, t: Any
    ) -> tuple[Any, Any, Any]:
        """Each device's spans of an overlapped step from ``t`` (its start after any
        evaluation): ``(begins, ends, factor)``, one row per device; column 0 the evaluation,
        then (compute, straggle) pairs: forward, then each bucket's backward. ``factor`` is
        each device's straggler factor (1.0 without stragglers)."""
        import numpy as np

        start = self.env.now
        seconds = self.bucket_seconds(devices, buckets, step)
        factor = np.array([self.slowdown(d, step) for d in devices]) if self.stragglers else 1.0
        spans = seconds.shape[1]  # forward, then each bucket's backward
        begins = np.empty((len(devices), 1 + 2 * spans))
        ends = np.empty_like(begins)
        begins[:, 0], ends[:, 0] = start, t
        for k in range(spans):
            begins[:, 1 + 2 * k] = t
            ends[:, 1 + 2 * k] = begins[:, 2 + 2 * k] = t + seconds[:, k]
            t = ends[:, 2 + 2 * k] = t + seconds[:, k] * factor
        return begins, ends, factor

    def bucket_seconds(
        self, devices: Sequence[Device], buckets: Sequence[Bucket], step: int
    ) -> Any:
        """Each device's (forward, backward of each bucket) seconds at ``step``, one row per
        device, paced by its variability (not its straggler factor).

        On a mixed cluster each device runs its own class's layer times (the buckets then
        wait for the slowest). The spans of every device at once, one column per span: the
        same sums in the same order as one device at a time (record_scaled), so the same
        floats.
        """
        import numpy as np

        plans: dict[str, list[float]] = {}
        for device in devices:
            if device.profile not in plans:
                layers = self.device_costs(device).layers
                backward = list(reversed(layers))
                plans[device.profile] = [
                    *span_seconds(layers, [(0, len(layers))], forward_s),
                    *span_seconds(backward, [(b.first, b.stop) for b in buckets], backward_s),
                ]
        if len(plans) == 1:
            seconds = np.array(next(iter(plans.values())))[None, :]
        else:
            seconds = np.array([plans[d.profile] for d in devices])
        if self.variability:  # each device's pace scales its compute spans
            seconds = seconds * np.array([self.pace(d, step) for d in devices])[:, None]
        return seconds

    @property
    def chief_devices(self) -> list[Any]:
        """The devices of worker 0, the chief, which writes checkpoints and summaries."""
        chief = self.cluster.chief.name
        return [d for d in self.training_devices if d.host == chief]

    def write_checkpoint(self, step: int) -> Generator[Any, Any, None]:
        """The chief writes parameters + optimizer state; everyone waits (synchronous)."""
        start, seconds = self.env.now, self.checkpoint_s
        chief = set(self.chief_devices)
        nbytes = self.costs.checkpoint_nbytes
        for device in self.training_devices:
            mine = device in chief
            self.recorder.event(
                start,
                start + seconds,
                device.host,
                device.name,
                "checkpoint" if mine else "idle",
                nbytes if mine else 0,
                step,
                "write" if mine else "checkpoint",
            )
        yield self.env.timeout(seconds)

    def _failed_host(self, spec: FailureSpec) -> str:
        if spec.role == "worker":
            return self.cluster.workers[spec.index].name
        return self.training_devices[spec.index].host

    def recover(
        self, failed_s: float, spec: FailureSpec, step: int, saved: Checkpoint
    ) -> Generator[Any, Any, None]:
        """Stop, restart the failed task, restore the last checkpoint (time and numerics).

        The surviving replicas notice the failure at the step's collective, i.e.
        when the step in progress would have ended (now); its work is lost with
        every step since the checkpoint, which are then redone.
        """
        host = self._failed_host(spec)
        now = self.env.now
        self.record_task(host, failed_s, now, "failure", step, spec.target)
        restart_s = spec.restart_s
        restore_s = self.checkpoint_s if saved.written else 0.0
        devices = self.training_devices
        self.record_devices(devices, now, now + restart_s, "restart", step, spec.target)
        self.record_devices(
            devices,
            now + restart_s,
            now + restart_s + restore_s,
            "restore",
            saved.step,
            f"checkpoint of step {saved.step}" if saved.written else "initial state",
        )
        self.failures += 1
        self.lost_steps += step + 1 - saved.step
        self.time_lost_s += (now - saved.saved_s) + restart_s + restore_s
        yield self.env.timeout(restart_s + restore_s)
        self.state = saved.state

    def process(self) -> Generator[Any, Any, None]:
        failures = FailureSchedule(
            self.scenario.faults.failures, self.scenario.seed, ("worker", "device")
        )
        pipeline = self.new_pipeline()
        saved = Checkpoint(0, self.state, self.env.now, written=False)  # restart from scratch
        watch = ProgressWatch()
        step = 0
        while step < self.total_steps:
            start = self.env.now
            yield from self.input_wait(self.training_devices, pipeline, step)
            yield from self.compute(step)
            yield from self.communicate(step)
            yield from self.optimizer_step(self.training_devices, step)
            done = step + 1
            checkpoint = self.checkpoint_due(done, saved.saved_s)
            if checkpoint:
                yield from self.write_checkpoint(done)
            hit = failures.pop_before(self.env.now)
            if hit is not None:
                watch.failed(step, self.env.now)
                yield from self.recover(hit[0], hit[1], step, saved)
                failures.skip_until(self.env.now)
                pipeline = self.new_pipeline()
                step = saved.step
                continue
            loss = None
            if self.defer:  # computed with other runs' after the simulation (sync_batch)
                loss = DEFERRED
            elif self.trainer is not None and self.state is not None:
                self.state, loss = self.trainer.dispatch(self.state, self.trainer.batch(step))
            if not self.end_step(start, done, loss, lambda: self.final_params):
                return
            if checkpoint:
                saved = Checkpoint(done, self.state, self.env.now, written=True)
            step = done
        if self.defer:
            from simdist.strategies.sync_batch import SyncSeedRun

            self.deferred_run = SyncSeedRun(self)

    def defers(self) -> bool:
        """Whether this run's steps can be computed with other runs' (``simdist compare
        --seeds``; :mod:`.sync_batch`): plain data-parallel steps (:class:`SyncTrainer`,
        ``batched``, no compression) that follow one another from the first to the last (no
        failures, no checkpoints to restore)."""
        trainer, scenario = self.trainer, self.scenario
        return (
            type(trainer) is SyncTrainer
            and self.state is not None
            and trainer.compression is None
            and trainer.execution == "batched"
            and not scenario.faults.failures
            and scenario.checkpoint is None
            and self.stop_at is None
            and self.may_rerun
        )


class BucketsReady:
    """The devices of an overlapped step handing their gradient buckets over
    (:func:`~simdist.strategies.steps.walk` of :func:`~.bucketing.bucket_plan`): every
    device's spans are worked out and recorded before the walk
    (:meth:`SynchronousStrategy.overlapped_step`), so a bucket is issued when it is ready on
    every device (``ready_s``) and reduced by :meth:`SynchronousStrategy.reduce_group`."""

    def __init__(
        self,
        strategy: SynchronousStrategy,
        devices: Sequence[Device],
        buckets: Sequence[Bucket],
        ready_s: Sequence[float],
        algo: str,
        step: int,
    ) -> None:
        self.strategy, self.env = strategy, strategy.env
        self.devices, self.buckets, self.ready_s = devices, buckets, ready_s
        self.algo, self.step = algo, step
        self.bucket = 0

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Already recorded: note which bucket the devices have reached."""
        self.bucket = op.unit
        yield from ()

    def issued_s(self) -> float:
        """When the bucket reached is ready on every device."""
        return self.ready_s[self.bucket]

    def start(self, index: int, c: Collective) -> Any:
        """Reduce bucket ``index`` over the devices."""
        return self.strategy.reduce_group(
            self.devices, self.buckets[index], self.algo, self.step, c.detail
        )

    def waited(self, span: tuple[float, float]) -> None:
        """Nothing to record: the step ends with its last reduction."""
        del span

    def send(self, op: Send) -> None:
        raise TypeError(f"an overlapped step sends no messages; got {op}")

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        raise TypeError(f"an overlapped step receives no messages; got {op}")

    def finish(self) -> Generator[Any, Any, None]:
        """Nothing left: the step ends with its last reduction."""
        yield from ()


class ComputeThenMove(GroupRunner):
    """The devices of a step that computes, then moves (:attr:`SynchronousStrategy.step_plan`
    walked): the compute is one phase of every device (:meth:`~.base.Strategy.compute_phase`:
    the chief's evaluation first, the max rule, spans cut by a failure), and each collective
    is what the strategy's :meth:`~SynchronousStrategy.reduce_group` sends for the gradient
    (an all-reduce, or its compression's collectives) or, for another op, the op over the
    devices."""

    def __init__(
        self,
        strategy: SynchronousStrategy,
        devices: Sequence[Device],
        step: int,
        algorithm: str = "ring",
        *,
        eval_s: float = 0.0,
        eval_host: str | None = None,
        whole: Bucket | None = None,
    ) -> None:
        super().__init__(strategy, devices, step, algorithm)
        self.sync = strategy
        self.eval_s, self.eval_host, self.whole = eval_s, eval_host, whole

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Every device computes its gradient (``op`` is the whole step's compute)."""
        del op
        yield from self.sync.compute_phase(
            self.group, self.step, eval_s=self.eval_s, eval_host=self.eval_host
        )

    def start(self, index: int, c: Collective) -> Any:
        """The gradient's reduction when ``whole`` is given (a compressed gradient, one
        group), else collective ``c`` over the devices."""
        if self.whole is None:
            return super().start(index, c)
        return self.sync.reduce_group(self.group, self.whole, self.algorithm, self.step, c.detail)


class AllReduceStrategy(SynchronousStrategy):
    """A synchronous strategy whose gradients are summed by all-reduces: mirrored, mwm, tpu.

    With ``strategy.overlap`` (the default) and a per-layer cost profile, backward
    and the bucketed all-reduces overlap (:meth:`overlapped_step`); without it, or
    when everything fits one bucket, the step computes and then all-reduces, as
    :meth:`communicate` says (one all-reduce, or mwm's packs).
    """

    #: The all-reduce algorithm the network prices (``ring``, ``hierarchical``, ``torus2d``).
    algorithm: str = "ring"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        self.buckets: list[Bucket] = []
        self.fusion: TensorFusion | None = None
        if spec.overlap and self.scenario.replicas > 1:
            if spec.bucketing == "horovod":
                self.fusion = TensorFusion.of(
                    self.costs.layers, spec.fusion_threshold_nbytes, spec.cycle_time_s
                )
            elif len(buckets := gradient_buckets(self.costs.layers, spec.bucket_bytes)) > 1:
                self.buckets = buckets
        comp = getattr(spec, "compression", None)
        self.compressed = (
            CompressedWire(comp, self.costs, self.scenario.replicas, self.cluster.profile)
            if comp is not None and comp.active and self.scenario.replicas > 1
            else None
        )

    @property
    def overlapping(self) -> bool:
        """Whether backward and the all-reduces overlap: DDP buckets, or tensor fusion."""
        return bool(self.buckets) or self.fusion is not None

    def bucket_sizes(self) -> list[int]:
        """The byte sizes of a step's all-reduces when they overlap backward (the DDP
        buckets; under tensor fusion the buffers of a step whose gradients all reach one
        cycle, as they do when the backward pass is short against the cycle)."""
        if self.fusion is None:
            return [b.nbytes for b in self.buckets]
        tensors = self.fusion.tensors
        return [b.nbytes for b, _ in self.fusion.buffers([0.0] * len(tensors), 0.0)]

    @property
    def label(self) -> str:
        """The ``detail`` of this strategy's all-reduce rows."""
        return f"all-reduce {self.algorithm}"

    def step_eval(self, step: int) -> tuple[float, str | None]:
        """Seconds some host evaluates before computing step ``step``, and which host."""
        del step
        return 0.0, None

    def compute(self, step: int) -> Generator[Any, Any, None]:
        eval_s, eval_host = self.step_eval(step)
        if self.overlapping:
            yield from self.overlapped_step(
                step,
                self.algorithm,
                self.label,
                self.buckets,
                eval_s=eval_s,
                eval_host=eval_host,
                fusion=self.fusion,
            )
        else:
            runner = ComputeThenMove(
                self,
                self.training_devices,
                step,
                self.algorithm,
                eval_s=eval_s,
                eval_host=eval_host,
                whole=None if self.compressed is None else self.compressed.whole,
            )
            yield from walk(self.step_plan, runner)

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """Nothing after the compute: the step's plan (:attr:`step_plan`) or the overlapped
        step has moved the gradient."""
        del step
        yield from ()

    @cached_property
    def step_plan(self) -> Plan:
        """A step without overlap: the compute, then :meth:`step_collectives` one after
        another (nothing with one replica; one group, the whole compressed gradient, under
        compression)."""
        if self.scenario.replicas == 1:
            moves = []
        elif self.compressed is not None:
            moves = [Collective("allreduce", self.costs.grad_nbytes, self.label)]
        else:
            moves = self.step_collectives()
        after = collectives_in_order(moves)
        return Plan(after.collectives, [Compute(0, "compute"), *after.program])

    def step_collectives(self) -> list[Collective]:
        """What moves after the compute when nothing overlaps it: one all-reduce of the
        gradient (multi_worker_mirrored: its packs), one after another."""
        return [Collective("allreduce", self.costs.grad_nbytes, self.label)]

    def reduce_group(
        self, devices: Sequence[Device], group: Bucket, algo: str, step: int, detail: str
    ) -> Any:
        """With compression: the compressor's compute on every replica, then the
        collectives of the compressed group, one after another (:mod:`.compression`)."""
        if self.compressed is None:
            return super().reduce_group(devices, group, algo, step, detail)
        return self.compressed.exchange(
            self.env, self.net, devices, group, algo, step=step, detail=detail
        )

    def summary(self) -> dict[str, Any]:
        return self.compression_summary()

    def compression_summary(self) -> dict[str, Any]:
        """The compressed step's bytes and compressor seconds (``{}`` without compression)."""
        return {} if self.compressed is None else self.compressed.summary()
