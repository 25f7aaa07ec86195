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
from simdist.recorder import Recorder


@dataclass(frozen=True)
class Costs:
    """Per-step quantities the engine measures once, before the clock starts."""

    compute_s: float  # one replica's forward + backward on its per-replica batch
    grad_nbytes: int  # bytes of one full gradient (= bytes of the parameters)
    flops_per_replica_step: float  # from XLA's cost analysis (0 when the time is fixed)
    total_steps: int  # training steps (sync) or applied gradients (async) to run
    param_leaves: tuple[tuple[str, tuple[int, ...], int], ...] = ()  # (path, shape, nbytes)


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

    def compute_s(self, device: Device, step: int) -> float:
        """Simulated time for ``device`` to compute its gradient of step ``step``."""
        del device, step
        return self.costs.compute_s

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
            self.recorder.event(
                start, start + seconds, device.host, device.name, "compute", 0, step
            )
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

    def record_comm(
        self, start_s: float, end_s: float, nbytes: float, step: int, detail: str
    ) -> None:
        """A collective occupied every training device from ``start_s`` to ``end_s``."""
        for device in self.training_devices:
            self.recorder.event(
                start_s, end_s, device.host, device.name, "comm", nbytes, step, detail
            )

    def process(self) -> Generator[Any, Any, None]:
        batch = self.examples_per_step
        for step in range(self.total_steps):
            start = self.env.now
            yield from self.compute_phase(step)
            yield from self.communicate(step)
            done = step + 1
            now = self.env.now
            self.recorder.metric(
                now, done, "examples_per_s", batch / (now - start) if now > start else math.inf
            )
            if self.trainer is not None:
                loss = self.trainer.step(step)
                self.recorder.metric(now, done, "train_loss", loss)
                if not math.isfinite(loss):
                    self.diverged_at = done
                    self.steps_done = done
                    return
                if self.eval_due(done):
                    self.evaluate(done, self.trainer.params)
            self.steps_done = done
            self.on_step(done)
