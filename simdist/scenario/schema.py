"""The scenario schema: one pydantic model per section, and the checks across sections.

Adding a top-level section (faults, checkpoint, input, ...) means one model class, one
field on :class:`Scenario`, and optionally a few entries in
:data:`simdist.scenario.messages.EXAMPLES`; loading and error reporting are generic.

The ``strategy:`` section is the union of every registered strategy's ``Spec``
(:func:`simdist.strategies.spec_classes`), discriminated on ``kind``; each strategy module
owns its fields, its replica count and its cross-checks, so this module names none of them.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simdist.catalog import (
    DATASETS,
    FULLSIZE_MODELS,
    MODELS,
    OPTIMIZERS,
    RESNET_DEFAULTS,
    SCHEDULES,
    TEACHER_DEFAULTS,
    DatasetName,
    ModelName,
    OptimizerName,
    ScheduleKind,
)
from simdist.profiles import DEVICE_PROFILES, Precision
from simdist.scenario.messages import EXAMPLES, choice_message, error_message
from simdist.spec import (
    Bandwidth,
    Float,
    Flops,
    Int,
    Latency,
    PositiveDuration,
    PositiveInt,
    Spec,
    fail,
    show,
)
from simdist.strategies import spec_classes

__all__ = [
    "DATASETS",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULES",
    "STRATEGIES",
    "CheckpointSpec",
    "ClusterSpec",
    "DatasetSpec",
    "DeviceSpec",
    "FailureSpec",
    "FaultsSpec",
    "HostSpec",
    "InputSpec",
    "IntraHostLinkSpec",
    "JobSpec",
    "LinkSpec",
    "LinksSpec",
    "ModelSpec",
    "NetworkLinkSpec",
    "OptimizerSpec",
    "Scenario",
    "ScheduleSpec",
    "SlowdownSpec",
    "StragglerSpec",
    "StrategySpec",
    "WorkloadSpec",
]

# A report folder's name: never "." or "..", never hidden, and short enough that the
# temporary folder beside it (".NAME.tmp.<host>.<pid>.<random>") fits a file name.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_NAME_CHARS = 100
# What one process can hold and simulate: beyond these the run would exhaust memory or
# never finish, so they are refused at load time with the limit in the message.
MAX_DEVICES = 65_536
MAX_PS_TASKS = 4_096
MAX_GENERATED_EXAMPLES = 10_000_000
MAX_GENERATED_VALUES = 50_000_000  # n_examples x n_features: 400 MB as float64 while drawn
_TASK_RE = re.compile(r"(?P<host>[A-Za-z0-9_.-]+)(?::(?P<port>\d+))?")


def _shorthand(key: str) -> Callable[[object], object]:
    """Let ``strategy: mirrored`` stand for ``strategy: {kind: mirrored}`` (and similar)."""

    def expand(value: object) -> object:
        return {key: value} if isinstance(value, str) else value

    return expand


# ---------------------------------------------------------------- cluster


class LinkSpec(Spec):
    """One kind of link: alpha-beta cost ``latency_s + nbytes / bandwidth_Bps``."""

    bandwidth_Bps: Bandwidth = Field(alias="bandwidth")
    latency_s: Latency = Field(alias="latency")


class IntraHostLinkSpec(LinkSpec):
    """PCIe / NVLink inside a host; defaults to 300GB/s and 2us."""

    bandwidth_Bps: Bandwidth = Field(300e9, alias="bandwidth")
    latency_s: Latency = Field(2e-6, alias="latency")


class NetworkLinkSpec(LinkSpec):
    """Each host's NIC; defaults to 10Gbit/s and 50us."""

    bandwidth_Bps: Bandwidth = Field(1.25e9, alias="bandwidth")
    latency_s: Latency = Field(50e-6, alias="latency")


class LinksSpec(Spec):
    """The links of every host."""

    intra_host: IntraHostLinkSpec = Field(default_factory=IntraHostLinkSpec)
    network: NetworkLinkSpec = Field(default_factory=NetworkLinkSpec)


def _ratio(value: object) -> object:
    """An oversubscription ratio: a number k, or ``"k:1"`` (``"a:b"`` is a/b); at least 1."""
    eg = "e.g. oversubscription: 4 or oversubscription: '4:1'"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"got {show(value)}; expected a ratio k:1 (k >= 1), {eg}")
    if isinstance(value, str):
        parts = value.strip().split(":")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            numbers = []
        if len(parts) not in (1, 2) or len(numbers) != len(parts) or min(numbers) <= 0:
            raise ValueError(f"got {show(value)}; expected a ratio k:1 (k >= 1), {eg}")
        ratio = numbers[0] / numbers[1] if len(numbers) == 2 else numbers[0]
    else:
        ratio = float(value)
    if not (math.isfinite(ratio) and ratio >= 1):
        raise ValueError(
            f"got {show(value)}; expected a ratio of at least 1:1 (1 is non-blocking: the "
            f"uplinks carry all the rack's hosts can send), {eg}"
        )
    return ratio


class NetworkSpec(Spec):
    """How the hosts are wired and how concurrent traffic shares the wires.

    ``duplex: full`` (default) gives each NIC separate transmit and receive capacity, as
    Ethernet and InfiniBand have; ``half`` is one channel for both ways. ``sharing: fair``
    (default) splits a link's bandwidth max-min fairly among concurrent flows (the
    flow-level model SimGrid validates); ``fifo`` carries one transfer at a time, the
    others wait in line.

    ``topology: switch`` (default) puts every machine on one non-blocking switch;
    ``leaf_spine`` puts ``hosts_per_leaf`` machines behind each leaf, whose uplink to the
    spine carries ``hosts_per_leaf`` × NIC bandwidth / ``oversubscription`` (k:1, default
    1, a number or ``"4:1"``), and adds ``hop_latency`` (default 0) per switch hop: 1 in a
    rack, 3 across racks. ``intra_host``: ``shared`` (default, one intra-host link per
    host), ``nvlink`` (a port per GPU at ``links.intra_host``'s bandwidth) or ``pcie``
    (a PCIe link per device, one ``pcie_uplink`` shared to the CPU and the NIC); see
    :mod:`simdist.network.leaf_spine` and :mod:`simdist.network.intranode`.

    ``protocol`` prices point-to-point messages (parameter-server pulls and pushes,
    pipeline activations; not collectives): ``ideal`` (default: the bare wire), ``tcp``,
    ``rdma`` or ``grpc`` presets (:data:`simdist.network.transport.PROTOCOLS`, with their
    sources), and each figure may be given instead of the preset's: ``efficiency`` (share
    of line rate carrying payload), ``per_message_overhead`` (a duration per message) and
    ``serialization_bandwidth`` (bytes per second a host's CPU encodes, and decodes, a
    message at; the sender encodes before the wire, the receiver decodes after).
    """

    topology: Literal["switch", "leaf_spine"] = Field("switch", examples=["leaf_spine"])
    duplex: Literal["full", "half"] = "full"
    sharing: Literal["fair", "fifo"] = "fair"
    # leaf_spine only (simdist.network.leaf_spine): machines per leaf (rack), the leaf's
    # host-facing over spine-facing bandwidth (k:1), the latency of one switch hop.
    hosts_per_leaf: PositiveInt | None = Field(None, examples=[4])
    oversubscription: Annotated[float, BeforeValidator(_ratio)] | None = Field(
        None, examples=["4:1"]
    )
    hop_latency_s: Latency | None = Field(None, alias="hop_latency", examples=["1us"])
    # Inside each host (simdist.network.intranode): one shared link, NVLink ports, or a
    # PCIe switch whose uplink (pcie_uplink, default PCIe 3.0 x16) the devices share.
    intra_host: Literal["shared", "nvlink", "pcie"] = Field("shared", examples=["nvlink"])
    pcie_uplink_Bps: Bandwidth | None = Field(None, alias="pcie_uplink", examples=["15.75GB/s"])
    protocol: Literal["ideal", "tcp", "rdma", "grpc"] = Field("ideal", examples=["grpc"])
    efficiency: Float | None = Field(None, gt=0, le=1, examples=[0.9])
    per_message_overhead_s: Latency | None = Field(
        None, alias="per_message_overhead", examples=["100us"]
    )
    serialization_Bps: Bandwidth | None = Field(
        None, alias="serialization_bandwidth", examples=["1.6GB/s"]
    )

    @model_validator(mode="after")
    def _topology_fields(self) -> NetworkSpec:
        if self.topology != "leaf_spine":
            for field in ("hosts_per_leaf", "oversubscription", "hop_latency_s"):
                if getattr(self, field) is not None:  # null (e.g. from --set) clears it
                    key = NetworkSpec.model_fields[field].alias or field
                    raise fail(
                        key,
                        f"only used by topology: leaf_spine (topology here is "
                        f"{self.topology}); remove {key}, or set topology: leaf_spine",
                    )
        else:
            if self.hosts_per_leaf is None:
                raise fail(
                    "hosts_per_leaf",
                    "missing; topology leaf_spine needs the machines per leaf (rack), "
                    "e.g. hosts_per_leaf: 4",
                )
            if self.oversubscription is None:
                self.oversubscription = 1.0
            if self.hop_latency_s is None:
                self.hop_latency_s = 0.0
        if self.intra_host == "shared" and self.pcie_uplink_Bps is not None:
            raise fail(
                "pcie_uplink",
                "only used by intra_host: pcie or nvlink (intra_host here is shared); "
                "remove pcie_uplink, or set intra_host: pcie",
            )
        return self


class DeviceSpec(Spec):
    """The accelerator of every replica: a named profile, optionally overridden.

    ``peak_flops`` and ``efficiency`` stay ``None`` unless given; the cluster combines
    them with the profile (:func:`simdist.cluster.effective_profile`).
    """

    profile: str = "cpu"
    precision: Precision | None = None  # None: the profile's own (fp32; bf16 on tpu-v4)
    peak_flops: Flops | None = None
    efficiency: Float | None = Field(None, gt=0, le=1)
    # Calibration: one device's measured step time, or its measured examples per second.
    compute_time_s: PositiveDuration | None = Field(None, alias="compute_time")
    examples_per_s: Float | None = Field(None, gt=0)

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        if value not in DEVICE_PROFILES:
            raise ValueError(choice_message(value, tuple(DEVICE_PROFILES), "profile"))
        return value

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


_HOST_RE = re.compile(r"[A-Za-z0-9_.-]+")


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
        if not _HOST_RE.fullmatch(value):
            raise ValueError(
                f"got {show(value)}; expected letters, digits, '_', '.' and '-' only "
                "(it names the host's links and devices), e.g. name: a100-0"
            )
        return value

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        if value not in DEVICE_PROFILES:
            raise ValueError(choice_message(value, tuple(DEVICE_PROFILES), "profile"))
        return value

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
        """This host's device section: its own, or ``default`` (the cluster's)."""
        if self.device is not None:
            return self.device
        if self.profile is not None:
            return DeviceSpec(profile=self.profile)
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


# ---------------------------------------------------------------- workload


class ModelSpec(Spec):
    """Which model of the zoo, and its options.

    ``hidden``: the mlp's hidden layer widths. resnet only: ``blocks`` (residual blocks
    per stage), ``width`` (channels of the first stage, doubled at each next one),
    ``batch_norm_momentum`` of the moving statistics, and ``sync_batch_norm`` (TF's
    SyncBatchNormalization). ``sync_batch_norm`` sits here, on the model, because in
    TensorFlow it is a layer of the model (``SyncBatchNormalization``, Keras 3's
    ``BatchNormalization(synchronized=True)``), not an option of the strategy: the same
    model behaves the same under every strategy that runs several replicas.
    The resnet options are None for the other models (a resolved scenario omits
    them) and filled with ``RESNET_DEFAULTS`` for resnet.
    """

    name: ModelName
    hidden: list[PositiveInt] = Field(default_factory=lambda: [128])
    blocks: list[PositiveInt] | None = Field(None, min_length=1, examples=[[1, 1]])
    width: PositiveInt | None = Field(None, examples=[16])
    batch_norm_momentum: Float | None = Field(None, ge=0, lt=1, examples=[0.9])
    sync_batch_norm: bool | None = Field(None, examples=["true"])

    @model_validator(mode="after")
    def _resnet_options(self) -> ModelSpec:
        for option, default in RESNET_DEFAULTS.items():
            if self.name == "resnet":
                if getattr(self, option) is None:
                    setattr(self, option, copy.deepcopy(default))
            elif getattr(self, option) is not None:
                raise fail(option, f"is an option of model resnet only, not of {self.name}")
        return self


def _resolve_file(path: Path, info: ValidationInfo, field: str, what: str) -> Path:
    base = (info.context or {}).get("base_dir")
    try:
        full = path if path.is_absolute() or base is None else Path(base) / path
        exists, regular = full.exists(), full.is_file()
        resolved = full.resolve() if regular else full
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long for the system
        why = getattr(exc, "strerror", None) or str(exc)
        raise fail(field, f"got {show(str(path))}: not a usable file name ({why})") from None
    if not regular:
        problem = "not a regular file" if exists else "file not found"
        raise fail(field, f"{problem}: {str(path)!r} (looked at {str(full)!r}); expected {what}")
    return resolved


class DatasetSpec(Spec):
    """A built-in dataset or an ``.npz`` file with ``x``/``y`` arrays.

    ``n_examples``, ``n_features`` and ``noise`` shape the generated sets
    (``synthetic_regression``, ``teacher``); ``n_classes`` is the teacher's, whose options
    left out take :data:`~simdist.catalog.TEACHER_DEFAULTS` (simdist/numerics/generated.py).
    """

    name: DatasetName
    path: Path | None = None
    test_fraction: Float = Field(0.2, gt=0, lt=1)
    n_examples: Int = Field(2048, ge=1)
    n_features: Int = Field(16, ge=1)
    noise: Float = Field(0.1, ge=0)
    n_classes: Int = Field(10, ge=2, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _npz_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "npz" in data:
            data = dict(data)
            if "path" in data:
                raise fail("npz", "give npz: <file> or name: npz with path: <file>, not both")
            data.setdefault("name", "npz")
            data["path"] = data.pop("npz")
        return data

    @model_validator(mode="after")
    def _resolve_path(self, info: ValidationInfo) -> DatasetSpec:
        if self.name == "teacher":  # its own defaults for the options left out
            for key, value in TEACHER_DEFAULTS.items():
                if key not in self.model_fields_set:
                    setattr(self, key, value)
        if self.n_examples > MAX_GENERATED_EXAMPLES:
            raise fail(
                "n_examples",
                f"got {show(self.n_examples)}; a generated data set is held in memory and "
                f"capped at {MAX_GENERATED_EXAMPLES:,} examples, e.g. n_examples: 2048",
            )
        if self.n_examples * self.n_features > MAX_GENERATED_VALUES:
            raise fail(
                "n_features",
                f"got {show(self.n_features)}: {self.n_examples:,} examples x "
                f"{show(self.n_features)} features is above the cap of "
                f"{MAX_GENERATED_VALUES:,} generated values (held in memory); "
                "e.g. n_features: 16",
            )
        if self.name != "npz":
            if self.path is not None:
                raise fail("path", f"path is only used with npz datasets, not {self.name!r}")
            return self
        if self.path is None:
            raise fail("npz", "missing; required for an npz dataset, e.g. dataset: {npz: d.npz}")
        self.path = _resolve_file(self.path, info, "npz", "an .npz file with arrays x and y")
        return self


class ScheduleSpec(Spec):
    """Learning-rate schedule, as the optax schedule of the same name."""

    kind: ScheduleKind = "constant"
    decay_steps: Int | None = Field(None, ge=1)
    alpha: Float = 0.0
    decay_rate: Float = Field(0.5, gt=0, le=1)
    transition_steps: Int = Field(1000, ge=1)
    warmup_steps: Int = Field(0, ge=0)
    boundaries: list[Annotated[int, Field(strict=True, ge=0)]] = Field(default_factory=list)
    scales: list[Float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _piecewise(self) -> ScheduleSpec:
        if self.kind == "piecewise_constant" and len(self.boundaries) != len(self.scales):
            raise fail(
                "scales",
                f"got {len(self.scales)} scales for {len(self.boundaries)} boundaries; "
                "give one scale per boundary, e.g. boundaries: [1000, 2000], scales: [0.1, 0.1]",
            )
        return self


class OptimizerSpec(Spec):
    """Optimizer and learning rate (per update, with the loss averaged over the global batch)."""

    name: OptimizerName
    learning_rate: Float = Field(gt=0)
    momentum: Float = Field(0.9, ge=0, lt=1)
    schedule: Annotated[ScheduleSpec | None, BeforeValidator(_shorthand("kind"))] = None


class WorkloadSpec(Spec):
    """What is trained, on what, for how long, and whose layers set the clock.

    Exactly one of ``batch_size`` (per replica) and ``global_batch_size`` is given; the
    scenario fills in the other, so both are ints after validation. Likewise exactly one
    of ``steps`` and ``epochs``; use :meth:`total_steps`.

    The clock follows, first found: ``profile`` (a layers.csv or ASTRA-sim workload file),
    ``timing_model`` (a zoo model costed at its own input shape, e.g. vgg16) or ``model``.
    With numerics on and one of the first two given, ``model`` trains for real on
    ``dataset`` while the clock follows the other: a surrogate. ``dataset`` may be omitted in
    timing-only runs (``numerics: false``); ``input_shape`` overrides the clock model's own.
    """

    model: Annotated[ModelSpec | None, BeforeValidator(_shorthand("name"))] = None
    dataset: Annotated[DatasetSpec | None, BeforeValidator(_shorthand("name"))] = None
    timing_model: Annotated[ModelSpec | None, BeforeValidator(_shorthand("name"))] = None
    profile: Path | None = None
    input_shape: list[PositiveInt] | None = None
    batch_size: Int = Field(0, ge=1)
    global_batch_size: Int = Field(0, ge=1)
    optimizer: OptimizerSpec
    steps: Int | None = Field(None, ge=1)
    epochs: Float | None = Field(None, gt=0)
    eval_every: Int = Field(100, ge=0)
    init_from: Path | None = None

    @model_validator(mode="after")
    def _exactly_one(self, info: ValidationInfo) -> WorkloadSpec:
        given = self.model_fields_set
        if "batch_size" in given and "global_batch_size" in given:
            raise fail(
                "global_batch_size",
                "give either batch_size (per replica) or global_batch_size, not both",
            )
        if "batch_size" not in given and "global_batch_size" not in given:
            raise fail(
                "batch_size",
                "missing; give batch_size (per replica) or global_batch_size, e.g. batch_size: 32",
            )
        if self.steps is not None and self.epochs is not None:
            raise fail("epochs", "give either steps or epochs, not both, e.g. steps: 1000")
        if self.steps is None and self.epochs is None:
            raise fail("steps", "missing; give steps or epochs, e.g. steps: 1000")
        if self.init_from is not None:
            self.init_from = _resolve_file(
                self.init_from, info, "init_from", "a parameter file written by simdist"
            )
        if self.profile is not None:
            if self.timing_model is not None:
                raise fail(
                    "timing_model",
                    "give timing_model or profile (whose layers set the clock), not both",
                )
            self.profile = _resolve_file(
                self.profile, info, "profile", "a layers.csv or an ASTRA-sim workload file"
            )
        if self.model is None and self.profile is None:
            raise fail("model", "missing; name a model of the zoo, e.g. model: mlp")
        return self

    @property
    def clock_model(self) -> ModelSpec:
        """The zoo model whose layers set the clock (when no profile file is given)."""
        model = self.timing_model or self.model
        assert model is not None
        return model

    @property
    def surrogate(self) -> bool:
        """Whether the clock follows another model than the one trained (profile/timing_model)."""
        return self.model is not None and (
            self.profile is not None or self.timing_model is not None
        )

    def total_steps(self, n_train: int) -> int:
        """Number of training steps: ``steps``, or ``ceil(epochs * n_train / global batch)``."""
        if self.steps is not None:
            return self.steps
        assert self.epochs is not None
        return max(1, math.ceil(self.epochs * n_train / self.global_batch_size))


# ---------------------------------------------------------------- strategy

_STRATEGY_SPECS = spec_classes()

StrategySpec = Annotated[Union[_STRATEGY_SPECS], Field(discriminator="kind")]  # noqa: UP007
"""Any registered strategy's ``Spec``, chosen by ``kind``."""

STRATEGIES: tuple[str, ...] = tuple(kind for spec in _STRATEGY_SPECS for kind in spec.kinds())
"""Every strategy ``kind`` a scenario accepts, aliases (``default``) included."""


# ---------------------------------------------------------------- system effects

SlowdownKind = Literal["constant", "lognormal", "pareto"]
_TARGET_RE = re.compile(r"(?P<role>worker|ps|device)\s*(?P<index>\d+)")


class SlowdownSpec(Spec):
    """How much slower a straggling step is: a factor >= 1, fixed or drawn per step."""

    kind: SlowdownKind = "constant"
    factor: Float = Field(2.0, ge=1)  # constant
    mu: Float = 0.0  # lognormal: factor = max(1, exp(mu + sigma * N(0, 1)))
    sigma: Float = Field(0.5, ge=0)
    alpha: Float = Field(1.5, gt=0)  # pareto: factor = 1 + Lomax(alpha), heavy-tailed


def _slowdown(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"kind": "constant", "factor": value}
    return _shorthand("kind")(value)


class StragglerSpec(Spec):
    """Slow compute: on one worker's devices, one device, or every device.

    ``probability`` 1 (the default) makes a persistent straggler; below 1 each
    step of each targeted device is slowed with that probability.
    """

    worker: Int | None = Field(None, ge=0)
    device: Int | None = Field(None, ge=0)
    slowdown: Annotated[SlowdownSpec, BeforeValidator(_slowdown)]
    probability: Float = Field(1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _one_target(self) -> StragglerSpec:
        if self.worker is not None and self.device is not None:
            raise fail("device", "give worker or device, not both, e.g. worker: 3")
        return self


class FailureSpec(Spec):
    """A task that fails at a time, or at a seeded rate, and restarts after a delay."""

    target: str
    at_s: PositiveDuration | None = Field(None, alias="at")
    mtbf_s: PositiveDuration | None = Field(None, alias="mtbf")
    restart_after_s: Latency | None = Field(None, alias="restart_after")
    restart_at_s: PositiveDuration | None = Field(None, alias="restart_at", exclude=True)

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        match = _TARGET_RE.fullmatch(value.strip())
        if not match:
            raise ValueError(
                f"got {show(value)}; expected 'worker N', 'ps N' or 'device N', "
                "e.g. target: worker 1"
            )
        return f"{match['role']} {int(match['index'])}"

    @model_validator(mode="after")
    def _when(self) -> FailureSpec:
        if (self.at_s is None) == (self.mtbf_s is None):
            raise fail("at", "give exactly one of at (a time) or mtbf (a rate), e.g. at: 50ms")
        if (self.restart_after_s is None) == (self.restart_at_s is None):
            raise fail(
                "restart_after",
                "give exactly one of restart_after or restart_at, e.g. restart_after: 20ms",
            )
        if self.restart_at_s is not None:
            if self.at_s is None:
                raise fail("restart_at", "restart_at needs at; with mtbf use restart_after")
            if self.restart_at_s <= self.at_s:
                raise fail(
                    "restart_at",
                    f"got {self.restart_at_s:g} s, not after the failure at {self.at_s:g} s; "
                    "a task restarts after it fails, e.g. restart_after: 20ms",
                )
            self.restart_after_s = self.restart_at_s - self.at_s
        return self

    @property
    def role(self) -> str:
        """``worker``, ``ps`` or ``device``."""
        return self.target.split()[0]

    @property
    def index(self) -> int:
        """The task's (or device's) index."""
        return int(self.target.split()[1])

    @property
    def restart_s(self) -> float:
        """Seconds from the failure to the restart."""
        assert self.restart_after_s is not None
        return self.restart_after_s


class FaultsSpec(Spec):
    """What goes wrong: stragglers and failures."""

    stragglers: list[StragglerSpec] = Field(default_factory=list)
    failures: list[FailureSpec] = Field(default_factory=list)


class CheckpointSpec(Spec):
    """The chief writes parameters + optimizer state every K steps or T seconds."""

    every_steps: Int | None = Field(None, ge=1)
    every_s: PositiveDuration | None = None
    storage_bandwidth_Bps: Bandwidth | None = Field(None, alias="storage_bandwidth")

    @model_validator(mode="after")
    def _complete(self) -> CheckpointSpec:
        if (self.every_steps is None) == (self.every_s is None):
            raise fail(
                "every_steps", "give exactly one of every_steps or every_s, e.g. every_steps: 100"
            )
        if self.storage_bandwidth_Bps is None:
            raise fail(
                "storage_bandwidth",
                "missing; a checkpoint's cost is bytes / storage bandwidth, "
                "e.g. storage_bandwidth: 1GB/s",
            )
        return self


class InputSpec(Spec):
    """Per-batch loading cost and prefetch depth (the tf.data prefetch picture)."""

    per_example_s: Latency | None = Field(None, alias="per_example")
    bandwidth_Bps: Bandwidth | None = Field(None, alias="bandwidth")
    prefetch: Int = Field(1, ge=0)

    @model_validator(mode="after")
    def _one_cost(self) -> InputSpec:
        if (self.per_example_s is None) == (self.bandwidth_Bps is None):
            raise fail(
                "per_example",
                "give exactly one of per_example (seconds per example) or bandwidth "
                "(bytes of examples per second), e.g. per_example: 20us",
            )
        return self


# ---------------------------------------------------------------- scenario


def _default_strategy() -> Any:
    """The first registered spec with its own default kind: ``one_device``."""
    return _STRATEGY_SPECS[0]()


# ---------------------------------------------------------------- jobs

# A job's name names its report subfolder beside the scenario's own files: no dots.
_JOB_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _task_choice(key: str, least: int) -> Callable[[object], object]:
    """A job's ``hosts`` / ``ps``: a list of the cluster's task names, or a count."""
    example = {"hosts": "hosts: [worker0, worker1] or hosts: 2", "ps": "ps: [ps0] or ps: 1"}[key]

    def check(value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < least:
                raise ValueError(f"got {value}; expected a count >= {least}, e.g. {example}")
            return value
        if not isinstance(value, list):
            raise ValueError(
                f"got {show(value)}; expected a list of the cluster's {key} names or a "
                f"count, e.g. {example}"
            )
        if least and not value:
            raise ValueError(f"got an empty list; expected at least one name, e.g. {example}")
        for i, name in enumerate(value):
            if not isinstance(name, str) or not _HOST_RE.fullmatch(name):
                raise ValueError(
                    f"got {show(name)} at [{i}]; expected the name of a cluster host, e.g. "
                    f"{example}"
                )
            if name in value[:i]:
                raise ValueError(f"got {name!r} twice; list each host once, e.g. {example}")
        return value

    return check


class JobSpec(Spec):
    """One training job of a cluster that several share (the scenario's ``jobs:``).

    A job runs its own ``workload`` with its own ``strategy`` (and ``faults``,
    ``checkpoint``, ``input``) on some of the cluster's hosts, and its traffic shares the
    cluster's network with every other job's. ``hosts`` lists the worker hosts it runs on
    by name (the first is its chief), or counts them: a count takes the first free worker
    hosts in cluster order (those no job names and no earlier count took). ``ps`` names
    (or counts) the cluster's parameter-server tasks it uses, for parameter_server.

    After validation ``hosts`` and ``ps`` are the names, and :attr:`scenario` is the job
    as a scenario of its own: its hosts as the cluster (same names, the cluster's links),
    the scenario's numerics and a seed of its own (:func:`simdist.seeds.job_seed`).
    """

    name: str = Field(examples=["allreduce"])
    hosts: Annotated[list[str] | Int, BeforeValidator(_task_choice("hosts", 1))] = Field(
        examples=["[worker0, worker1]"]
    )
    ps: Annotated[list[str] | Int, BeforeValidator(_task_choice("ps", 0))] = Field(
        0, examples=["[ps0]"]
    )
    workload: WorkloadSpec
    strategy: Annotated[StrategySpec, BeforeValidator(_shorthand("kind"))] = Field(
        default_factory=_default_strategy
    )
    faults: FaultsSpec = Field(default_factory=FaultsSpec)
    checkpoint: CheckpointSpec | None = None
    input: InputSpec | None = None
    _scenario: Any = PrivateAttr(None)

    @field_validator("name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not _JOB_NAME_RE.fullmatch(value) or len(value) > MAX_NAME_CHARS:
            raise ValueError(
                f"got {show(value)}; expected a letter or digit first, then only letters, "
                f"digits, '_' and '-', at most {MAX_NAME_CHARS} characters (it names the "
                "job's report folder), e.g. name: allreduce"
            )
        return value

    @property
    def scenario(self) -> Scenario:
        """This job as a scenario of its own (set when the enclosing scenario validates)."""
        assert self._scenario is not None, "a JobSpec is resolved by its Scenario"
        return self._scenario


class Scenario(Spec):
    """One validated run: cluster + workload + strategy + seed, units in SI.

    The cross-checks run in this order: host names (the chief trains unless the strategy
    says otherwise), the strategy's own :meth:`~simdist.spec.StrategySpecBase.check`, the
    batch split over the replicas, and the fault targets. The first problem is raised.
    """

    name: str
    seed: Int = Field(0, ge=0)
    numerics: Annotated[bool, Field(strict=True)] = True
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    # Required (a missing one is reported as before), and None only with jobs:.
    workload: WorkloadSpec | None
    strategy: Annotated[StrategySpec, BeforeValidator(_shorthand("kind"))] = Field(
        default_factory=_default_strategy
    )
    faults: FaultsSpec = Field(default_factory=FaultsSpec)
    checkpoint: CheckpointSpec | None = None
    input: InputSpec | None = None
    jobs: list[JobSpec] | None = Field(
        None, examples=["[{name: a, hosts: 2, workload: {...}, strategy: multi_worker_mirrored}]"]
    )

    @model_validator(mode="before")
    @classmethod
    def _jobs_own_sections(cls, data: Any) -> Any:
        """With ``jobs:``, the per-run sections belong to each job, not to the scenario."""
        if not isinstance(data, dict) or data.get("jobs") is None:
            return data
        from simdist.scenario.jobs import JOB_SECTIONS

        for key in JOB_SECTIONS:
            if key in data:
                raise fail(
                    key,
                    f"the scenario has jobs:, and each job has its own {key}; move this "
                    f"section into the jobs, e.g. jobs: [{{name: a, hosts: 2, {key}: ...}}]",
                )
        return {**data, "workload": None}

    @field_validator("name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                f"got {show(value)}; expected a letter or digit first, then only letters, "
                "digits, '_', '.' and '-' (it names the report folder), e.g. name: ps_4w2s"
            )
        if len(value) > MAX_NAME_CHARS:
            raise ValueError(
                f"got a name of {len(value)} characters; at most {MAX_NAME_CHARS} "
                "(it names the report folder), e.g. name: ps_4w2s"
            )
        return value

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Scenario:
        if self.jobs is not None:
            from simdist.scenario.jobs import resolve_jobs

            resolve_jobs(self, info.context)
            return self
        if self.workload is None:
            raise fail("workload", f"got null; expected a mapping, e.g. {EXAMPLES['workload']}")
        _check_workload(self)
        _resolve_hosts(self)
        self.strategy.check(self)
        _check_network(self)
        _check_ps_placement(self)
        _resolve_batch(self)
        _check_size(self)
        _check_faults(self)
        return self

    @property
    def replicas(self) -> int:
        """Number of model replicas computing a gradient in one step."""
        return self.strategy.replicas(self.cluster)

    @property
    def global_batch(self) -> int:
        """Examples per step over all replicas."""
        return self.workload.batch_size * self.replicas

    @property
    def chief_trains(self) -> bool:
        """Whether a ``chief`` task is given and trains as worker 0 (see ClusterSpec)."""
        return bool(self.cluster.chief_names) and self.strategy.chief_trains


def _check_workload(s: Scenario) -> None:
    """Numerics train ``model`` on ``dataset``; timing-only runs need neither a data set nor
    (given a profile file) a zoo model."""
    w = s.workload
    if w.dataset is None and w.epochs is not None:
        raise fail(
            "workload.epochs",
            "an epoch is a pass over a data set and none is named; give steps, e.g. "
            "steps: 100, or name the data set whose size sets the epoch, e.g. dataset: digits",
        )
    if not s.numerics:
        return
    if w.model is None:
        raise fail(
            "workload.model",
            "missing; numerics train a zoo model (the profile file only sets the clock), "
            "e.g. model: mlp, or run timing-only with numerics: false",
        )
    if w.dataset is None:
        raise fail(
            "workload.dataset",
            "missing; numerics need data to train on, e.g. dataset: digits, "
            "or run timing-only with numerics: false",
        )
    if w.input_shape and not w.surrogate:
        raise fail(
            "workload.input_shape",
            "sets the input of the model the clock follows, and with numerics on the trained "
            "model takes its data set's; use it with timing_model (a surrogate) or with "
            "numerics: false",
        )
    if w.model.name in FULLSIZE_MODELS:
        raise fail(
            "workload.model",
            f"{w.model.name} is a full-size model for the clock only: run it timing-only with "
            f"numerics: false, or train a small model and time it as this one, e.g. "
            f"model: mlp and timing_model: {w.model.name}",
        )


def _resolve_hosts(s: Scenario) -> None:
    c = s.cluster
    chief_trains = s.chief_trains
    given_workers = "worker_names" in c.model_fields_set
    if c.host_specs is not None:
        names = [h.name or f"worker{i}" for i, h in enumerate(c.host_specs)]
        taken = set(c.ps_names)
        for i, (host, name) in enumerate(zip(c.host_specs, names, strict=True)):
            if name in taken:
                raise fail(
                    f"cluster.hosts[{i}].name",
                    f"got {name!r}, already the name of another host; host names must be "
                    f"unique, e.g. name: {name}-{i}",
                )
            taken.add(name)
            host.name = name
    elif given_workers:
        names = (c.chief_names if chief_trains else []) + c.worker_names
        if "hosts" in c.model_fields_set and c.hosts != len(names):
            counted = " (chief included: it trains)" if chief_trains else ""
            raise fail(
                "cluster.hosts",
                f"got {c.hosts} but cluster.worker lists {len(names)} hosts{counted}; "
                "give one of the two, e.g. hosts: 4",
            )
    else:
        n_tasks = c.hosts - len(c.chief_names) if chief_trains else c.hosts
        if n_tasks < 0:
            raise fail("cluster.hosts", "got 0 hosts besides the chief; expected hosts >= 1")
        names = (c.chief_names if chief_trains else []) + [f"worker{i}" for i in range(n_tasks)]
    if not names:
        raise fail("cluster.worker", f"expected at least one worker, e.g. {EXAMPLES['worker']}")
    every = names + ([] if chief_trains else c.chief_names) + c.ps_names
    duplicates = sorted({n for n in every if every.count(n) > 1})
    if duplicates:
        raise fail("cluster", f"host name {duplicates[0]!r} is used twice; task names must differ")
    c.worker_names = names
    c.hosts = len(names)


def _check_ps_placement(s: Scenario) -> None:
    """``cluster.ps_placement`` places existing PS tasks on existing worker machines."""
    c = s.cluster
    placement = c.ps_placement
    if placement == "separate":
        return
    if c.ps == 0:
        raise fail(
            "cluster.ps_placement",
            f"got {show(placement)} but the cluster has no parameter-server tasks; remove "
            "ps_placement, or give ps tasks with strategy: parameter_server, e.g. ps: 2",
        )
    if isinstance(placement, list):
        eg = f"ps_placement: [{', '.join(c.worker_names[i % c.hosts] for i in range(c.ps))}]"
        if len(placement) != c.ps:
            raise fail(
                "cluster.ps_placement",
                f"lists {len(placement)} hosts for {c.ps} parameter-server tasks; expected "
                f"one worker host per PS task, e.g. {eg}",
            )
        for i, name in enumerate(placement):
            if name not in c.worker_names:
                raise fail(
                    f"cluster.ps_placement[{i}]",
                    f"got {show(name)}, not a worker host; expected one of "
                    f"{', '.join(c.worker_names)}, e.g. {eg}",
                )


def _check_network(s: Scenario) -> None:
    """A strategy with a wiring of its own (tpu: the torus) takes no leaf_spine or
    intra_host fabric: it would be silently ignored."""
    net = s.cluster.network
    if net.topology == "switch" and net.intra_host == "shared":
        return  # the default wiring: nothing to check (and no strategy module to import)
    own = type(s.strategy).wiring  # the class's topology, without importing it (SimPy)
    if own == "switch":
        return
    for field, value in (("topology", net.topology), ("intra_host", net.intra_host)):
        default = NetworkSpec.model_fields[field].default
        if value != default:
            raise fail(
                f"cluster.network.{field}",
                f"got {value!r}; strategy {s.strategy.kind} runs on its own {own} topology, "
                f"so cluster.network.{field} cannot change it; remove it (or use "
                f"{field}: {default})",
            )


def _resolve_batch(s: Scenario) -> None:
    w, n = s.workload, s.replicas
    if "global_batch_size" in w.model_fields_set:
        if w.global_batch_size % n:
            up = -(-w.global_batch_size // n) * n
            raise fail(
                "workload.global_batch_size",
                f"global_batch_size: {w.global_batch_size} is not divisible by {n} replicas; "
                f"use a multiple of {n}, e.g. {up}",
            )
        w.batch_size = w.global_batch_size // n
    else:
        w.global_batch_size = w.batch_size * n


def _check_size(s: Scenario) -> None:
    """A cluster one process can build: at most MAX_DEVICES devices (the strategy has set
    ``devices_per_host`` where it decides it, as the tpu's topology does)."""
    c = s.cluster
    devices = max(c.n_devices, s.replicas)
    if devices > MAX_DEVICES:
        counted = (
            f"{c.hosts:,} hosts x {c.devices_per_host:,} devices is {devices:,} devices"
            if c.host_specs is None
            else f"the {c.hosts:,} listed hosts hold {devices:,} devices"
        )
        raise fail(
            "cluster",
            f"{counted}; a simulated cluster has at most {MAX_DEVICES:,}, e.g. hosts: 4",
        )


def _check_faults(s: Scenario) -> None:
    """Fault targets must exist in this cluster (the strategy has vetted the rest)."""
    c = s.cluster
    workers = s.strategy.workers(c)
    devices = s.replicas
    for i, st in enumerate(s.faults.stragglers):
        if st.worker is not None and st.worker >= workers:
            raise fail(
                f"faults.stragglers[{i}].worker",
                f"got {st.worker}; this cluster has workers 0..{workers - 1}, e.g. worker: 0",
            )
        if st.device is not None and st.device >= devices:
            raise fail(
                f"faults.stragglers[{i}].device",
                f"got {st.device}; this run has devices 0..{devices - 1}, e.g. device: 0",
            )
    for i, f in enumerate(s.faults.failures):
        limit = {"worker": workers, "ps": c.ps, "device": devices}[f.role]
        if f.role == "ps" and c.ps == 0:
            # Every strategy's check has made ps > 0 exactly when it uses ps tasks.
            raise fail(
                f"faults.failures[{i}].target",
                f"got {f.target!r}; only parameter_server has ps tasks; e.g. target: worker 0",
            )
        if f.index >= limit:
            raise fail(
                f"faults.failures[{i}].target",
                f"got {f.target!r}; this cluster has {f.role} 0..{limit - 1}, "
                f"e.g. target: {f.role} 0",
            )
