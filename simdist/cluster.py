"""Hosts, devices, device profiles and links: the hardware a scenario runs on.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import simpy

from simdist.errors import SimdistError


@dataclass(frozen=True)
class DeviceProfile:
    """Peak arithmetic rate of one device and the share of it a training step reaches."""

    name: str
    kind: str  # "cpu" | "gpu" | "tpu"
    peak_flops: float  # FLOP/s
    efficiency: float  # fraction of peak reached by a training step
    source: str


DEVICE_PROFILES: dict[str, DeviceProfile] = {
    # 4 cores x 3 GHz x 32 FP32 FLOP/cycle (two AVX2 FMA units x 8 lanes x 2),
    # Intel 64 and IA-32 Architectures Optimization Reference Manual, ch. 2.
    "cpu": DeviceProfile("cpu", "cpu", 384e9, 0.3, "4 cores x 3 GHz x 32 FLOP/cycle (AVX2 FMA)"),
    # NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s single precision.
    "v100": DeviceProfile("v100", "gpu", 15.7e12, 0.4, "NVIDIA V100 SXM2 datasheet, FP32"),
    # NVIDIA A100 datasheet: 19.5 TFLOP/s FP32 (non-tensor-core).
    "a100": DeviceProfile("a100", "gpu", 19.5e12, 0.4, "NVIDIA A100 datasheet, FP32"),
    # NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32.
    "h100": DeviceProfile("h100", "gpu", 67e12, 0.4, "NVIDIA H100 SXM datasheet, FP32"),
    # Google Cloud TPU v4 documentation: 275 TFLOP/s peak (bf16) per chip.
    "tpu-v4": DeviceProfile("tpu-v4", "tpu", 275e12, 0.5, "Cloud TPU v4 docs, bf16 per chip"),
}


class Link:
    """A channel with a latency and a bandwidth that carries one transfer at a time.

    Cost follows the alpha–beta (Hockney) model, ``latency_s + nbytes / bandwidth_Bps``.
    A transfer or collective takes all the links it needs at once, when all are free
    (:class:`LinkArbiter`), so transfers that want a link at the same time serialise:
    contention on a shared NIC or PCIe bus appears without special cases. ``busy_s`` adds
    up the simulated time the link was held, for utilisation reports.
    """

    def __init__(
        self, env: simpy.Environment, name: str, latency_s: float, bandwidth_Bps: float
    ) -> None:
        if latency_s < 0 or not math.isfinite(latency_s):
            raise ValueError(f"link {name}: latency_s must be finite and >= 0, got {latency_s}")
        if bandwidth_Bps <= 0 or math.isnan(bandwidth_Bps):
            raise ValueError(f"link {name}: bandwidth_Bps must be > 0, got {bandwidth_Bps}")
        self.name = name
        self.latency_s = float(latency_s)
        self.bandwidth_Bps = float(bandwidth_Bps)
        self.arbiter = LinkArbiter.of(env)
        self.busy = False
        self.busy_s = 0.0

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link alone, ignoring any queueing."""
        # Hockney's alpha–beta model: t = alpha + n * beta, beta = 1 / bandwidth.
        return self.latency_s + nbytes / self.bandwidth_Bps

    def __repr__(self) -> str:
        return (
            f"Link({self.name!r}, latency_s={self.latency_s!r}, "
            f"bandwidth_Bps={self.bandwidth_Bps!r})"
        )


@dataclass(frozen=True)
class Device:
    """One accelerator (or CPU) that runs a model replica."""

    name: str
    host: str
    index: int
    kind: str
    peak_flops: float
    efficiency: float

    def compute_time_s(self, flops: float) -> float:
        """Seconds this device needs for ``flops`` floating-point operations.

        A training step reaches only ``efficiency`` of the datasheet peak (roofline view:
        memory traffic and kernel launches keep real steps below peak).
        """
        return flops / (self.peak_flops * self.efficiency)


HostRole = Literal["worker", "ps", "chief"]


@dataclass(eq=False)
class Host:
    """A machine (a TF task): its devices, its network interface and its intra-host link.

    ``nic`` is shared by every transfer into or out of the host; ``intra`` (PCIe / NVLink)
    is shared by the host's devices.
    """

    name: str
    role: HostRole
    devices: list[Device]
    nic: Link
    intra: Link


class Cluster:
    """The hosts, devices and links of one scenario, built on the engine's environment.

    ``spec`` is duck-typed (the scenario's ``ClusterSpec``): it needs ``hosts``,
    ``worker_names``, ``ps``, ``ps_names``, ``devices_per_host``, ``device.profile``,
    ``device.peak_flops``, ``device.efficiency`` and ``links.intra_host`` /
    ``links.network`` with ``bandwidth_Bps`` and ``latency_s``. The keyword overrides
    ``n_hosts`` and ``devices_per_host`` let a strategy reshape the workers, e.g. tpu
    building an x*y torus. Worker hosts are ``workers``; each parameter-server task is a
    device-less host in ``ps_hosts``; ``devices`` lists every worker device host-major.
    """

    def __init__(
        self,
        env: simpy.Environment,
        spec: Any,
        *,
        n_hosts: int | None = None,
        devices_per_host: int | None = None,
    ) -> None:
        self.env = env
        self.spec = spec
        self.profile = _effective_profile(spec.device)
        n_workers = int(spec.hosts if n_hosts is None else n_hosts)
        per_host = int(spec.devices_per_host if devices_per_host is None else devices_per_host)
        if n_workers < 1:
            raise ValueError(f"a cluster needs at least one worker host, got {n_workers}")
        if per_host < 1:
            raise ValueError(f"a host needs at least one device, got {per_host}")
        intra = spec.links.intra_host
        network = spec.links.network

        def make_host(name: str, role: HostRole, n_devices: int) -> Host:
            devices = [
                Device(
                    name=f"{name}/{self.profile.kind}{i}",
                    host=name,
                    index=i,
                    kind=self.profile.kind,
                    peak_flops=self.profile.peak_flops,
                    efficiency=self.profile.efficiency,
                )
                for i in range(n_devices)
            ]
            return Host(
                name=name,
                role=role,
                devices=devices,
                nic=Link(env, f"{name}/nic", network.latency_s, network.bandwidth_Bps),
                intra=Link(env, f"{name}/intra", intra.latency_s, intra.bandwidth_Bps),
            )

        worker_names = _names(getattr(spec, "worker_names", None), n_workers, "worker")
        ps_names = _names(getattr(spec, "ps_names", None), int(spec.ps or 0), "ps")
        self.workers: list[Host] = [make_host(n, "worker", per_host) for n in worker_names]
        self.ps_hosts: list[Host] = [make_host(n, "ps", 0) for n in ps_names]
        self.devices: list[Device] = [d for h in self.workers for d in h.devices]
        self._by_name = {h.name: h for h in self.hosts}
        if len(self._by_name) != len(self.hosts):
            raise ValueError(f"host names must be unique, got {[h.name for h in self.hosts]}")

    @property
    def hosts(self) -> list[Host]:
        """Every host: the workers, then the parameter-server tasks."""
        return [*self.workers, *self.ps_hosts]

    @property
    def chief(self) -> Host:
        """Worker 0, which pays for checkpoints and summaries (TF's implicit chief)."""
        return self.workers[0]

    @property
    def devices_per_host(self) -> int:
        """Devices on each worker host."""
        return len(self.workers[0].devices)

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        return self._by_name[name]

    def host_of(self, device: Device) -> Host:
        """The host a device sits on."""
        return self._by_name[device.host]

    def links(self) -> list[Link]:
        """Every link of the cluster, in host order (NIC, then intra-host link)."""
        return [link for h in self.hosts for link in (h.nic, h.intra)]


def _effective_profile(device_spec: Any) -> DeviceProfile:
    """The named profile with the scenario's ``peak_flops`` / ``efficiency`` overrides."""
    key = getattr(device_spec, "profile", None) or "cpu"
    if key not in DEVICE_PROFILES:
        raise SimdistError(
            f"unknown device profile {key!r}; expected one of {', '.join(DEVICE_PROFILES)}"
        )
    profile = DEVICE_PROFILES[key]
    peak = getattr(device_spec, "peak_flops", None)
    efficiency = getattr(device_spec, "efficiency", None)
    if peak is None and efficiency is None:
        return profile
    return replace(
        profile,
        peak_flops=profile.peak_flops if peak is None else float(peak),
        efficiency=profile.efficiency if efficiency is None else float(efficiency),
        source=f"{profile.source}; overridden by the scenario",
    )


def _names(given: Sequence[str] | None, n: int, prefix: str) -> list[str]:
    """The spec's names when there are at least ``n`` of them, else ``<prefix>0`` ..."""
    if given is not None and len(given) >= n:
        return [str(name) for name in given[:n]]
    return [f"{prefix}{i}" for i in range(n)]


def _ordered(links: Sequence[Link]) -> list[Link]:
    """Links deduplicated and sorted by name: one global acquisition order avoids deadlock."""
    if len(links) == 1:
        return [links[0]]
    if len(links) == 2:  # a worker–PS route: the common case, without the dict and sort
        a, b = links
        if a is b:
            return [a]
        return [a, b] if a.name <= b.name else [b, a]
    unique = {id(link): link for link in links}
    return sorted(unique.values(), key=lambda link: link.name)


class _Claim:
    """One pending or granted claim on a set of links."""

    __slots__ = ("event", "granted", "links", "seq", "waiting")

    def __init__(self, event: simpy.Event, links: list[Link]) -> None:
        self.event = event
        self.links = links
        self.granted = False
        self.waiting = False
        self.seq = 0  # arrival order among waiting claims


class LinkArbiter:
    """Grants sets of links atomically: a claim gets all its links when all are free.

    Taking links one by one (even in a global order, which avoids deadlock) lets
    a transfer hold the links it already has while it waits for the others: a
    parameter server's NIC would then sit idle, reserved by a transfer waiting
    for a busy worker NIC, and the convoy serialises everything. Here a claim
    holds nothing until it can have everything. Claims are served in arrival
    order, and a later claim whose links are all free goes ahead of an earlier
    one that is still blocked (backfilling), so a free link is never left idle
    while some claim could use it. Deterministic: the order is the order of
    arrival on the SimPy clock.
    """

    _by_env: ClassVar[weakref.WeakKeyDictionary[simpy.Environment, LinkArbiter]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._seq = 0
        # Waiting claims per link (keyed by id), in arrival order. A claim leaves them
        # lazily: once granted or withdrawn it is skipped and dropped from the front.
        self._queues: dict[int, deque[_Claim]] = {}

    @classmethod
    def of(cls, env: simpy.Environment) -> LinkArbiter:
        """The arbiter of ``env`` (one per SimPy environment)."""
        arbiter = cls._by_env.get(env)
        if arbiter is None:
            arbiter = cls._by_env[env] = cls(env)
        return arbiter

    @property
    def pending(self) -> list[_Claim]:
        """The claims still waiting, in arrival order."""
        waiting = {id(c): c for q in self._queues.values() for c in q if c.waiting}
        return sorted(waiting.values(), key=lambda c: c.seq)

    def claim(self, links: list[Link]) -> _Claim:
        """Ask for ``links``; ``claim.event`` fires when they are all held.

        Every waiting claim has a busy link (each dispatch leaves it so, and links
        only become free in :meth:`release`, which dispatches), so a new claim is
        granted at once exactly when its own links are free.
        """
        claim = _Claim(self.env.event(), links)
        for link in links:
            if link.busy:
                break
        else:
            self._grant(claim)
            return claim
        self._seq += 1
        claim.seq, claim.waiting = self._seq, True
        for link in links:
            self._queues.setdefault(id(link), deque()).append(claim)
        return claim

    def release(self, claim: _Claim, held_s: float) -> None:
        """Give the links of a granted claim back; withdraw a pending one."""
        if claim.granted:
            for link in claim.links:
                link.busy = False
                link.busy_s += held_s
            claim.granted = False
            self._dispatch(claim.links)
        elif claim.waiting:
            claim.waiting = False

    def _grant(self, claim: _Claim) -> None:
        for link in claim.links:
            link.busy = True
        claim.granted, claim.waiting = True, False
        claim.event.succeed()

    def _dispatch(self, freed: list[Link]) -> None:
        """Grant, in arrival order, every waiting claim whose links are now all free.

        Only claims on a just-freed link can have become grantable, and once such a
        link is taken again every later claim on it stays blocked, so each freed
        link's queue is read from its front only until the link is busy again
        (merged by arrival order). The grants, and their order, are those of a scan
        over all waiting claims — without its cost, quadratic when a thousand
        workers queue on one parameter server's NIC.
        """
        heads = []
        for link in freed:
            queue = self._queues.get(id(link))
            while queue and not queue[0].waiting:
                queue.popleft()
            if queue:
                rest = iter(queue)
                first = next(rest)
                heads.append((first.seq, id(link), first, rest, link))
        if not heads:
            return
        heapq.heapify(heads)
        while heads:
            _, key, claim, rest, link = heapq.heappop(heads)
            if link.busy:
                continue
            if claim.waiting:
                for other in claim.links:
                    if other.busy:
                        break
                else:
                    self._grant(claim)
                    continue
            for following in rest:
                if following.waiting:
                    heapq.heappush(heads, (following.seq, key, following, rest, link))
                    break
        for link in freed:
            queue = self._queues.get(id(link))
            while queue and not queue[0].waiting:
                queue.popleft()


def hold_links(
    env: simpy.Environment, links: Sequence[Link], seconds: float
) -> Generator[simpy.Event, Any, tuple[float, float]]:
    """SimPy process: wait until every link is free, hold them all for ``seconds``.

    The links are taken together (see :class:`LinkArbiter`). Returns
    ``(start_s, end_s)``, the interval actually held, after any queueing. If the
    process is interrupted, a pending claim is withdrawn, held links are released
    and the partial hold still counted in ``busy_s``.
    """
    if seconds < 0:
        raise ValueError(f"cannot hold links for a negative time: {seconds}")
    ordered = _ordered(links)
    if not ordered:
        yield env.timeout(seconds)
        return env.now - seconds, env.now
    arbiter = ordered[0].arbiter
    claim = arbiter.claim(ordered)
    start: float | None = None
    try:
        yield claim.event
        start = env.now
        yield env.timeout(seconds)
        return start, env.now
    finally:
        arbiter.release(claim, env.now - start if start is not None else 0.0)


def transfer(
    env: simpy.Environment, links: Sequence[Link], nbytes: float
) -> Generator[simpy.Event, Any, tuple[float, float]]:
    """SimPy process: move ``nbytes`` along a route; return ``(start_s, arrival_s)``.

    Alpha–beta along a path (Hockney 1994, "The communication challenge for
    MPP"): the message streams at the slowest link's rate and pays every hop's
    latency once, so it arrives ``sum(latency_s) + nbytes / min(bandwidth_Bps)``
    after it starts. Only the serialisation, ``nbytes / min(bandwidth_Bps)``,
    occupies the links: latency is propagation, during which the links already
    carry the next message. So n messages queued on one NIC arrive at
    ``latency + k·nbytes/bandwidth`` for k = 1..n. Store-and-forward is not
    modelled. Use as ``start, end = yield env.process(transfer(env, route(a, b), n))``.
    """
    if not links:
        if nbytes < 0:
            raise ValueError(f"cannot transfer a negative number of bytes: {nbytes}")
        return env.now, env.now
    moving = Transfer(env, links, nbytes)
    try:
        return (yield moving.done)
    except simpy.Interrupt:
        moving.cancel()
        raise


class Transfer:
    """One message on its way: the model of :func:`transfer`, driven by callbacks.

    Claim the route's links, hold them for the serialisation, release them,
    arrive after the latency — without a SimPy process of its own, which is
    what parameter_server and central_storage would otherwise pay per
    worker–PS or device–host transfer; :func:`transfer` wraps it in a process.
    ``done`` fires with ``(start_s, arrival_s)`` in the step after the arrival;
    ``on_arrival(start_s, arrival_s)`` runs at the arrival itself, before
    ``done`` is scheduled. :meth:`cancel` (a failure) withdraws a pending claim
    or releases held links (counting the partial hold in ``busy_s``), and
    nothing more happens.
    """

    __slots__ = (
        "_arbiter",
        "_claim",
        "_latency_s",
        "_on_arrival",
        "_serialise_s",
        "done",
        "env",
        "start_s",
        "state",
    )

    def __init__(
        self,
        env: simpy.Environment,
        links: Sequence[Link],
        nbytes: float,
        on_arrival: Callable[[float, float], None] | None = None,
    ) -> None:
        if nbytes < 0:
            raise ValueError(f"cannot transfer a negative number of bytes: {nbytes}")
        ordered = _ordered(links)
        if not ordered:
            raise ValueError("a Transfer needs at least one link")
        self.env = env
        self.done = env.event()
        self.start_s: float | None = None
        self.state = "claimed"  # claimed → serialising → in flight → arrived | cancelled
        self._on_arrival = on_arrival
        self._serialise_s = nbytes / min(link.bandwidth_Bps for link in ordered)
        self._latency_s = sum(link.latency_s for link in ordered)
        self._arbiter = ordered[0].arbiter
        self._claim = self._arbiter.claim(ordered)
        self._claim.event.callbacks.append(self._granted)

    @property
    def alive(self) -> bool:
        """Whether the transfer has neither arrived nor been cancelled."""
        return self.state in ("claimed", "serialising", "in flight")

    def _granted(self, _: simpy.Event) -> None:
        if self.state != "claimed":
            return
        self.state = "serialising"
        self.start_s = self.env.now
        self.env.timeout(self._serialise_s).callbacks.append(self._serialised)

    def _serialised(self, _: simpy.Event) -> None:
        if self.state != "serialising":
            return
        assert self.start_s is not None
        self._arbiter.release(self._claim, self.env.now - self.start_s)
        self.state = "in flight"
        self.env.timeout(self._latency_s).callbacks.append(self._arrived)

    def _arrived(self, _: simpy.Event) -> None:
        if self.state != "in flight":
            return
        self.state = "arrived"
        assert self.start_s is not None
        if self._on_arrival is not None:
            self._on_arrival(self.start_s, self.env.now)
        self.done.succeed((self.start_s, self.env.now))

    def cancel(self) -> None:
        """Cut the transfer (a failure): free its claim or links; it never arrives."""
        if self.state == "claimed":
            self._arbiter.release(self._claim, 0.0)
        elif self.state == "serialising":
            assert self.start_s is not None
            self._arbiter.release(self._claim, self.env.now - self.start_s)
        elif self.state != "in flight":
            return
        self.state = "cancelled"


def path_time_s(links: Sequence[Link], nbytes: float) -> float:
    """Seconds to move ``nbytes`` along ``links`` with no queueing (0 for an empty path)."""
    ordered = _ordered(links)
    if not ordered:
        return 0.0
    latency_s = sum(link.latency_s for link in ordered)
    return latency_s + nbytes / min(link.bandwidth_Bps for link in ordered)


def route(src: Host, dst: Host) -> list[Link]:
    """The links a message from ``src`` to ``dst`` occupies.

    Inside one host it crosses the intra-host link; between hosts it leaves through the
    sender's NIC and enters through the receiver's (the network core is assumed
    non-blocking, so only the end points contend).
    """
    if src is dst:
        return [src.intra]
    return [src.nic, dst.nic]
