"""The ``cluster:`` section: hosts, their devices and links, and the network between them.

The link and network sub-sections are :mod:`simdist.scenario.network`'s (re-exported here).

The hosts are counted (``hosts: 4``), given as TF_CONFIG-style task lists
(``worker: [w0:2222, ...]``) or listed one by one with their own devices (:class:`HostSpec`);
the checks that need the strategy too (who trains, the size of the whole run) are the
scenario's (:mod:`simdist.scenario.schema`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from simdist.hardware.profiles import DEVICE_PROFILES, Precision
from simdist.hardware.variability import DEVICE_SIGMA, STEP_SIGMA
from simdist.scenario.fields import MAX_DEVICES, MAX_PS_TASKS
from simdist.scenario.messages import EXAMPLES, choice_message, error_message
from simdist.scenario.network import (
    IntraHostLinkSpec,
    LinkSpec,
    LinksSpec,
    NetworkLinkSpec,
    NetworkSpec,
)
from simdist.spec import (
    Float,
    Flops,
    Int,
    PositiveDuration,
    Spec,
    fail,
    show,
)

__all__ = [
    "HOST_NAME_RE",
    "ClusterSpec",
    "DeviceSpec",
    "HostSpec",
    "IntraHostLinkSpec",
    "LinkSpec",
    "LinksSpec",
    "NetworkLinkSpec",
    "NetworkSpec",
    "VariabilitySpec",
]

_TASK_RE = re.compile(r"(?P<host>(?!\.+(?::|$))[A-Za-z0-9_.-]+)(?::(?P<port>\d+))?")


def known_profile(value: str) -> str:
    """``value`` if it names a device profile; else one error listing them."""
    if value not in DEVICE_PROFILES:
        raise ValueError(choice_message(value, tuple(DEVICE_PROFILES), "profile"))
    return value


def _variability(value: object) -> object:
    """``variability: 0`` (or ``false``, ``off``) turns both effects off; ``true`` (or
    ``on``) keeps the measured defaults."""
    if value is False or value == 0 or value == "off":
        return {"step": 0, "device": 0}
    if value is True or value == "on":
        return {}
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(
            f"got {value!r}; a number alone can only be 0 (no variability): give the "
            f"spreads by name, e.g. variability: {{step: {value}, device: {DEVICE_SIGMA}}}"
        )
    return value


class VariabilitySpec(Spec):
    """How much a device's compute time varies: lognormal spreads (σ) of mean-1 factors.

    ``step``: drawn anew every step; ``device``: drawn once per device (nominally equal
    devices are not equally fast). The defaults are measured (:mod:`simdist.hardware.variability`);
    ``variability: 0`` gives exact, hand-checkable times.
    """

    step: Float = Field(STEP_SIGMA, ge=0, le=1, examples=[STEP_SIGMA])
    device: Float = Field(DEVICE_SIGMA, ge=0, le=1, examples=[DEVICE_SIGMA])


class DeviceSpec(Spec):
    """The accelerator of every replica: a named profile, optionally overridden.

    ``peak_flops`` and ``efficiency`` stay ``None`` unless given; the cluster combines
    them with the profile (:func:`simdist.hardware.cluster.effective_profile`).
    """

    profile: str = "cpu"
    precision: Precision | None = None  # None: the profile's own (fp32; bf16 on tpu-v4)
    peak_flops: Flops | None = None
    efficiency: Float | None = Field(None, gt=0, le=1)
    # Calibration: one device's measured step time, or its measured examples per second.
    compute_time_s: PositiveDuration | None = Field(None, alias="compute_time")
    examples_per_s: Float | None = Field(None, gt=0)
    # Step-time variability, on by default: see simdist.hardware.variability.
    variability: Annotated[VariabilitySpec, BeforeValidator(_variability)] = Field(
        default_factory=VariabilitySpec, examples=["0"]
    )

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        return known_profile(value)

    @model_validator(mode="after")
    def _precision_and_calibration(self) -> DeviceSpec:
        supported = DEVICE_PROFILES[self.profile].precisions
        if self.precision is not None and self.precision not in supported:
            raise fail(
                "precision",
                f"got {self.precision!r}; profile {self.profile} has peaks for "
                f"{', '.join(supported)}, e.g. precision: {supported[0]}",
            )
        if self.compute_time_s is not None and self.examples_per_s is not None:
            raise fail(
                "examples_per_s",
                "give compute_time or examples_per_s (one device's measurement), not both",
            )
        return self


# A host's name: it names the host's links and devices, and a job lists its hosts by it.
# Not dots alone: "." and ".." would name the working folder or its parent in a report.
HOST_NAME_RE = re.compile(r"(?!\.+$)[A-Za-z0-9_.-]+")


class HostSpec(Spec):
    """One worker host of a cluster listed host by host: its name, devices and their kind.

    ``profile: a100`` is short for ``device: {profile: a100}``. A host that names neither
    has the cluster's ``device:``; a host that names one has its own device section
    instead of the cluster's, whole (an ``efficiency``, a ``precision`` or a measured
    ``compute_time`` describes one kind of device, not every kind). ``devices`` defaults
    to the cluster's ``devices_per_host``; ``name`` to ``worker<i>``. The first host is the
    chief (TF's implicit chief), as in the short form.
    """

    name: str | None = Field(None, examples=["a100-0"])
    devices: Int | None = Field(None, ge=1, le=MAX_DEVICES, examples=[4])
    profile: str | None = Field(None, examples=["a100"])
    device: DeviceSpec | None = None

    @field_validator("name")
    @classmethod
    def _host_name(cls, value: str) -> str:
        if not HOST_NAME_RE.fullmatch(value):
            raise ValueError(
                f"got {show(value)}; expected letters, digits, '_', '.' and '-' only, not "
                "dots alone (it names the host's links and devices), e.g. name: a100-0"
            )
        return value

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        return known_profile(value)

    @model_validator(mode="after")
    def _one_device(self) -> HostSpec:
        if self.profile is not None and self.device is not None:
            raise fail(
                "device",
                "give profile or device, not both; e.g. profile: a100, or "
                "device: {profile: a100, precision: tf32}",
            )
        return self

    def device_spec(self, default: DeviceSpec) -> DeviceSpec:
        """This host's device section: its own, or ``default`` (the cluster's).

        The step-time variability is the cluster's unless the host's own section sets it:
        ``cluster.device.variability: 0`` turns it off on every host.
        """
        if self.device is not None:
            if "variability" in self.device.model_fields_set:
                return self.device
            return self.device.model_copy(update={"variability": default.variability})
        if self.profile is not None:
            return DeviceSpec(profile=self.profile, variability=default.variability)
        return default


def _host_list(value: list[Any]) -> list[HostSpec]:
    """``cluster.hosts`` given as a list: each entry validated, errors at ``hosts[i]``."""
    if not value:
        raise fail("hosts", f"got an empty list; expected at least one host, e.g. {_HOSTS_EG}")
    if len(value) > MAX_DEVICES:
        raise fail(
            "hosts",
            f"got a list of {len(value):,} hosts; a simulated cluster has at most "
            f"{MAX_DEVICES:,}, e.g. {_HOSTS_EG}",
        )
    hosts = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise fail(
                f"hosts[{i}]",
                f"got {show(entry)}; expected a host such as {{name: a100-0, devices: 4, "
                f"profile: a100}}, e.g. {_HOSTS_EG}",
            )
        try:
            hosts.append(HostSpec.model_validate(entry))
        except ValidationError as exc:
            path, message = error_message(exc.errors()[0], HostSpec)
            raise fail(f"hosts[{i}].{path}" if path else f"hosts[{i}]", message) from None
    return hosts


_HOSTS_EG = "hosts: [{name: v100-0, devices: 4, profile: v100}, {name: a100-0, profile: a100}]"


def _task_names(value: object, key: str) -> list[str]:
    """Validated TF_CONFIG-style ``["w0:2222", ...]`` task addresses."""
    if not isinstance(value, list):
        raise fail(key, f"got {show(value)}; expected a list of host:port, e.g. {EXAMPLES[key]}")
    names = []
    for i, entry in enumerate(value):
        match = _TASK_RE.fullmatch(entry) if isinstance(entry, str) else None
        if match is None:
            raise fail(
                f"{key}[{i}]",
                f"got {show(entry)}; expected host:port such as 'w0:2222', e.g. {EXAMPLES[key]}",
            )
        names.append(entry)
    return names


def _host_part(address: str) -> str:
    return address.rsplit(":", 1)[0] if ":" in address else address


class ClusterSpec(Spec):
    """Hosts and their devices and links, given as counts or TF_CONFIG-style task lists.

    Task names are the host part of each address (``w0:2222`` -> ``w0``), unless two tasks
    share a host (``localhost:2222``, ``localhost:2223``): then the full addresses are kept.

    After validation ``hosts == len(worker_names)`` (training hosts, worker 0 first, chief
    included when it trains), ``ps == len(ps_names)``; see :class:`Scenario` for the chief
    rule.

    ``hosts`` may also list the worker hosts one by one (a heterogeneous cluster, each host
    with its own device count and profile: :class:`HostSpec`); the list is then kept in
    ``host_specs`` (names and counts filled in), ``hosts`` is its length and
    ``devices_per_host`` the first host's count. :attr:`device_counts` and
    :meth:`host_device` give every host's count and device section in either form.
    """

    hosts: Int = Field(1, ge=1, le=MAX_DEVICES)
    worker_names: list[str] = Field(default_factory=list, alias="worker")
    chief_names: list[str] = Field(default_factory=list, alias="chief")
    ps: Int = Field(0, ge=0, le=MAX_PS_TASKS)
    ps_names: list[str] = Field(default_factory=list, exclude=True)
    devices_per_host: Int = Field(1, ge=1, le=MAX_DEVICES)
    device: DeviceSpec = Field(default_factory=DeviceSpec)
    host_specs: list[HostSpec] | None = Field(None, exclude=True)
    links: LinksSpec = Field(default_factory=LinksSpec)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    # Where the parameter-server tasks run: machines of their own (separate), one on each
    # worker machine in turn (colocated, TF's usual layout), or the worker host of each.
    ps_placement: Literal["separate", "colocated"] | list[str] = Field(
        "separate", examples=["colocated"]
    )

    @field_validator("ps_placement", mode="before")
    @classmethod
    def _ps_placement(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("separate", "colocated"):
            raise ValueError(
                f"{choice_message(value, ('separate', 'colocated'), 'ps_placement')}, or a "
                "list of worker hosts, one per PS task (e.g. ps_placement: [w0, w1])"
            )
        if not isinstance(value, str | list) or (
            isinstance(value, list) and not all(isinstance(v, str) for v in value)
        ):
            raise ValueError(
                f"got {show(value)}; expected separate, colocated, or a list of worker "
                "hosts, one per PS task, e.g. ps_placement: colocated"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _task_lists(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data.pop("ps_names", None)
        if "host_specs" in data:
            raise fail("host_specs", "unknown key; list the hosts as hosts: [...]")
        if isinstance(data.get("hosts"), list):
            for key in ("worker", "worker_names", "chief", "chief_names"):
                if data.get(key):
                    raise fail(
                        key.removesuffix("_names"),
                        f"cluster.hosts lists the hosts already; give the hosts there or in "
                        f"{key.removesuffix('_names')}:, not both (the first listed host is "
                        f"the chief), e.g. {_HOSTS_EG}",
                    )
            data["host_specs"] = _host_list(data["hosts"])
            data["hosts"] = len(data["host_specs"])
        for key, attr in (("worker", "worker_names"), ("chief", "chief_names")):
            for k in (key, attr):
                if k in data:
                    data[k] = _task_names(data[k], key)
        if len(data.get("chief", data.get("chief_names", []))) > 1:
            raise fail("chief", "expected at most one chief task, e.g. chief: [c0:2222]")
        if isinstance(data.get("ps"), list):
            data["ps_names"] = _task_names(data["ps"], "ps")
            data["ps"] = len(data["ps_names"])
        lists = [
            k for k in ("worker", "worker_names", "chief", "chief_names", "ps_names") if k in data
        ]
        hosts = [_host_part(a) for k in lists for a in data[k]]
        if len(set(hosts)) == len(hosts):
            for k in lists:
                data[k] = [_host_part(a) for a in data[k]]
        return data

    @model_validator(mode="after")
    def _ps_names(self) -> ClusterSpec:
        if not self.ps_names:
            self.ps_names = [f"ps{i}" for i in range(self.ps)]
        if self.host_specs is not None:
            for host in self.host_specs:
                if host.devices is None:
                    host.devices = self.devices_per_host
            self.devices_per_host = self.host_specs[0].devices
        return self

    @property
    def device_counts(self) -> list[int]:
        """Devices on each worker host, in host order."""
        if self.host_specs is None:
            return [self.devices_per_host] * self.hosts
        return [int(h.devices or self.devices_per_host) for h in self.host_specs]

    @property
    def n_devices(self) -> int:
        """Devices on all the worker hosts."""
        return sum(self.device_counts)

    def host_device(self, i: int) -> DeviceSpec:
        """The device section of worker host ``i``: its own, or the cluster's ``device``."""
        if self.host_specs is None:
            return self.device
        return self.host_specs[i].device_spec(self.device)

    @property
    def uniform_devices(self) -> bool:
        """Whether every worker host has the same number of devices."""
        return len(set(self.device_counts)) <= 1

    @property
    def profiles(self) -> list[str]:
        """The distinct device profiles of the worker hosts, first-seen order."""
        names = [self.host_device(i).profile for i in range(self.hosts)]
        return list(dict.fromkeys(names))

    def set_devices_per_host(self, n: int) -> None:
        """Every worker host holds ``n`` devices (a strategy deciding the count: tpu)."""
        self.devices_per_host = n
        for host in self.host_specs or ():
            host.devices = n
