"""Hosts and devices: the machines a scenario runs on, and their roles.

Pure data, built from the scenario's cluster section: no SimPy, no JAX. The
wires between the machines (links, routes, collectives) are
:mod:`simdist.network`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from simdist.errors import SimdistError
from simdist.profiles import DEVICE_PROFILES, DeviceProfile


@dataclass(frozen=True)
class Device:
    """One accelerator (or CPU) that runs a model replica; its speed is the profile's."""

    name: str
    host: str
    index: int
    kind: str


HostRole = Literal["worker", "ps", "chief"]


@dataclass(frozen=True, eq=False)
class Host:
    """A machine (a TF task) and its devices; parameter-server tasks have none."""

    name: str
    role: HostRole
    devices: tuple[Device, ...]


class Cluster:
    """The hosts and devices of one scenario.

    ``spec`` is duck-typed (the scenario's ``ClusterSpec``): it needs ``hosts``,
    ``worker_names``, ``ps``, ``ps_names``, ``chief_names``, ``devices_per_host`` and
    ``device`` (``profile``, ``peak_flops``, ``efficiency``). Worker hosts are
    ``workers``; each parameter-server task is a device-less host in ``ps_hosts``;
    ``devices`` lists every worker device host-major. ``coordinator`` is the task that
    writes parameter_server checkpoints: the scenario's chief when it does not train,
    else a task called ``chief`` (TF's coordinator).
    """

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.profile = effective_profile(spec.device)
        n_workers, per_host = int(spec.hosts), int(spec.devices_per_host)
        if n_workers < 1:
            raise ValueError(f"a cluster needs at least one worker host, got {n_workers}")
        if per_host < 1:
            raise ValueError(f"a host needs at least one device, got {per_host}")

        def make_host(name: str, role: HostRole, n_devices: int) -> Host:
            kind = self.profile.kind
            devices = tuple(Device(f"{name}/{kind}{i}", name, i, kind) for i in range(n_devices))
            return Host(name, role, devices)

        worker_names = _names(getattr(spec, "worker_names", None), n_workers, "worker")
        ps_names = _names(getattr(spec, "ps_names", None), int(spec.ps or 0), "ps")
        self.workers: list[Host] = [make_host(n, "worker", per_host) for n in worker_names]
        self.ps_hosts: list[Host] = [make_host(n, "ps", 0) for n in ps_names]
        self.devices: list[Device] = [d for h in self.workers for d in h.devices]
        names = {h.name for h in self.hosts}
        if len(names) != len(self.hosts):
            raise ValueError(f"host names must be unique, got {[h.name for h in self.hosts]}")
        idle_chiefs = [n for n in getattr(spec, "chief_names", ()) if n not in names]
        self.coordinator: str = idle_chiefs[0] if idle_chiefs else "chief"

    @property
    def hosts(self) -> list[Host]:
        """Every host with a track of its own: the workers, then the parameter-server tasks."""
        return [*self.workers, *self.ps_hosts]

    @property
    def chief(self) -> Host:
        """Worker 0, which pays for checkpoints and summaries (TF's implicit chief)."""
        return self.workers[0]

    @property
    def devices_per_host(self) -> int:
        """Devices on each worker host."""
        return len(self.workers[0].devices)

    @property
    def roles(self) -> dict[str, HostRole]:
        """Every task name → its role, in display order: workers, coordinator, PS tasks."""
        roles: dict[str, HostRole] = {h.name: h.role for h in self.workers}
        roles[self.coordinator] = "chief"
        roles.update((h.name, h.role) for h in self.ps_hosts)
        return roles


def effective_profile(device_spec: Any) -> DeviceProfile:
    """The named profile at the scenario's precision, with its ``peak_flops`` / ``efficiency``
    overrides (which replace those of the selected precision)."""
    key = getattr(device_spec, "profile", None) or "cpu"
    if key not in DEVICE_PROFILES:
        raise SimdistError(
            f"unknown device profile {key!r}; expected one of {', '.join(DEVICE_PROFILES)}"
        )
    profile = DEVICE_PROFILES[key]
    precision = getattr(device_spec, "precision", None)
    if precision is not None:
        if precision not in profile.precisions:
            raise SimdistError(
                f"device profile {key!r} has no {precision} peak; "
                f"expected one of {', '.join(profile.precisions)}"
            )
        profile = profile.at_precision(precision)
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
