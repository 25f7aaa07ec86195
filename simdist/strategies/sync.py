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
from collections.abc import Generator
from typing import Any, NamedTuple

from simdist.faults import FailureSchedule
from simdist.strategies.base import Strategy


class SyncState(NamedTuple):
    """The parameters every replica holds and the optimizer state that updates them."""

    params: Any
    opt_state: Any


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
    """``auto`` → ``devices`` when enough real accelerators exist, else ``batched``."""
    if requested != "auto":
        return requested
    import jax

    if jax.default_backend() != "cpu" and jax.device_count() >= replicas:
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

    def __init__(self, workload: Any, replicas: int, per_replica_batch: int, execution: str):
        self.workload = workload
        self.replicas = replicas
        self.global_batch = replicas * per_replica_batch
        self.execution = execution

    def init(self) -> SyncState:
        """The state before the first step: the workload's initial parameters."""
        params = self.workload.params
        return SyncState(params, self.workload.init_opt_state(params))

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        return self.workload.batches.batch(step, self.global_batch)

    def gradients(self, params: Any, batch: tuple[Any, Any]) -> tuple[float, Any]:
        """Mean loss and summed gradient of ``batch`` at ``params``."""
        from simdist.numerics.data import shard

        x, y = batch
        if self.replicas == 1:
            loss, grads = self.workload.loss_and_grads(params, x, y, self.global_batch)
        else:
            xs, ys = shard(x, self.replicas), shard(y, self.replicas)
            loss, grads = self.workload.replica_grads(
                params, xs, ys, self.global_batch, self.execution
            )
        return float(loss), grads

    def update(self, state: SyncState, batch: tuple[Any, Any]) -> tuple[SyncState, float]:
        """One training step on ``batch``: the new state and the step's mean loss."""
        loss, grads = self.gradients(state.params, batch)
        params, opt_state = self.workload.apply(state.params, state.opt_state, grads)
        return SyncState(params, opt_state), loss


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
            execution = resolve_execution(
                getattr(self.scenario.strategy, "execution", "batched"), self.scenario.replicas
            )
            self.trainer = SyncTrainer(
                self.workload,
                self.scenario.replicas,
                self.scenario.workload.batch_size,
                execution,
            )
            self.state = self.trainer.init()

    @property
    def final_params(self) -> Any | None:
        return None if self.state is None else self.state.params

    @abstractmethod
    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """Move this step's gradients (and parameters) between devices."""

    def compute(self, step: int) -> Generator[Any, Any, None]:
        """Every replica computes its gradient of step ``step``."""
        yield from self.compute_phase(self.training_devices, step)

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

    def _failed_host(self, spec: Any) -> str:
        if spec.role == "worker":
            return self.cluster.workers[spec.index].name
        return self.training_devices[spec.index].host

    def recover(
        self, failed_s: float, spec: Any, step: int, saved: Checkpoint
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
        step = 0
        while step < self.total_steps:
            start = self.env.now
            yield from self.input_wait(self.training_devices, pipeline, step)
            yield from self.compute(step)
            yield from self.communicate(step)
            done = step + 1
            checkpoint = self.checkpoint_due(done, saved.saved_s)
            if checkpoint:
                yield from self.write_checkpoint(done)
            hit = failures.pop_before(self.env.now)
            if hit is not None:
                yield from self.recover(hit[0], hit[1], step, saved)
                failures.skip_until(self.env.now)
                pipeline = self.new_pipeline()
                step = saved.step
                continue
            loss = None
            if self.trainer is not None and self.state is not None:
                self.state, loss = self.trainer.update(self.state, self.trainer.batch(step))
            if not self.end_step(start, done, loss, lambda: self.final_params):
                return
            if checkpoint:
                saved = Checkpoint(done, self.state, self.env.now, written=True)
            step = done
