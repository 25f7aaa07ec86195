"""The small interface every strategy implements, and what all strategies share.

A strategy decides *what* moves and *which* update is applied. How long a
computation takes is the device's (:attr:`Costs.compute_s` × its variability
factor × the straggler factor); how long bytes take is the network's
(:mod:`simdist.network`), which also records them. The numeric half of a strategy
runs without SimPy; its timing half runs without JAX (``workload=None``, hand-made
:class:`~simdist.step_costs.Costs`).

Light on purpose: importing a strategy module (to read its scenario ``Spec``)
imports neither SimPy, JAX nor pandas.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from simdist.hardware.faults import InputPipeline, Stragglers
from simdist.hardware.mesh import Mesh
from simdist.hardware.variability import Variability
from simdist.step_costs import Costs
from simdist.strategies.reserved_rows import ReservedStep, reserve_step
from simdist.strategies.spans import DeviceSpans

if TYPE_CHECKING:
    import simpy

    from simdist.batched_runs import DeferredRun
    from simdist.hardware.cluster import Cluster, Device
    from simdist.network import Network
    from simdist.numerics.executor import Workload
    from simdist.runtime.recorder import Recorder
    from simdist.scenario.schema import Scenario


class Replayed(NamedTuple):
    """A run found to diverge, for its second pass: it stops where training diverged.

    Passed to the strategy in place of the workload (``engine.simulate``'s
    ``workload``, unwrapped by :class:`Strategy`), which sets ``stop_at`` to ``cut``.
    Its meaning is the strategy's: parameter_server counts the shards applied
    before the first whose gradient's loss is not finite (the dataflow replay
    finds it after the simulation); the synchronous loop, the step whose loss was
    not finite (found one step late, see :meth:`Strategy.end_step`).
    """

    workload: Workload
    cut: int


def _first_devices(counts: Sequence[int]) -> list[int]:
    """The global index of each host's first device, for hosts holding ``counts`` devices."""
    firsts, total = [], 0
    for n in counts:
        firsts.append(total)
        total += n
    return firsts


class Strategy(DeviceSpans, ABC):
    """One tf.distribute-style strategy: a SimPy process that trains the workload."""

    #: The network topology this strategy's cluster is wired as (see simdist.network).
    topology: ClassVar[str] = "switch"
    #: Seconds after an evaluation point at which its test metrics are stamped.
    eval_delay_s: float = 0.0
    #: Whether the caller simulates the run again when ``rerun_with`` is set after it
    #: (``engine.simulate`` and ``jobs.simulate_jobs`` do). A driver that cannot sets it
    #: False: synchronous losses are then read at once, so no divergence is found late.
    may_rerun: bool = True

    def __init__(
        self,
        scenario: Scenario,
        env: simpy.Environment,
        cluster: Cluster,
        network: Network,
        recorder: Recorder,
        workload: Workload | Replayed | None,
        costs: Costs,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.env = env
        self.cluster = cluster
        self.net = network
        self.recorder = recorder
        # A second pass of a run found to diverge gets the workload wrapped (Replayed).
        self.stop_at: int | None = None
        if isinstance(workload, Replayed):
            self.stop_at, workload = workload.cut, workload.workload
        self.workload = workload
        self.rerun_with: Replayed | None = None  # set when a divergence is found late
        #: Set by the engine before the run when this run's numerics are to be computed
        #: with other runs' (:func:`simdist.runtime.engine.run_batch`; see :meth:`defers`).
        self.defer = False
        #: What a deferring run leaves for its numerics (:class:`simdist.batched_runs.DeferredRun`).
        self.deferred_run: DeferredRun | None = None
        #: A deferring run's metric rows left for its values, step by step (reserved_rows.py).
        self.reserved_steps: list[ReservedStep] = []
        self._pending_loss: tuple[int, int, Any] | None = None  # (metric row, step, loss)
        self.costs = costs
        self.on_step = on_step or (lambda step: None)
        self.total_steps = costs.total_steps
        self.steps_done = 0
        self.diverged_at: int | None = None
        self.stragglers = Stragglers(
            scenario.faults.stragglers, scenario.seed, cluster.devices_per_host
        )
        if len(set(cluster.device_counts)) > 1:
            self.stragglers.first_device = _first_devices(cluster.device_counts)
        hosts = range(len(cluster.workers))
        own = [scenario.cluster.host_device(h).variability for h in hosts]
        self.variability = Variability(
            [(spread.step, spread.device) for spread in own],
            scenario.seed,
            classes=[host.devices[0].profile if host.devices else "" for host in cluster.workers],
            devices=[len(host.devices) for host in cluster.workers],
        )
        self._device_keys = {
            device.name: (h, device.index)
            for h, host in enumerate(cluster.workers)
            for device in host.devices
        }
        self._class_costs: dict[str, Costs] = {}
        self.failures = 0
        self.lost_steps = 0
        self.time_lost_s = 0.0

    @abstractmethod
    def process(self) -> Generator[Any, Any, None]:
        """The SimPy process that runs the whole training."""

    def optimizer_step_s(
        self, device: Device, share: float = 1.0, shards: int | None = None
    ) -> float:
        """Seconds of ``device``'s optimizer step: its class's whole-replica step
        (:attr:`Costs.optimizer_step_s`) for ``share`` of the parameters (a pipeline
        stage's) split over ``shards`` devices (default the spec's optimizer sharding)."""
        whole = self.device_costs(device).optimizer_step_s
        if whole <= 0:
            return 0.0
        if shards is None:
            shards = self.scenario.strategy.sharding(self.scenario.cluster).optimizer
        return whole * share / shards

    def optimizer_step(
        self, devices: Sequence[Device], step: int, seconds: Sequence[float] | None = None
    ) -> Generator[Any, Any, None]:
        """Every device of ``devices`` runs its optimizer step (``seconds`` each, default
        :meth:`optimizer_step_s`); the step ends when the slowest has."""
        if seconds is None:
            seconds = [self.optimizer_step_s(d) for d in devices]
        longest = max(seconds, default=0.0)
        if longest <= 0:
            return
        start = self.env.now
        if len(set(seconds)) == 1:
            self.record_devices(devices, start, start + longest, "apply", step, "optimizer step")
        else:
            for device, s in zip(devices, seconds, strict=True):
                self.record_devices([device], start, start + s, "apply", step, "optimizer step")
        yield self.env.timeout(longest)

    def defers(self) -> bool:
        """Whether this run can leave its numerics for later (``self.defer``), to be
        computed with other runs' (:mod:`simdist.batched_runs`). None can by default."""
        return False

    @property
    @abstractmethod
    def final_params(self) -> Any | None:
        """The parameters at the end of the run (None in timing-only mode)."""

    @property
    def examples_per_step(self) -> int:
        """Training examples whose gradient one step applies (the global batch, for sync)."""
        return self.scenario.global_batch

    def build_mesh(self) -> Mesh[Device]:
        """This strategy's device mesh: by default one ``data`` axis of ``replicas`` devices,
        the cluster's first (data parallelism; one replica for one_device)."""
        return Mesh.of(self.cluster.devices, {"data": self.scenario.replicas})

    @cached_property
    def mesh(self) -> Mesh[Device]:
        """The devices this strategy trains on, on named axes (:mod:`simdist.hardware.mesh`)."""
        return self.build_mesh()

    @cached_property
    def training_devices(self) -> list[Device]:
        """Devices that compute gradients, for the compute / comm / idle split: the replica
        group (the mesh's data axis).

        One list for the whole run (read-only): a step asks for it several times, and the
        network remembers what it worked out for a collective over this very list.
        """
        return list(self.mesh.groups("data")[0])

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

    # -- compute -------------------------------------------------------------

    def device_costs(self, device: Device) -> Costs:
        """The costs as ``device`` computes them: its own class's compute time and layers
        on a mixed cluster (a V100 and an A100 take different times for the same batch)."""
        if not self.costs.per_profile:  # homogeneous: one class, the costs as measured
            return self.costs
        label = device.profile
        if label not in self._class_costs:
            self._class_costs[label] = self.costs.for_profile(label)
        return self._class_costs[label]

    def compute_s(self, device: Device, step: int) -> float:
        """Simulated time for ``device`` to compute its gradient of step ``step``."""
        costs = self.costs if not self.costs.per_profile else self.device_costs(device)
        seconds = costs.compute_s
        if self.variability:
            seconds *= self.pace(device, step)
        if self.stragglers:
            seconds *= self.slowdown(device, step)
        return seconds

    def pace(self, device: Device, step: int) -> float:
        """How many times its class's nominal time ``device`` takes at ``step`` without
        stragglers: its step-time variability factor (mean 1; 1.0 when it is off)."""
        if not self.variability:
            return 1.0
        host, local = self._device_keys[device.name]
        return self.variability.factor(host, local, step)

    def slowdown(self, device: Device, step: int) -> float:
        """The straggler factor (>= 1) of ``device`` at ``step``."""
        if not self.stragglers:
            return 1.0
        host, local = self._device_keys[device.name]
        return self.stragglers.factor(host, local, step)

    def compute_phase(
        self,
        devices: Sequence[Device],
        step: int,
        *,
        eval_s: float = 0.0,
        eval_host: str | None = None,
    ) -> Generator[Any, Any, None]:
        """``devices`` compute in parallel; the phase lasts as long as the slowest (max rule).

        Devices of ``eval_host`` first evaluate for ``eval_s`` (the chief writing
        summaries). Each device records ``eval``, ``compute`` (+ ``straggle``)
        and an ``idle: barrier`` until the slowest is done. A failure that
        interrupts the phase cuts the spans at that moment.
        """
        start = self.env.now
        # Every device computing its normal time from ``start`` (the common case) records
        # one ``compute`` row each, with the times the plan below would give.
        uniform = not (
            self.stragglers or self.variability or self.costs.per_profile or (eval_s and eval_host)
        )
        plan = [
            (d, eval_s if d.host == eval_host else 0.0, self.compute_s(d, step))
            for d in (() if uniform else devices)
        ]
        longest = self.costs.compute_s if uniform else max(o + s for _, o, s in plan)
        try:
            yield self.env.timeout(longest)
        finally:
            now = self.env.now
            if now >= start + longest and uniform:
                self.record_devices(devices, start, start + longest, "compute", step)
            elif now >= start + longest and len(devices) >= self.recorder.BLOCK_MIN_ROWS:
                self._record_phase(devices, plan, start, longest, step)
            elif now >= start + longest:  # a few devices: the same rows, without NumPy
                for d, offset, seconds in plan:
                    self._record_device_phase(d, start, offset, seconds, start + longest, step)
            else:
                plan = plan or [(d, 0.0, self.costs.compute_s) for d in devices]
                event = self.recorder.event
                for d, offset, seconds in plan:
                    begin = min(start + offset, now)
                    done, end = min(begin + seconds, now), min(start + longest, now)
                    event(start, begin, d.host, d.name, "eval", 0, step, "chief")
                    self.record_compute(d, begin, done - begin, step)
                    event(done, end, d.host, d.name, "idle", 0, step, "barrier")

    def input_wait(
        self, devices: Sequence[Device], pipeline: InputPipeline | None, step: int
    ) -> Generator[Any, Any, None]:
        """Wait for this step's batch when loading has not kept up (``input_wait``)."""
        if pipeline is None:
            return
        now = self.env.now
        ready = pipeline.take(now)
        if ready > now:
            try:
                yield self.env.timeout(ready - now)
            finally:
                self.record_devices(devices, now, self.env.now, "input_wait", step)

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

    # -- checkpoints ---------------------------------------------------------

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

    # -- end of a step -------------------------------------------------------

    def end_step(
        self, start_s: float, done: int, loss: Any | None, params: Callable[[], Any]
    ) -> bool:
        """Record finished step ``done``: throughput, its loss, an evaluation when due.

        ``loss`` is None in timing-only runs; ``params`` gives the parameters to
        evaluate (only called when an evaluation is due). Returns False when the
        loss is not finite: the run stops there and reports the divergence.

        ``loss`` may be a device scalar still being computed. Then, away from
        evaluation points and the last step, it is not waited for: its metric row
        is filled in at the next step's end, so the simulation of the next step
        runs while the device computes (the clock of a synchronous step does not
        depend on values). Should that loss turn out not to be finite, the run is
        one step past its divergence: it stops, and the engine simulates it again
        with ``stop_at`` set to that step, waiting for every loss up to it
        (:class:`Replayed`), so the report is the one of a run that stopped there.
        """
        if not self.settle_loss():
            return False
        now = self.env.now
        rate = self.examples_per_step / (now - start_s) if now > start_s else math.inf
        self.recorder.metric(now, done, "examples_per_s", rate)
        self.steps_done = done
        if loss is not None:
            if self.defer:  # its values come later, computed with other runs' (run_batch)
                delay = self.evaluation_delay(done)
                stamp = None if delay is None else now + delay
                reserved = reserve_step(self.recorder, self.workload, now, done, stamp)
                self.reserved_steps.append(reserved)
                self.on_step(done)
                return True
            if (
                self.may_rerun
                and self.stop_at is None
                and not isinstance(loss, float)
                and done != self.total_steps
                and not self.eval_due(done)
            ):
                row = self.recorder.metric_later(now, done, "train_loss")
                self._pending_loss = (row, done, loss)
                self.on_step(done)
                return True
            loss = float(loss)
            self.recorder.metric(now, done, "train_loss", loss)
            if not math.isfinite(loss):
                self.diverged_at = done
                return False
            delay = self.evaluation_delay(done)
            if delay is not None:
                self.evaluate(done, params(), delay_s=delay)
        self.on_step(done)
        return True

    def evaluation_delay(self, done: int) -> float | None:
        """Seconds from the end of step ``done`` to the stamp of its evaluation, None when it
        has none: ``eval_delay_s`` at an evaluation point (:meth:`eval_due`), 0 for the free
        final evaluation of ``eval_every: 0``."""
        if self.eval_due(done):
            return self.eval_delay_s
        if done == self.total_steps and self.scenario.workload.eval_every == 0:
            return 0.0
        return None

    def settle_loss(self) -> bool:
        """Wait for the loss :meth:`end_step` left pending and record it; False when it is
        not finite (``rerun_with`` then asks for a second pass stopping at its step)."""
        if self._pending_loss is None:
            return True
        row, step, loss = self._pending_loss
        self._pending_loss = None
        value = float(loss)
        self.recorder.fill_metric(row, value)
        if math.isfinite(value):
            return True
        self.rerun_with = Replayed(self.workload, step)
        return False

    def evaluate(self, step: int, params: Any, *, delay_s: float | None = None) -> None:
        """Record test metrics, stamped ``delay_s`` (default ``eval_delay_s``) from now: when
        the evaluator is done. ``delay_s=0``: an evaluation that costs no simulated time."""
        if self.workload is None:
            return
        stamp = self.env.now + (self.eval_delay_s if delay_s is None else delay_s)
        for name, value in self.workload.evaluate(params).items():
            self.recorder.metric(stamp, step, name, value)

    def eval_due(self, step: int) -> bool:
        """Whether the (1-based) ``step`` just finished is an evaluation point, which the
        simulated clock pays for (the chief's evaluation in multi_worker_mirrored).

        Every ``eval_every`` steps and after the last step; never with ``eval_every: 0``,
        which charges no evaluation at all: the final parameters are still evaluated once
        (with numerics), for free, as if offline after training, so the summary keeps its
        final accuracy (:meth:`end_step`).
        """
        every = self.scenario.workload.eval_every
        return every > 0 and (step == self.total_steps or step % every == 0)
