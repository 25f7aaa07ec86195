"""``central_storage``: variables on the host CPU, N devices on one host, synchronous.

As ``tf.distribute.experimental.CentralStorageStrategy``: the variables live in host
memory; each step every device fetches them over the host's intra-host link (PCIe),
computes its gradient on global_batch / N examples, and sends the gradient back over the
same link; the CPU sums the N gradients and applies one update. Numerically it is
mirrored (and so one_device with the global batch); only the timing differs.

Timing. Every fetch and push is a message (``net.send``) over the one shared link
(FIFO; only bytes / bandwidth occupies it, latency does not). Each device starts computing
as soon as its own fetch has arrived and pushes as soon as it has computed. With N
devices, S gradient bytes (= variable bytes), link latency α and bandwidth B, compute
time c and CPU reduce bandwidth B_cpu, fetch k holds the link during [(k−1)·S/B, k·S/B];
device k is ready to push at r_k = k·S/B + α + c; the pushes queue behind the fetches, so
the last one leaves the link at max(2N·S/B, c + α + (N+1)·S/B) and arrives α later. The
CPU then reads the N gradients once, N·S / B_cpu (the optimizer update itself is taken as
free, as in every simdist strategy):

    T_step = α + max(2N·S/B, c + α + (N+1)·S/B) + N·S/B_cpu

When the link is the bottleneck ((N−1)·S/B ≥ c + α) the step grows by 2·S/B + S/B_cpu
per added device: the link carries 2N·S bytes every step.

That is the ``sharing: fifo`` model. Under ``sharing: fair`` (the default) the N fetches
share the link and all arrive together at N·S/B + α, the devices compute together, and
the N pushes share it again:

    T_step = 2α + 2N·S/B + c + N·S/B_cpu

— later than FIFO by up to (N−1)·S/B − α when compute hides the queue, since processor
sharing delays the first arrival to the last one's time. Both closed forms assume equal
compute times; the simulation does not need it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from simdist.catalog import Execution
from simdist.spec import Bandwidth
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.sync import SynchronousStrategy

if TYPE_CHECKING:
    import simpy

    from simdist.hardware.cluster import Cluster, Device, Host
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario
    from simdist.step_costs import Costs


class Spec(StrategySpecBase):
    """Variables on the host CPU; devices fetch them and send gradients back.

    ``reduce_bandwidth`` is the rate at which the CPU streams the N gradients it sums;
    the default, 25.6GB/s, is one DDR4-3200 channel (3200 MT/s × 8 bytes, JEDEC JESD79-4).
    """

    kind: Literal["central_storage"]
    optimizer_on_device: ClassVar[bool] = False  # the host CPU applies the update
    execution: Execution = "auto"
    reduce_bandwidth_Bps: Bandwidth = Field(25.6e9, alias="reduce_bandwidth", examples=["25.6GB/s"])

    def off_device_memory(
        self, scenario: Scenario, costs: Costs, cluster: Cluster
    ) -> dict[str, dict]:
        """The host CPU holds the whole model in float32: the variables, the reduced
        gradient and the optimizer state."""
        from simdist.memory.accounting import float32_nbytes, host_held

        nbytes = float32_nbytes(costs, costs.param_nbytes)
        optimizer = scenario.workload.optimizer.name
        return {f"{cluster.workers[0].name}/host-cpu": host_held(nbytes, nbytes, optimizer)}

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of the one host."""
        return cluster.devices_per_host

    def check(self, scenario: Scenario) -> None:
        """One host (``hosts: 1``), no parameter-server tasks."""
        self.check_one_host(scenario)
        super().check(scenario)


def central_storage_step_s(
    n: int,
    nbytes: float,
    latency_s: float,
    bandwidth_Bps: float,
    compute_s: float,
    reduce_bandwidth_Bps: float,
    sharing: str = "fifo",
) -> float:
    """The step time the module docstring derives, for equal compute times."""
    wire = nbytes / bandwidth_Bps
    if sharing == "fair":
        return 2 * latency_s + 2 * n * wire + compute_s + n * nbytes / reduce_bandwidth_Bps
    pushed = max(2 * n * wire, compute_s + latency_s + (n + 1) * wire)
    return latency_s + pushed + n * nbytes / reduce_bandwidth_Bps


class CentralStorageStrategy(SynchronousStrategy):
    """One host: per-device fetch → compute → push over the shared PCIe, then a CPU reduce."""

    @property
    def host(self) -> Host:
        """The one host whose CPU holds the variables."""
        return self.cluster.workers[0]

    @property
    def reduce_s(self) -> float:
        """Seconds for the CPU to read the N gradients it sums."""
        n, spec = self.scenario.replicas, self.scenario.strategy
        return n * self.costs.grad_nbytes / spec.reduce_bandwidth_Bps

    def compute(self, step: int) -> Generator[Any, Any, None]:
        """Every device fetches, computes and pushes; the phase ends with the last push.

        Each device's fetch → compute → push is a chain of callbacks on its events, not a
        SimPy process: a process per device and step cost two SimPy events of its own (its
        start and its end) besides the waits. The chain keeps the process version's order
        to the event: every device starts in one urgent event, as the processes' urgent
        starts came one after another, and the last arrival ends the phase two events later,
        as the last process's end and then the ``all_of`` did.
        """
        # Not at import: validating a scenario loads no SimPy.
        from simdist.network.transfer import Countdown
        from simdist.sim import call_urgent

        env = self.env
        devices = self.training_devices
        pushed = [0.0] * len(devices)
        barrier = env.event()
        # The last push's arrival ends the phase two steps later, as the last process's
        # end and then the ``all_of`` did; the others are counted as they arrive.
        ended = env.event()
        ended.callbacks.append(lambda _: barrier.succeed())
        pushes = Countdown(ended, len(devices))
        net, host = self.net, self.host
        grad_nbytes, param_nbytes = self.costs.grad_nbytes, self.costs.param_nbytes
        wait = "waiting for the host link"

        def fetch(i: int, device: Device) -> None:
            def fetched(event: simpy.Event) -> None:
                seconds = self.compute_s(device, step)
                self.record_compute(device, event.value[1], seconds, step)
                env.timeout(seconds).callbacks.append(push)

            def push(_: simpy.Event) -> None:
                net.send(
                    device,
                    host,
                    grad_nbytes,
                    step=step,
                    detail="push gradient",
                    wait_detail=wait,
                    then=landed,
                ).countdown = pushes

            def landed() -> None:
                pushed[i] = env.now

            net.send(
                host, device, param_nbytes, step=step, detail="fetch variables", wait_detail=wait
            ).done.callbacks.append(fetched)

        def begin(_: simpy.Event) -> None:
            for i, device in enumerate(devices):
                fetch(i, device)

        call_urgent(env, begin)
        yield barrier
        record = self.recorder.event
        for device, end_s in zip(devices, pushed, strict=True):
            record(end_s, env.now, device.host, device.name, "idle", 0, step, "barrier")

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """The CPU sums the gradients (and applies them) while the devices wait."""
        start, end = self.env.now, self.env.now + self.reduce_s
        cpu = f"{self.host.name}/host-cpu"
        self.recorder.event(start, end, self.host.name, cpu, "apply", 0, step, "reduce + apply")
        self.record_devices(self.training_devices, start, end, "idle", step, "CPU update")
        yield self.env.timeout(self.reduce_s)

    def summary(self) -> dict[str, Any]:
        n, nbytes = self.scenario.replicas, self.costs.grad_nbytes
        # The host link: one shared link (intra_host: shared or nvlink's PCIe uplink), or
        # a PCIe tree whose shared uplink is the slowest link (intra_host: pcie).
        route = self.net.route(self.host, self.training_devices[0])
        link = min(route, key=lambda link: link.bandwidth_Bps)
        return {
            "host_link_bytes_per_step": n * (self.costs.param_nbytes + nbytes),
            "host_link_bandwidth_Bps": link.bandwidth_Bps,
            "cpu_reduce_s": self.reduce_s,
            "predicted_step_s": central_storage_step_s(
                n,
                nbytes,
                sum(hop.latency_s for hop in route),
                link.bandwidth_Bps,
                self.costs.compute_s,
                self.scenario.strategy.reduce_bandwidth_Bps,
                link.sharing,
            ),
        }
