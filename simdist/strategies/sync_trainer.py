"""The numeric half of the synchronous family: its state, its checkpoints and its trainer.

Optax-style: an immutable :class:`SyncState` and a pure ``state, loss = trainer.update(state,
batch)``; a :class:`Checkpoint` is a named snapshot of it. No SimPy. The training loop that
drives it is :mod:`simdist.strategies.sync`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from simdist.errors import SimdistError

if TYPE_CHECKING:
    from simdist.numerics.compression import Compression
    from simdist.numerics.executor import Workload
    from simdist.numerics.sync_step import SyncStep


class SyncState(NamedTuple):
    """The parameters every replica holds, the optimizer state that updates them, and the
    model state (BatchNormalization's moving statistics; ``{}`` for models without any).

    TF keeps a copy of each moving statistic per replica (``synchronization=ON_READ``,
    ``aggregation=MEAN``) and reads their mean; the update being linear, the one copy
    kept here, updated with the replicas' mean batch moments, is that mean.
    """

    params: Any
    opt_state: Any
    model_state: Any
    #: Gradient compression's per-replica residuals and warm starts
    #: (:class:`~simdist.numerics.compression.CompressionState`); None without compression.
    compression: Any = None


class Checkpoint(NamedTuple):
    """What a restore puts back: the state after ``step`` steps, saved at ``saved_s``.

    ``written`` is False for the implicit checkpoint of the initial state, which
    costs nothing to restore; ``state`` is None in timing-only runs.
    """

    step: int
    state: SyncState | None
    saved_s: float
    written: bool


def resolve_execution(requested: str, replicas: int) -> str:
    """``auto`` → ``devices`` when enough real accelerators exist, else ``batched``.

    ``devices`` with fewer JAX devices than replicas is refused here, before the first
    step (:func:`~simdist.numerics.device_allreduce.device_shortfall`).
    """
    if requested == "batched":
        return requested
    from simdist.numerics.device_allreduce import (
        device_shortfall,
        replica_backend,
        replica_devices,
    )

    backend, available = replica_backend(), len(replica_devices())
    if requested == "devices":
        shortfall = device_shortfall(backend, available, replicas)
        if shortfall is not None:
            raise SimdistError(shortfall)
        return requested

    if backend != "cpu" and available >= replicas:
        return "devices"
    return "batched"


class SyncTrainer:
    """N replicas compute gradients of one global batch; every replica applies the sum.

    Step ``k`` uses global batch ``k`` of the data order, split into N
    contiguous shards, so N replicas × batch b see exactly the examples one
    device sees with batch N·b.  The loss of each replica is its summed
    per-example loss divided by the *global* batch (``tf.nn.compute_average_loss``),
    so the summed gradient is the gradient of the global mean loss.
    """

    def __init__(
        self,
        workload: Workload,
        replicas: int,
        per_replica_batch: int,
        execution: str,
        compression: Compression | None = None,
        seed: int = 0,
    ) -> None:
        self.workload = workload
        self.replicas = replicas
        self.global_batch = replicas * per_replica_batch
        self.execution = execution
        self.compression = compression
        self.seed = seed
        self._compressed: Any = None

    def init(self) -> SyncState:
        """The state before the first step: the workload's initial parameters and state
        (and, with compression, zero residuals and PowerSGD's seeded Q)."""
        params = self.workload.params
        comp = None
        if self.compression is not None:
            from simdist.seeds import stream

            comp = self.compression.init(params, self.replicas, stream(self.seed, "compression"))
        return SyncState(
            params, self.workload.init_opt_state(params), self.workload.model_state, comp
        )

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        return self.workload.batches.batch(step, self.global_batch)

    def gradients(self, params: Any, batch: tuple[Any, Any]) -> tuple[Any, Any, Any]:
        """Mean loss, summed gradient and the replicas' mean batch moments of ``batch``.

        The loss is a device scalar, not waited for (see :meth:`dispatch`)."""
        from simdist.numerics.data import shard

        x, y = batch
        if self.replicas == 1:
            loss, grads, moments = self.workload.loss_and_grads(
                params, x, y, self.global_batch, with_moments=True
            )
        else:
            xs, ys = shard(x, self.replicas), shard(y, self.replicas)
            loss, grads, moments = self.workload.replica_grads(
                params, xs, ys, self.global_batch, self.execution, with_moments=True
            )
        return loss, grads, moments

    def update(self, state: SyncState, batch: tuple[Any, Any]) -> tuple[SyncState, float]:
        """One training step on ``batch``: the new state and the step's mean loss."""
        state, loss = self.dispatch(state, batch)
        return state, float(loss)

    def dispatch(self, state: SyncState, batch: tuple[Any, Any]) -> tuple[SyncState, Any]:
        """:meth:`update` without waiting for the device: the loss is a device scalar.

        JAX dispatches asynchronously, so the caller (the simulation of the next
        step) runs while the device computes this one; reading the loss waits.
        A run alone is one lane of :meth:`step`.
        """
        (state,), (loss,) = self.step([state], [batch])
        return state, loss

    @property
    def lanes(self) -> SyncStep:
        """This trainer's step programs (:class:`~simdist.numerics.sync_step.SyncStep`),
        shared by every trainer of the same programs: the seeds of one scenario."""
        from simdist.numerics.sync_step import SyncStep

        key = ("sync_step", self.global_batch, self.replicas, self.execution)
        return self.workload.shared_program(key, lambda: SyncStep(self.workload, self.gradients))

    def step(
        self, states: Sequence[SyncState], batches: Sequence[tuple[Any, Any]]
    ) -> tuple[list[SyncState], list[Any]]:
        """One step of each of ``len(states)`` runs whose trainers share this one's programs
        (a run alone: one): each run's new state and its loss (device scalars, not waited
        for), every part a program over the runs' lanes (:class:`SyncStep`).

        The gradients of a real all-reduce across devices (``execution: devices``) or of
        compressed replicas are computed outside the lanes, one run at a time."""
        lanes = self.lanes
        params = tuple(state.params for state in states)
        if self.compression is None and self.execution == "batched":
            out = lanes.gradients(params, tuple(batches))
            comps = [state.compression for state in states]
        else:
            (state,), (batch,) = states, batches
            if self.compression is None:
                out, comps = (self.gradients(state.params, batch),), [None]
            else:
                *grads, comp = self.compressed_gradients(state.params, state.compression, batch)
                out, comps = (tuple(grads),), [comp]
        applied = lanes.apply(
            params,
            tuple(state.opt_state for state in states),
            tuple(o[1] for o in out),
            (lanes.scale,) * len(states),
        )
        model_states = tuple(state.model_state for state in states)
        if lanes.update is not None:
            model_states = lanes.update(model_states, tuple(o[2] for o in out))
        new = [
            SyncState(p, o, m, c) for (p, o), m, c in zip(applied, model_states, comps, strict=True)
        ]
        return new, [o[0] for o in out]

    def compressed_gradients(
        self, params: Any, comp: Any, batch: tuple[Any, Any]
    ) -> tuple[Any, Any, Any, Any]:
        """:meth:`gradients` with each replica's gradient compressed before the sum: mean
        loss, the sum of the decompressed gradients, mean moments, the new compression state.

        The replicas run as one ``vmap`` (``batched``) whatever ``execution`` says: the
        compressors see every replica's gradient, as each rank does its own."""
        from simdist.numerics.compression import compressed_replica_step
        from simdist.numerics.data import shard

        if self._compressed is None:
            self._compressed = compressed_replica_step(
                self.workload, self.global_batch, self.compression
            )
        x, y = batch
        return self._compressed(params, comp, shard(x, self.replicas), shard(y, self.replicas))
