"""The small interface every strategy implements, and the synchronous family's shared loop.

A strategy decides *what* moves and *which* update is applied.  How long a
computation or a transfer takes is asked of the cluster (devices, links) and
of the collectives module.  The numeric half of a synchronous strategy,
:class:`SyncTrainer`, runs without SimPy; the timing half runs without JAX when
the scenario turns numerics off.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, ClassVar

from simdist.cluster import Cluster, Device
from simdist.faults import FailureSchedule, InputPipeline, Stragglers
from simdist.recorder import Recorder


@dataclass(frozen=True)
class Costs:
    """Per-step quantities the engine measures once, before the clock starts."""

    compute_s: float  # one replica's forward + backward on its per-replica batch
    grad_nbytes: int  # bytes of one full gradient (= bytes of the parameters)
    flops_per_replica_step: float  # from XLA's cost analysis (0 when the time is fixed)
    total_steps: int  # training steps (sync) or applied gradients (async) to run
    param_leaves: tuple[tuple[str, tuple[int, ...], int], ...] = ()  # (path, shape, nbytes)
    opt_state_nbytes: int = 0  # bytes of the optimizer state (momentum, Adam moments, ...)
    example_nbytes: int = 0  # bytes of one input example, for the input pipeline's bandwidth

    @property
    def checkpoint_nbytes(self) -> int:
        """A checkpoint holds the parameters and the optimizer state."""
        return self.grad_nbytes + self.opt_state_nbytes


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
        self.params = workload.params
        self.opt_state = workload.init_opt_state(self.params)

    def gradients(self, step: int, params: Any) -> tuple[float, Any]:
        """Mean loss and summed gradient of global batch ``step`` at ``params``."""
        from simdist.numerics.data import shard

        x, y = self.workload.batches.batch(step, self.global_batch)
        if self.replicas == 1:
            loss, grads = self.workload.loss_and_grads(params, x, y, self.global_batch)
        else:
            xs, ys = shard(x, self.replicas), shard(y, self.replicas)
            loss, grads = self.workload.replica_grads(
                params, xs, ys, self.global_batch, self.execution
            )
        return float(loss), grads

    def step(self, step: int) -> float:
        """Run training step ``step`` in place; return its mean loss."""
        loss, grads = self.gradients(step, self.params)
        self.params, self.opt_state = self.workload.apply(self.params, self.opt_state, grads)
        return loss


class Strategy(ABC):
    """One tf.distribute-style strategy: a SimPy process that trains the workload."""

    kinds: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        scenario: Any,
        env: Any,
        cluster: Cluster,
        recorder: Recorder,
        workload: Any | None,
        costs: Costs,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.env = env
        self.cluster = cluster
        self.recorder = recorder
        self.workload = workload
        self.costs = costs
        self.on_step = on_step or (lambda step: None)
        self.total_steps = costs.total_steps
        self.steps_done = 0
        self.diverged_at: int | None = None
        self.stragglers = Stragglers(
            scenario.faults.stragglers, scenario.seed, cluster.devices_per_host
        )
        self._device_keys = {
            device.name: (h, device.index)
            for h, host in enumerate(cluster.workers)
            for device in host.devices
        }
        self.failures = 0
        self.lost_steps = 0
        self.time_lost_s = 0.0

    @classmethod
    def build_cluster(cls, env: Any, scenario: Any) -> Cluster:
        """The cluster this strategy runs on; tpu overrides it to lay out a torus."""
        return Cluster(env, scenario.cluster)

    @abstractmethod
    def process(self) -> Generator[Any, Any, None]:
        """The SimPy process that runs the whole training."""

    @property
    @abstractmethod
    def final_params(self) -> Any | None:
        """The parameters at the end of the run (None in timing-only mode)."""

    @property
    def examples_per_step(self) -> int:
        """Training examples whose gradient one step applies (the global batch, for sync)."""
        return self.scenario.global_batch

    @property
    def training_devices(self) -> list[Device]:
        """Devices that compute gradients, for the compute / comm / idle split."""
        return self.cluster.devices[: self.scenario.replicas]

    def summary(self) -> dict[str, Any]:
        """Strategy-specific figures merged into summary.json."""
        return {}

    def fault_summary(self) -> dict[str, Any]:
        """Failures and their cost, for summary.json."""
        return {
            "failures": self.failures,
            "lost_steps": self.lost_steps,
            "redone_steps": self.lost_steps,
            "time_lost_s": self.time_lost_s,
        }

    def record_devices(
        self,
        devices: list[Device],
        start_s: float,
        end_s: float,
        kind: str,
        step: int,
        detail: str = "",
        nbytes: float = 0,
    ) -> None:
        """Each of ``devices`` spent [start_s, end_s] in ``kind``."""
        for device in devices:
            self.recorder.event(
                start_s, end_s, device.host, device.name, kind, nbytes, step, detail
            )

    def end_step(
        self, start_s: float, done: int, loss: float | None, params: Callable[[], Any]
    ) -> bool:
        """Record finished step ``done``: throughput, its loss, an evaluation when due.

        ``loss`` is None in timing-only runs; ``params`` gives the parameters to
        evaluate (only called when an evaluation is due). Returns False when the
        loss is not finite: the run stops there and reports the divergence.
        """
        now = self.env.now
        rate = self.examples_per_step / (now - start_s) if now > start_s else math.inf
        self.recorder.metric(now, done, "examples_per_s", rate)
        self.steps_done = done
        if loss is not None:
            self.recorder.metric(now, done, "train_loss", loss)
            if not math.isfinite(loss):
                self.diverged_at = done
                return False
            if self.eval_due(done):
                self.evaluate(done, params())
        self.on_step(done)
        return True

    def compute_s(self, device: Device, step: int) -> float:
        """Simulated time for ``device`` to compute its gradient of step ``step``."""
        return self.costs.compute_s * self.slowdown(device, step)

    def slowdown(self, device: Device, step: int) -> float:
        """The straggler factor (>= 1) of ``device`` at ``step``."""
        if not self.stragglers:
            return 1.0
        host, local = self._device_keys[device.name]
        return self.stragglers.factor(host, local, step)

    def record_compute(self, device: Device, start_s: float, seconds: float, step: int) -> None:
        """A compute span, split into the normal part and the straggling excess."""
        base = min(self.costs.compute_s, seconds)
        self.recorder.event(start_s, start_s + base, device.host, device.name, "compute", 0, step)
        if seconds > base:
            self.recorder.event(
                start_s + base,
                start_s + seconds,
                device.host,
                device.name,
                "straggle",
                0,
                step,
                f"x{seconds / self.costs.compute_s:.3g}",
            )

    @property
    def load_s(self) -> float:
        """Seconds to load one replica's batch (0 without an ``input`` section)."""
        spec = self.scenario.input
        if spec is None:
            return 0.0
        batch = self.scenario.workload.batch_size
        if spec.per_example_s is not None:
            return batch * spec.per_example_s
        return batch * self.costs.example_nbytes / spec.bandwidth_Bps

    def new_pipeline(self) -> InputPipeline | None:
        """A fresh input loader starting now (after a restart its buffer is empty)."""
        spec = self.scenario.input
        if spec is None:
            return None
        return InputPipeline(self.load_s, spec.prefetch, self.env.now)

    @property
    def checkpoint_s(self) -> float:
        """Seconds to write (or read back) one checkpoint: bytes / storage bandwidth."""
        spec = self.scenario.checkpoint
        if spec is None:
            return 0.0
        return self.costs.checkpoint_nbytes / spec.storage_bandwidth_Bps

    def checkpoint_due(self, step: int, last_s: float) -> bool:
        """Whether a checkpoint is written after ``step`` (last one finished at ``last_s``)."""
        spec = self.scenario.checkpoint
        if spec is None:
            return False
        if spec.every_steps is not None:
            return step % spec.every_steps == 0
        return self.env.now - last_s >= spec.every_s

    def evaluate(self, step: int, params: Any) -> None:
        """Record test metrics at the current simulated time."""
        if self.workload is None:
            return
        for name, value in self.workload.evaluate(params).items():
            self.recorder.metric(self.env.now, step, name, value)

    def eval_due(self, step: int) -> bool:
        """Whether the (1-based) ``step`` just finished is an evaluation point."""
        every = self.scenario.workload.eval_every
        return step == self.total_steps or (every > 0 and step % every == 0)


class SynchronousStrategy(Strategy):
    """Lock-step training: all replicas compute, communicate, then apply one update.

    Subclasses say what moves between compute and apply (:meth:`communicate`).
    The step ends when the slowest replica has finished (max rule), so a
    straggler's extra time shows up as idle time on every other device.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trainer: SyncTrainer | None = None
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

    @property
    def final_params(self) -> Any | None:
        return None if self.trainer is None else self.trainer.params

    @abstractmethod
    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """Move this step's gradients (and parameters) between devices; record comm events."""

    def compute_phase(self, step: int) -> Generator[Any, Any, None]:
        """Every replica computes in parallel; the phase lasts as long as the slowest."""
        env, start = self.env, self.env.now
        durations = [(d, self.compute_s(d, step)) for d in self.training_devices]
        longest = max(seconds for _, seconds in durations)
        for device, seconds in durations:
            self.record_compute(device, start, seconds, step)
            self.recorder.event(
                start + seconds,
                start + longest,
                device.host,
                device.name,
                "idle",
                0,
                step,
                "barrier",
            )
        yield env.timeout(longest)

    def input_phase(self, step: int, pipeline: InputPipeline | None) -> Generator[Any, Any, None]:
        """Wait for this step's batch when loading has not kept up (``input_wait``)."""
        if pipeline is None:
            return
        now = self.env.now
        ready = pipeline.take(now)
        if ready > now:
            self.record_all(now, ready, "input_wait", step)
            yield self.env.timeout(ready - now)

    def record_all(
        self, start_s: float, end_s: float, kind: str, step: int, detail: str = ""
    ) -> None:
        """Every training device spent [start_s, end_s] in ``kind``."""
        self.record_devices(self.training_devices, start_s, end_s, kind, step, detail)

    def record_comm(
        self, start_s: float, end_s: float, nbytes: float, step: int, detail: str
    ) -> None:
        """A collective occupied every training device from ``start_s`` to ``end_s``."""
        self.record_devices(self.training_devices, start_s, end_s, "comm", step, detail, nbytes)

    @property
    def chief_devices(self) -> list[Device]:
        """The devices of worker 0, the chief, which writes checkpoints and summaries."""
        chief = self.cluster.workers[0].name
        return [d for d in self.training_devices if d.host == chief]

    def write_checkpoint(self, step: int) -> Generator[Any, Any, None]:
        """The chief writes parameters + optimizer state; everyone waits (synchronous)."""
        start, seconds = self.env.now, self.checkpoint_s
        chief = set(self.chief_devices)
        for device in self.training_devices:
            kind, detail = ("checkpoint", "write") if device in chief else ("idle", "checkpoint")
            self.recorder.event(
                start,
                start + seconds,
                device.host,
                device.name,
                kind,
                self.costs.checkpoint_nbytes if device in chief else 0,
                step,
                detail,
            )
        yield self.env.timeout(seconds)

    def _failed_host(self, spec: Any) -> str:
        if spec.role == "worker":
            return self.cluster.workers[spec.index].name
        return self.training_devices[spec.index].host

    def recover(
        self, failed_s: float, spec: Any, step: int, saved: tuple[int, Any, Any, float, bool]
    ) -> Generator[Any, Any, None]:
        """Stop, restart the failed task, restore the last checkpoint (time and numerics).

        The surviving replicas notice the failure at the step's collective, i.e.
        when the step in progress would have ended (now); its work is lost with
        every step since the checkpoint, which are then redone.
        """
        saved_step, params, opt_state, saved_s, written = saved
        host = self._failed_host(spec)
        now = self.env.now
        self.recorder.event(failed_s, now, host, host, "failure", 0, step, spec.target)
        restart_s = spec.restart_s
        restore_s = self.checkpoint_s if written else 0.0
        self.record_all(now, now + restart_s, "restart", step, spec.target)
        self.record_all(
            now + restart_s,
            now + restart_s + restore_s,
            "restore",
            saved_step,
            f"checkpoint of step {saved_step}" if written else "initial state",
        )
        self.failures += 1
        self.lost_steps += step + 1 - saved_step
        self.time_lost_s += (now - saved_s) + restart_s + restore_s
        yield self.env.timeout(restart_s + restore_s)
        if self.trainer is not None:
            self.trainer.params, self.trainer.opt_state = params, opt_state

    def _snapshot(self, step: int, written: bool) -> tuple[int, Any, Any, float, bool]:
        if self.trainer is None:
            return step, None, None, self.env.now, written
        return step, self.trainer.params, self.trainer.opt_state, self.env.now, written

    def process(self) -> Generator[Any, Any, None]:
        failures = FailureSchedule(
            self.scenario.faults.failures, self.scenario.seed, ("worker", "device")
        )
        pipeline = self.new_pipeline()
        saved = self._snapshot(0, written=False)  # no checkpoint yet: restart from scratch
        step = 0
        while step < self.total_steps:
            start = self.env.now
            yield from self.input_phase(step, pipeline)
            yield from self.compute_phase(step)
            yield from self.communicate(step)
            done = step + 1
            checkpoint = self.checkpoint_due(done, saved[3])
            if checkpoint:
                yield from self.write_checkpoint(done)
            hit = failures.pop_before(self.env.now)
            if hit is not None:
                yield from self.recover(hit[0], hit[1], step, saved)
                failures.skip_until(self.env.now)
                pipeline = self.new_pipeline()
                step = saved[0]
                continue
            loss = self.trainer.step(step) if self.trainer is not None else None
            if not self.end_step(start, done, loss, lambda: self.final_params):
                return
            if checkpoint:
                saved = self._snapshot(done, written=True)
            step = done
