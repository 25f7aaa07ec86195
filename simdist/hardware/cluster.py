"""Hosts and devices: the machines a scenario runs on, and their roles.

Pure data, built from the scenario's cluster section: no SimPy, no JAX. The
wires between the machines (links, routes, collectives) are
:mod:`simdist.network`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from simdist.errors import SimdistError
from simdist.hardware.profiles import DEVICE_PROFILES, DeviceProfile

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec, DeviceSpec


@dataclass(frozen=True)
class Device:
    """One accelerator (or CPU) that runs a model replica; its speed is the profile's.

    ``kind`` is its profile's kind (``gpu``, ``tpu``, ``cpu``: it names the device,
    ``worker0/gpu1``); ``profile`` labels its device class in :attr:`Cluster.profiles`
    (the profile's name, e.g. ``v100``), so that a mixed cluster prices each device with
    its own roofline.
    """

    name: str
    host: str
    index: int
    kind: str
    profile: str = ""


HostRole = Literal["worker", "ps", "chief"]


@dataclass(frozen=True, eq=False)
class Host:
    """A machine (a TF task) and its devices; parameter-server tasks have none."""

    name: str
    role: HostRole
    devices: tuple[Device, ...]
    profile: str | None = None  # the label of its devices' class; None for PS tasks
    # The machine it runs on when that is another host's (a PS task co-located on a
    # worker machine, sharing its NIC); None: a machine of its own.
    machine: str | None = None


class Cluster:
    """The hosts and devices of one scenario.

    ``spec`` is the scenario's cluster section: its ``hosts`` are named by ``worker_names``
    (``worker0``, ``worker1``, ... when it names fewer), host ``i`` holding
    ``device_counts[i]`` devices of its section ``host_device(i)``. Worker hosts are
    ``workers``; each parameter-server task is a device-less host in ``ps_hosts``, on a
    machine of its own or co-located on a worker's (``spec.ps_placement``,
    :func:`ps_machines`; :attr:`machines` lists the machines, each with its own NIC);
    ``devices`` lists every worker device host-major.
    ``coordinator`` is the task that writes parameter_server checkpoints: the scenario's
    chief when it does not train, else a task called ``chief`` (TF's coordinator).

    Device classes: hosts whose device sections are equal share one class, labelled by
    the profile's name (``name@host`` when two classes name the same profile with other
    overrides). ``profiles`` maps each label to its :class:`DeviceProfile` (first-seen
    order), ``device_specs`` to its device section (for a measured step's calibration);
    ``profile`` is worker 0's, the one a homogeneous cluster has.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        n_workers = int(spec.hosts)
        if n_workers < 1:
            raise ValueError(f"a cluster needs at least one worker host, got {n_workers}")
        counts = [int(n) for n in spec.device_counts]
        if len(counts) != n_workers:
            raise ValueError(f"{n_workers} worker hosts but {len(counts)} device counts")
        if min(counts) < 1:
            raise ValueError(f"a host needs at least one device, got {min(counts)}")
        device_specs = [spec.host_device(i) for i in range(n_workers)]
        self.profiles: dict[str, DeviceProfile] = {}
        self.device_specs: dict[str, DeviceSpec] = {}
        worker_names = _names(spec.worker_names, n_workers, "worker")
        labels = self._classes(device_specs, worker_names)
        self.profile = self.profiles[labels[0]]

        def make_host(name: str, role: HostRole, n_devices: int, label: str | None) -> Host:
            kind = self.profiles[label].kind if label is not None else self.profile.kind
            devices = tuple(
                Device(f"{name}/{kind}{i}", name, i, kind, label or "") for i in range(n_devices)
            )
            return Host(name, role, devices, label)

        ps_names = _names(spec.ps_names, int(spec.ps or 0), "ps")
        self.workers: list[Host] = [
            make_host(n, "worker", count, label)
            for n, count, label in zip(worker_names, counts, labels, strict=True)
        ]
        machines = ps_machines(spec.ps_placement, worker_names, ps_names)
        self.ps_hosts: list[Host] = [
            replace(make_host(n, "ps", 0, None), machine=m)
            for n, m in zip(ps_names, machines, strict=True)
        ]
        self.devices: list[Device] = [d for h in self.workers for d in h.devices]
        names = {h.name for h in self.hosts}
        if len(names) != len(self.hosts):
            raise ValueError(f"host names must be unique, got {[h.name for h in self.hosts]}")
        idle_chiefs = [n for n in spec.chief_names if n not in names]
        self.coordinator: str = idle_chiefs[0] if idle_chiefs else "chief"

    def _classes(self, device_specs: Sequence[DeviceSpec], hosts: Sequence[str]) -> list[str]:
        """The class label of each worker host; fills :attr:`profiles`, :attr:`device_specs`."""
        seen: dict[tuple[object, ...], str] = {}
        labels = []
        for host, device_spec in zip(hosts, device_specs, strict=True):
            key = _device_key(device_spec)
            if key not in seen:
                profile = effective_profile(device_spec)
                label = (
                    profile.name if profile.name not in self.profiles else f"{profile.name}@{host}"
                )
                seen[key] = label
                self.profiles[label] = profile
                self.device_specs[label] = device_spec
            labels.append(seen[key])
        return labels

    @property
    def mixed(self) -> bool:
        """Whether the worker hosts hold devices of more than one class."""
        return len(self.profiles) > 1

    def profile_of(self, device: Device) -> DeviceProfile:
        """The profile (roofline figures) of ``device``."""
        return self.profiles.get(device.profile, self.profile)

    @property
    def hosts(self) -> list[Host]:
        """Every host with a track of its own: the workers, then the parameter-server tasks."""
        return [*self.workers, *self.ps_hosts]

    @property
    def machines(self) -> list[str]:
        """Every machine, each with its own NIC and intra-host link: the worker hosts, then
        the parameter-server tasks that are not co-located on a worker's machine."""
        return [h.name for h in self.workers] + [h.name for h in self.ps_hosts if not h.machine]

    @property
    def chief(self) -> Host:
        """Worker 0, which pays for checkpoints and summaries (TF's implicit chief)."""
        return self.workers[0]

    @property
    def devices_per_host(self) -> int:
        """Devices on each worker host (worker 0's when the counts differ)."""
        return len(self.workers[0].devices)

    @property
    def device_counts(self) -> list[int]:
        """Devices on each worker host, in host order."""
        return [len(h.devices) for h in self.workers]

    @property
    def roles(self) -> dict[str, HostRole]:
        """Every task name → its role, in display order: workers, coordinator, PS tasks."""
        roles: dict[str, HostRole] = {h.name: h.role for h in self.workers}
        roles[self.coordinator] = "chief"
        roles.update((h.name, h.role) for h in self.ps_hosts)
        return roles


def effective_profile(device_spec: DeviceSpec) -> DeviceProfile:
    """The named profile at the scenario's precision, with its ``peak_flops`` / ``efficiency``
    overrides (which replace those of the selected precision)."""
    key = device_spec.profile
    if key not in DEVICE_PROFILES:
        raise SimdistError(
            f"unknown device profile {key!r}; expected one of {', '.join(DEVICE_PROFILES)}"
        )
    profile = DEVICE_PROFILES[key]
    precision = device_spec.precision
    if precision is not None:
        if precision not in profile.precisions:
            raise SimdistError(
                f"device profile {key!r} has no {precision} peak; "
                f"expected one of {', '.join(profile.precisions)}"
            )
        profile = profile.at_precision(precision)
    peak, efficiency = device_spec.peak_flops, device_spec.efficiency
    if peak is None and efficiency is None:
        return profile
    return replace(
        profile,
        peak_flops=profile.peak_flops if peak is None else float(peak),
        efficiency=profile.efficiency if efficiency is None else float(efficiency),
        source=f"{profile.source}; overridden by the scenario",
    )


def _device_key(d: DeviceSpec) -> tuple[object, ...]:
    """What makes two device sections the same class of device (not their variability)."""
    return (d.profile, d.precision, d.peak_flops, d.efficiency, d.compute_time_s, d.examples_per_s)


def ps_machines(
    placement: str | Sequence[str], workers: Sequence[str], ps_names: Sequence[str]
) -> list[str | None]:
    """The machine of each parameter-server task (``None``: a machine of its own).

    ``separate``: every PS task on its own machine. ``colocated``: PS task i on worker
    machine i mod W (TensorFlow's usual layout, one PS task per worker machine). A list
    names the worker machine of each PS task.
    """
    if placement == "separate":
        return [None] * len(ps_names)
    if placement == "colocated":
        if not workers and ps_names:
            raise ValueError("colocated parameter servers need worker hosts")
        return [workers[i % len(workers)] for i in range(len(ps_names))]
    if isinstance(placement, str):
        raise ValueError(f"ps_placement must be separate, colocated or a list, got {placement!r}")
    placed = [str(m) for m in placement]
    if len(placed) != len(ps_names):
        raise ValueError(f"{len(ps_names)} PS tasks but {len(placed)} machines in ps_placement")
    unknown = [m for m in placed if m not in workers]
    if unknown:
        raise ValueError(f"ps_placement names {unknown[0]!r}, not a worker host of {workers}")
    return list(placed)


def _names(given: Sequence[str] | None, n: int, prefix: str) -> list[str]:
    """The spec's names when there are at least ``n`` of them, else ``<prefix>0`` ..."""
    if given is not None and len(given) >= n:
        return [str(name) for name in given[:n]]
    return [f"{prefix}{i}" for i in range(n)]
