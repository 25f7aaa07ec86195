"""Scenario files: the YAML schema, its validation, ``--set`` overrides and error messages.

A scenario is the one input of a run. It is validated completely before anything is
built, and the first problem is reported as a single :class:`ScenarioError` naming the
file, the dotted field path, the bad value and an accepted example, because users edit
these files by hand and a pydantic traceback tells them none of that.

YAML keys are the user-facing names (``bandwidth: 10Gbit/s``); attributes carry SI units
in their names (``bandwidth_Bps == 1.25e9``). Adding a top-level section (faults,
checkpoint, input, ...) means: one model class, one field on :class:`Scenario`, and
optionally a few entries in ``_EXAMPLES``; the loader and error reporting are generic.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from simdist.cluster import DEVICE_PROFILES
from simdist.errors import ScenarioError
from simdist.units import UnitError, parse_bandwidth, parse_duration, parse_flops, parse_size

__all__ = [
    "DATASETS",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULES",
    "STRATEGIES",
    "CentralStorageStrategy",
    "ClusterSpec",
    "DatasetSpec",
    "DeviceSpec",
    "LinkSpec",
    "LinksSpec",
    "MirroredStrategy",
    "ModelSpec",
    "MultiWorkerMirroredStrategy",
    "OneDeviceStrategy",
    "OptimizerSpec",
    "ParameterServerStrategy",
    "Scenario",
    "ScheduleSpec",
    "StrategySpec",
    "TPUStrategy",
    "WorkloadSpec",
    "apply_overrides",
    "dump_scenario",
    "load_scenario",
    "scenario_from_dict",
]

ModelName = Literal["softmax", "mlp", "cnn"]
DatasetName = Literal["digits", "synthetic_regression", "npz"]
OptimizerName = Literal["sgd", "momentum", "adam"]
ScheduleKind = Literal["constant", "cosine", "exponential", "warmup_cosine", "piecewise_constant"]
Execution = Literal["auto", "batched", "devices"]

MODELS: tuple[str, ...] = typing.get_args(ModelName)
DATASETS: tuple[str, ...] = typing.get_args(DatasetName)
OPTIMIZERS: tuple[str, ...] = typing.get_args(OptimizerName)
SCHEDULES: tuple[str, ...] = typing.get_args(ScheduleKind)

# Sections that may be written as a bare string, and the key that string stands for.
_SHORTHAND_KEYS = {"strategy": "kind", "schedule": "kind", "model": "name", "dataset": "name"}
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_TASK_RE = re.compile(r"(?P<host>[A-Za-z0-9_.-]+)(?::(?P<port>\d+))?")

# Examples shown after "e.g." in messages, keyed by the YAML key of the field.
_EXAMPLES: dict[str, str] = {
    "name": "name: my_run",
    "seed": "seed: 0",
    "numerics": "numerics: true",
    "cluster": "cluster: {hosts: 4}",
    "hosts": "hosts: 4",
    "worker": "worker: [w0:2222, w1:2222]",
    "chief": "chief: [c0:2222]",
    "ps": "ps: 2",
    "devices_per_host": "devices_per_host: 4",
    "device": "device: {profile: v100}",
    "profile": "profile: v100",
    "peak_flops": "peak_flops: 15.7TFLOP/s",
    "efficiency": "efficiency: 0.4",
    "compute_time": "compute_time: 2ms",
    "links": "links: {network: {bandwidth: 10Gbit/s, latency: 50us}}",
    "intra_host": "intra_host: {bandwidth: 300GB/s, latency: 2us}",
    "network": "network: {bandwidth: 10Gbit/s, latency: 50us}",
    "bandwidth": "bandwidth: 10Gbit/s",
    "latency": "latency: 50us",
    "workload": (
        "workload: {model: mlp, dataset: digits, batch_size: 32, "
        "optimizer: {name: sgd, learning_rate: 0.05}, steps: 1000}"
    ),
    "model": "model: mlp",
    "hidden": "hidden: [128, 64]",
    "dataset": "dataset: digits",
    "npz": "npz: data/train.npz",
    "path": "path: data/train.npz",
    "test_fraction": "test_fraction: 0.2",
    "n_examples": "n_examples: 2048",
    "n_features": "n_features: 16",
    "noise": "noise: 0.1",
    "batch_size": "batch_size: 32",
    "global_batch_size": "global_batch_size: 128",
    "optimizer": "optimizer: {name: sgd, learning_rate: 0.05}",
    "learning_rate": "learning_rate: 0.05",
    "momentum": "momentum: 0.9",
    "schedule": "schedule: {kind: cosine}",
    "decay_steps": "decay_steps: 1000",
    "alpha": "alpha: 0.0",
    "decay_rate": "decay_rate: 0.5",
    "transition_steps": "transition_steps: 1000",
    "warmup_steps": "warmup_steps: 100",
    "boundaries": "boundaries: [1000, 2000]",
    "scales": "scales: [0.1, 0.1]",
    "steps": "steps: 1000",
    "epochs": "epochs: 5",
    "eval_every": "eval_every: 100",
    "init_from": "init_from: checkpoints/params.npz",
    "strategy": "strategy: mirrored",
    "kind": "kind: mirrored",
    "execution": "execution: auto",
    "all_reduce": "all_reduce: ring",
    "communication": "communication: ring",
    "bytes_per_pack": "bytes_per_pack: 4MiB",
    "topology": "topology: [2, 2]",
    "reduce_bandwidth": "reduce_bandwidth: 25.6GB/s",
    "partitioner": "partitioner: round_robin",
    "min_shard_bytes": "min_shard_bytes: 256KiB",
    "max_shards": "max_shards: 4",
    "staleness_bound": "staleness_bound: 4",
    "lr_staleness": "lr_staleness: inverse",
    "mode": "mode: sync",
    "backup_workers": "backup_workers: 1",
    "faults": "faults: {stragglers: [{worker: 3, slowdown: 2.0}]}",
    "stragglers": "stragglers: [{worker: 3, slowdown: 2.0}]",
    "slowdown": "slowdown: 2.0",
    "probability": "probability: 0.1",
    "mu": "mu: 0.0",
    "sigma": "sigma: 0.5",
    "failures": "failures: [{target: worker 1, at: 50ms, restart_after: 20ms}]",
    "target": "target: worker 1",
    "at": "at: 50ms",
    "mtbf": "mtbf: 2s",
    "restart_after": "restart_after: 20ms",
    "restart_at": "restart_at: 70ms",
    "checkpoint": "checkpoint: {every_steps: 100, storage_bandwidth: 1GB/s}",
    "every_steps": "every_steps: 100",
    "every_s": "every_s: 0.5s",
    "storage_bandwidth": "storage_bandwidth: 1GB/s",
    "input": "input: {per_example: 20us, prefetch: 2}",
    "per_example": "per_example: 20us",
    "prefetch": "prefetch: 2",
}


def _fail(field: str, message: str) -> PydanticCustomError:
    """An error for ``field`` (relative to the model raising it) with a ready-made message."""
    return PydanticCustomError("scenario", "{message}", {"field": field, "message": message})


def _show(value: object) -> str:
    """A value as the user wrote it: strings quoted, mappings and lists in YAML flow style."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict | list):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---------------------------------------------------------------- field types


def _no_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"got {_show(value)}; expected a number")
    return value


def _unit(parse: Callable[[object], float], positive: bool) -> Callable[[object], float]:
    def validate(value: object) -> float:
        try:
            number = parse(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        if positive and number == 0:
            raise ValueError(f"got {_show(value)}; expected a value greater than 0")
        return number

    return validate


def _whole_bytes(value: object) -> int:
    return round(_unit(parse_size, positive=False)(value))


Bandwidth = Annotated[float, BeforeValidator(_unit(parse_bandwidth, positive=True))]
Latency = Annotated[float, BeforeValidator(_unit(parse_duration, positive=False))]
PositiveDuration = Annotated[float, BeforeValidator(_unit(parse_duration, positive=True))]
Flops = Annotated[float, BeforeValidator(_unit(parse_flops, positive=True))]
Bytes = Annotated[int, BeforeValidator(_whole_bytes)]
Float = Annotated[float, BeforeValidator(_no_bool)]
Int = Annotated[int, Field(strict=True)]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]


class _Spec(BaseModel):
    """Base of every scenario model: unknown keys are errors; YAML keys or attribute names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _shorthand(key: str) -> Callable[[object], object]:
    """Let ``strategy: mirrored`` stand for ``strategy: {kind: mirrored}`` (and similar)."""

    def expand(value: object) -> object:
        return {key: value} if isinstance(value, str) else value

    return expand


# ---------------------------------------------------------------- cluster


class LinkSpec(_Spec):
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


class LinksSpec(_Spec):
    """The links of every host."""

    intra_host: IntraHostLinkSpec = Field(default_factory=IntraHostLinkSpec)
    network: NetworkLinkSpec = Field(default_factory=NetworkLinkSpec)


class DeviceSpec(_Spec):
    """The accelerator of every replica: a named profile, optionally overridden."""

    profile: str = "cpu"
    peak_flops: Flops | None = None
    efficiency: Float | None = Field(None, gt=0, le=1)
    compute_time_s: PositiveDuration | None = Field(None, alias="compute_time")

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        if value not in DEVICE_PROFILES:
            raise ValueError(_choice_message(value, tuple(DEVICE_PROFILES), "profile"))
        return value

    @property
    def resolved_peak_flops(self) -> float:
        """Peak FLOP/s: the explicit value, else the profile's."""
        return self.peak_flops or DEVICE_PROFILES[self.profile].peak_flops

    @property
    def resolved_efficiency(self) -> float:
        """Share of peak reached by a step: the explicit value, else the profile's."""
        return self.efficiency or DEVICE_PROFILES[self.profile].efficiency


def _task_names(value: object, key: str) -> list[str]:
    """Validated TF_CONFIG-style ``["w0:2222", ...]`` task addresses."""
    if not isinstance(value, list):
        raise _fail(key, f"got {_show(value)}; expected a list of host:port, e.g. {_EXAMPLES[key]}")
    names = []
    for i, entry in enumerate(value):
        match = _TASK_RE.fullmatch(entry) if isinstance(entry, str) else None
        if match is None:
            raise _fail(
                f"{key}[{i}]",
                f"got {_show(entry)}; expected host:port such as 'w0:2222', e.g. {_EXAMPLES[key]}",
            )
        names.append(entry)
    return names


def _host_part(address: str) -> str:
    return address.rsplit(":", 1)[0] if ":" in address else address


class ClusterSpec(_Spec):
    """Hosts and their devices and links, given as counts or TF_CONFIG-style task lists.

    Task names are the host part of each address (``w0:2222`` -> ``w0``), unless two tasks
    share a host (``localhost:2222``, ``localhost:2223``): then the full addresses are kept.

    After validation ``hosts == len(worker_names)`` (training hosts, chief included when it
    trains), ``ps == len(ps_names)``; see :class:`Scenario` for the chief rule.
    """

    hosts: Int = Field(1, ge=1)
    worker_names: list[str] = Field(default_factory=list, alias="worker")
    chief_names: list[str] = Field(default_factory=list, alias="chief")
    ps: Int = Field(0, ge=0)
    ps_names: list[str] = Field(default_factory=list, exclude=True)
    devices_per_host: Int = Field(1, ge=1)
    device: DeviceSpec = Field(default_factory=DeviceSpec)
    links: LinksSpec = Field(default_factory=LinksSpec)

    @model_validator(mode="before")
    @classmethod
    def _task_lists(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data.pop("ps_names", None)
        for key, attr in (("worker", "worker_names"), ("chief", "chief_names")):
            for k in (key, attr):
                if k in data:
                    data[k] = _task_names(data[k], key)
        if len(data.get("chief", data.get("chief_names", []))) > 1:
            raise _fail("chief", "expected at most one chief task, e.g. chief: [c0:2222]")
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
        return self

    @property
    def host_names(self) -> list[str]:
        """Names of the training hosts, worker 0 first."""
        return self.worker_names


# ---------------------------------------------------------------- workload


class ModelSpec(_Spec):
    """Which model of the zoo, and its hidden layer widths."""

    name: ModelName
    hidden: list[PositiveInt] = Field(default_factory=lambda: [128])


class DatasetSpec(_Spec):
    """A built-in dataset or an ``.npz`` file with ``x``/``y`` arrays."""

    name: DatasetName
    path: Path | None = None
    test_fraction: Float = Field(0.2, gt=0, lt=1)
    n_examples: Int = Field(2048, ge=1)
    n_features: Int = Field(16, ge=1)
    noise: Float = Field(0.1, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _npz_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "npz" in data:
            data = dict(data)
            if "path" in data:
                raise _fail("npz", "give npz: <file> or name: npz with path: <file>, not both")
            data.setdefault("name", "npz")
            data["path"] = data.pop("npz")
        return data

    @model_validator(mode="after")
    def _resolve_path(self, info: ValidationInfo) -> DatasetSpec:
        if self.name != "npz":
            if self.path is not None:
                raise _fail("path", f"path is only used with npz datasets, not {self.name!r}")
            return self
        if self.path is None:
            raise _fail("npz", "missing; required for an npz dataset, e.g. dataset: {npz: d.npz}")
        self.path = _resolve_file(self.path, info, "npz", "an .npz file with arrays x and y")
        return self


def _resolve_file(path: Path, info: ValidationInfo, field: str, what: str) -> Path:
    base = (info.context or {}).get("base_dir")
    full = path if path.is_absolute() or base is None else Path(base) / path
    if not full.is_file():
        raise _fail(
            field, f"file not found: {str(path)!r} (looked at {str(full)!r}); expected {what}"
        )
    return full.resolve()


class ScheduleSpec(_Spec):
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
            raise _fail(
                "scales",
                f"got {len(self.scales)} scales for {len(self.boundaries)} boundaries; "
                "give one scale per boundary, e.g. boundaries: [1000, 2000], scales: [0.1, 0.1]",
            )
        return self


class OptimizerSpec(_Spec):
    """Optimizer and learning rate (per update, with the loss averaged over the global batch)."""

    name: OptimizerName
    learning_rate: Float = Field(gt=0)
    momentum: Float = Field(0.9, ge=0, lt=1)
    schedule: Annotated[ScheduleSpec | None, BeforeValidator(_shorthand("kind"))] = None


class WorkloadSpec(_Spec):
    """What is trained, on what, for how long.

    Exactly one of ``batch_size`` (per replica) and ``global_batch_size`` is given; the
    scenario fills in the other, so both are ints after validation. Likewise exactly one
    of ``steps`` and ``epochs``; use :meth:`total_steps`.
    """

    model: Annotated[ModelSpec, BeforeValidator(_shorthand("name"))]
    dataset: Annotated[DatasetSpec, BeforeValidator(_shorthand("name"))]
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
            raise _fail(
                "global_batch_size",
                "give either batch_size (per replica) or global_batch_size, not both",
            )
        if "batch_size" not in given and "global_batch_size" not in given:
            raise _fail(
                "batch_size",
                "missing; give batch_size (per replica) or global_batch_size, e.g. batch_size: 32",
            )
        if self.steps is not None and self.epochs is not None:
            raise _fail("epochs", "give either steps or epochs, not both, e.g. steps: 1000")
        if self.steps is None and self.epochs is None:
            raise _fail("steps", "missing; give steps or epochs, e.g. steps: 1000")
        if self.init_from is not None:
            self.init_from = _resolve_file(
                self.init_from, info, "init_from", "a parameter file written by simdist"
            )
        return self

    def total_steps(self, n_train: int) -> int:
        """Number of training steps: ``steps``, or ``ceil(epochs * n_train / global batch)``."""
        if self.steps is not None:
            return self.steps
        assert self.epochs is not None
        return max(1, math.ceil(self.epochs * n_train / self.global_batch_size))


# ---------------------------------------------------------------- strategies


class OneDeviceStrategy(_Spec):
    """A single replica on one device: the baseline."""

    kind: Literal["one_device", "default"] = "one_device"


class MirroredStrategy(_Spec):
    """Synchronous replicas on the devices of one host, all-reduce over intra-host links."""

    kind: Literal["mirrored"]
    execution: Execution = "auto"
    all_reduce: Literal["ring", "tree"] = "ring"


class MultiWorkerMirroredStrategy(_Spec):
    """Synchronous replicas on every device of every host; hierarchical collectives."""

    kind: Literal["multi_worker_mirrored"]
    communication: Literal["auto", "ring", "nccl"] = "auto"
    bytes_per_pack: Bytes = Field(0, ge=0)
    execution: Execution = "auto"


class CentralStorageStrategy(_Spec):
    """Variables on the host CPU; devices fetch them and send gradients back.

    ``reduce_bandwidth`` is the rate at which the CPU streams the N gradients it sums;
    the default, 25.6GB/s, is one DDR4-3200 channel (3200 MT/s × 8 bytes, JEDEC JESD79-4).
    """

    kind: Literal["central_storage"]
    execution: Execution = "auto"
    reduce_bandwidth_Bps: Bandwidth = Field(25.6e9, alias="reduce_bandwidth")


class TPUStrategy(_Spec):
    """Synchronous replicas on a 2D torus of TPU chips."""

    kind: Literal["tpu"]
    topology: list[PositiveInt] = Field(default_factory=lambda: [2, 2], min_length=2, max_length=2)
    execution: Execution = "auto"


class ParameterServerStrategy(_Spec):
    """Workers pull variables from PS tasks and push gradients; async by default."""

    kind: Literal["parameter_server"]
    partitioner: Literal["round_robin", "min_size"] = "round_robin"
    min_shard_bytes: Bytes = Field(256 * 1024, ge=0)
    max_shards: Int | None = Field(None, ge=1)
    staleness_bound: Int | None = Field(None, ge=0)
    lr_staleness: Literal["none", "inverse"] = "none"
    mode: Literal["async", "sync"] = "async"
    backup_workers: Int = Field(0, ge=0)


StrategySpec = Annotated[
    OneDeviceStrategy
    | MirroredStrategy
    | MultiWorkerMirroredStrategy
    | CentralStorageStrategy
    | TPUStrategy
    | ParameterServerStrategy,
    Field(discriminator="kind"),
]

STRATEGIES: tuple[str, ...] = (
    "one_device",
    "default",
    "mirrored",
    "multi_worker_mirrored",
    "central_storage",
    "tpu",
    "parameter_server",
)

_SINGLE_HOST = ("mirrored", "central_storage")


# ---------------------------------------------------------------- system effects

SlowdownKind = Literal["constant", "lognormal", "pareto"]
_TARGET_RE = re.compile(r"(?P<role>worker|ps|device)\s*(?P<index>\d+)")


class SlowdownSpec(_Spec):
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


class StragglerSpec(_Spec):
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
            raise _fail("device", "give worker or device, not both, e.g. worker: 3")
        return self


class FailureSpec(_Spec):
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
                f"got {_show(value)}; expected 'worker N', 'ps N' or 'device N', "
                "e.g. target: worker 1"
            )
        return f"{match['role']} {int(match['index'])}"

    @model_validator(mode="after")
    def _when(self) -> FailureSpec:
        if (self.at_s is None) == (self.mtbf_s is None):
            raise _fail("at", "give exactly one of at (a time) or mtbf (a rate), e.g. at: 50ms")
        if (self.restart_after_s is None) == (self.restart_at_s is None):
            raise _fail(
                "restart_after",
                "give exactly one of restart_after or restart_at, e.g. restart_after: 20ms",
            )
        if self.restart_at_s is not None:
            if self.at_s is None:
                raise _fail("restart_at", "restart_at needs at; with mtbf use restart_after")
            if self.restart_at_s <= self.at_s:
                raise _fail(
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


class FaultsSpec(_Spec):
    """What goes wrong: stragglers and failures."""

    stragglers: list[StragglerSpec] = Field(default_factory=list)
    failures: list[FailureSpec] = Field(default_factory=list)


class CheckpointSpec(_Spec):
    """The chief writes parameters + optimizer state every K steps or T seconds."""

    every_steps: Int | None = Field(None, ge=1)
    every_s: PositiveDuration | None = None
    storage_bandwidth_Bps: Bandwidth | None = Field(None, alias="storage_bandwidth")

    @model_validator(mode="after")
    def _complete(self) -> CheckpointSpec:
        if (self.every_steps is None) == (self.every_s is None):
            raise _fail(
                "every_steps", "give exactly one of every_steps or every_s, e.g. every_steps: 100"
            )
        if self.storage_bandwidth_Bps is None:
            raise _fail(
                "storage_bandwidth",
                "missing; a checkpoint's cost is bytes / storage bandwidth, "
                "e.g. storage_bandwidth: 1GB/s",
            )
        return self


class InputSpec(_Spec):
    """Per-batch loading cost and prefetch depth (the tf.data prefetch picture)."""

    per_example_s: Latency | None = Field(None, alias="per_example")
    bandwidth_Bps: Bandwidth | None = Field(None, alias="bandwidth")
    prefetch: Int = Field(1, ge=0)

    @model_validator(mode="after")
    def _one_cost(self) -> InputSpec:
        if (self.per_example_s is None) == (self.bandwidth_Bps is None):
            raise _fail(
                "per_example",
                "give exactly one of per_example (seconds per example) or bandwidth "
                "(bytes of examples per second), e.g. per_example: 20us",
            )
        return self


# ---------------------------------------------------------------- scenario


class Scenario(_Spec):
    """One validated run: cluster + workload + strategy + seed, units in SI."""

    name: str
    seed: Int = Field(0, ge=0)
    numerics: Annotated[bool, Field(strict=True)] = True
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    workload: WorkloadSpec
    strategy: Annotated[StrategySpec, BeforeValidator(_shorthand("kind"))] = Field(
        default_factory=OneDeviceStrategy
    )
    faults: FaultsSpec = Field(default_factory=FaultsSpec)
    checkpoint: CheckpointSpec | None = None
    input: InputSpec | None = None

    @field_validator("name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                f"got {_show(value)}; expected only letters, digits, '_', '.' and '-' "
                "(it names the report folder), e.g. name: ps_4w2s"
            )
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        _resolve_hosts(self)
        _check_strategy(self)
        _resolve_batch(self)
        _check_faults(self)
        return self

    @property
    def replicas(self) -> int:
        """Number of model replicas computing a gradient in one step."""
        return _replicas(self.strategy, self.cluster)

    @property
    def global_batch(self) -> int:
        """Examples per step over all replicas."""
        return self.workload.batch_size * self.replicas


def _replicas(strategy: Any, cluster: ClusterSpec) -> int:
    kind = strategy.kind
    if kind in ("one_device", "default"):
        return 1
    if kind in _SINGLE_HOST:
        return cluster.devices_per_host
    if kind == "tpu":
        return strategy.topology[0] * strategy.topology[1]
    return cluster.hosts * cluster.devices_per_host


def _resolve_hosts(s: Scenario) -> None:
    c = s.cluster
    chief_trains = bool(c.chief_names) and s.strategy.kind != "parameter_server"
    given_workers = "worker_names" in c.model_fields_set
    if given_workers:
        names = (c.chief_names if chief_trains else []) + c.worker_names
        if "hosts" in c.model_fields_set and c.hosts != len(names):
            counted = " (chief included: it trains)" if chief_trains else ""
            raise _fail(
                "cluster.hosts",
                f"got {c.hosts} but cluster.worker lists {len(names)} hosts{counted}; "
                "give one of the two, e.g. hosts: 4",
            )
    else:
        n_tasks = c.hosts - len(c.chief_names) if chief_trains else c.hosts
        if n_tasks < 0:
            raise _fail("cluster.hosts", "got 0 hosts besides the chief; expected hosts >= 1")
        names = (c.chief_names if chief_trains else []) + [f"worker{i}" for i in range(n_tasks)]
    if not names:
        raise _fail("cluster.worker", f"expected at least one worker, e.g. {_EXAMPLES['worker']}")
    every = names + ([] if chief_trains else c.chief_names) + c.ps_names
    duplicates = sorted({n for n in every if every.count(n) > 1})
    if duplicates:
        raise _fail("cluster", f"host name {duplicates[0]!r} is used twice; task names must differ")
    c.worker_names = names
    c.hosts = len(names)
    if s.strategy.kind == "tpu" and "profile" not in c.device.model_fields_set:
        c.device.profile = "tpu-v4"


def _check_strategy(s: Scenario) -> None:
    c, st = s.cluster, s.strategy
    if st.kind in _SINGLE_HOST and c.hosts != 1:
        raise _fail(
            "cluster.hosts",
            f"got {c.hosts}; strategy {st.kind} runs on one host (hosts: 1); "
            "for several hosts use strategy: multi_worker_mirrored",
        )
    if st.kind == "parameter_server":
        if c.ps < 1:
            raise _fail(
                "cluster.ps",
                f"got {c.ps}; parameter_server needs at least one parameter-server task, "
                "e.g. ps: 2",
            )
        if st.mode == "sync":
            ignored = [
                key
                for key, value in (
                    ("staleness_bound", st.staleness_bound),
                    ("lr_staleness", None if st.lr_staleness == "none" else st.lr_staleness),
                )
                if value is not None
            ]
            if ignored:
                raise _fail(
                    f"strategy.{ignored[0]}",
                    "has no effect with mode: sync (every gradient of a step is computed "
                    "from the same version); remove it or use mode: async",
                )
            if s.checkpoint is not None:
                raise _fail(
                    "checkpoint",
                    "checkpoints are simulated for parameter_server in mode: async only; "
                    "remove checkpoint or use mode: async",
                )
        if st.backup_workers > 0:
            if st.mode != "sync":
                raise _fail(
                    "strategy.backup_workers",
                    f"got {st.backup_workers} with mode: {st.mode}; backup workers need "
                    "mode: sync, e.g. strategy: {kind: parameter_server, mode: sync, "
                    "backup_workers: 1}",
                )
            if st.backup_workers >= c.hosts:
                raise _fail(
                    "strategy.backup_workers",
                    f"got {st.backup_workers} with {c.hosts} workers; expected fewer backup "
                    f"workers than workers, e.g. backup_workers: {max(c.hosts - 1, 0)}",
                )
    elif c.ps > 0:
        raise _fail(
            "cluster.ps",
            f"got {c.ps}; parameter-server tasks are only used by strategy: parameter_server "
            f"(strategy here is {st.kind}); remove ps or use ps: 0",
        )
    if st.kind == "tpu":
        _check_tpu(s)


def _check_tpu(s: Scenario) -> None:
    """tpu puts its x·y chips on one host (strategies/tpu.py); devices_per_host: 1 or x·y."""
    c, (x, y) = s.cluster, s.strategy.topology
    if c.hosts != 1:
        raise _fail(
            "cluster.hosts",
            f"got {c.hosts}; strategy tpu puts all {x}x{y} chips on one host linked by "
            "intra_host (the ICI); use hosts: 1 and size the torus with strategy.topology",
        )
    if c.devices_per_host not in (1, x * y):
        raise _fail(
            "cluster.devices_per_host",
            f"got {c.devices_per_host}; strategy tpu takes its chip count from "
            f"strategy.topology ({x}x{y} = {x * y} chips); remove devices_per_host",
        )
    c.devices_per_host = x * y


def _check_faults(s: Scenario) -> None:
    """Fault targets must exist in this cluster and make sense for this strategy."""
    c, kind = s.cluster, s.strategy.kind
    workers = 1 if kind in ("one_device", "default", "mirrored", "central_storage") else c.hosts
    devices = s.replicas
    for i, st in enumerate(s.faults.stragglers):
        if st.worker is not None and st.worker >= workers:
            raise _fail(
                f"faults.stragglers[{i}].worker",
                f"got {st.worker}; this cluster has workers 0..{workers - 1}, e.g. worker: 0",
            )
        if st.device is not None and st.device >= devices:
            raise _fail(
                f"faults.stragglers[{i}].device",
                f"got {st.device}; this run has devices 0..{devices - 1}, e.g. device: 0",
            )
    for i, f in enumerate(s.faults.failures):
        if kind == "parameter_server" and s.strategy.mode == "sync":
            raise _fail(
                f"faults.failures[{i}]",
                "failures are simulated for parameter_server in mode: async only (sync mode "
                "with failures is not modelled yet); use mode: async, or a synchronous "
                "strategy such as multi_worker_mirrored",
            )
        limit = {"worker": workers, "ps": c.ps, "device": devices}[f.role]
        if f.role == "ps" and kind != "parameter_server":
            raise _fail(
                f"faults.failures[{i}].target",
                f"got {f.target!r}; only parameter_server has ps tasks; "
                "e.g. target: worker 0",
            )
        if f.index >= limit:
            raise _fail(
                f"faults.failures[{i}].target",
                f"got {f.target!r}; this cluster has {f.role} 0..{limit - 1}, "
                f"e.g. target: {f.role} 0",
            )


def _resolve_batch(s: Scenario) -> None:
    w, n = s.workload, s.replicas
    if "global_batch_size" in w.model_fields_set:
        if w.global_batch_size % n:
            up = -(-w.global_batch_size // n) * n
            raise _fail(
                "workload.global_batch_size",
                f"global_batch_size: {w.global_batch_size} is not divisible by {n} replicas; "
                f"use a multiple of {n}, e.g. {up}",
            )
        w.batch_size = w.global_batch_size // n
    else:
        w.global_batch_size = w.batch_size * n


# ---------------------------------------------------------------- error translation


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types inside Annotated / Optional / unions."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _unwrap(a)]
    return [annotation]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    return [t for t in _unwrap(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]


def _yaml_key(model: type[BaseModel], attr: str) -> str:
    info = model.model_fields.get(attr)
    return info.alias if info is not None and info.alias else attr


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [_yaml_key(model, a) for a, f in model.model_fields.items() if not f.exclude]


def _walk(
    loc: tuple[str | int, ...],
) -> tuple[str, type[BaseModel] | None, str, list[type[BaseModel]]]:
    """For a pydantic error location: the dotted YAML path, the model holding the last key,
    that key as written in YAML, and the model(s) the value at ``loc`` may be."""
    path = ""
    model: type[BaseModel] | None = Scenario
    candidates: list[type[BaseModel]] = [Scenario]
    key = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
            continue
        if len(candidates) > 1:
            tagged = [m for m in candidates if item in _kinds(m)]
            if tagged:
                candidates = tagged
                continue
        model = candidates[0] if candidates else None
        attr = item
        if model is not None:
            by_alias = {_yaml_key(model, a): a for a in model.model_fields}
            attr = by_alias.get(item, item)
            key = _yaml_key(model, attr)
            field = model.model_fields.get(attr)
            inner = field.annotation if field is not None else None
            candidates = _models_in(inner) if inner is not None else []
            if not candidates and inner is not None:
                for arg in _unwrap(inner):
                    candidates += [m for a in typing.get_args(arg) for m in _models_in(a)]
        else:
            key = item
        path = f"{path}.{key}" if path else key
    return path, model, key, candidates


def _kinds(model: type[BaseModel]) -> tuple[str, ...]:
    field = model.model_fields.get("kind")
    return typing.get_args(field.annotation) if field is not None else ()


def _suggest(word: str, choices: Sequence[str]) -> list[str]:
    """The likely intended choice: one the word abbreviates, else the closest spelling."""
    prefixed = [c for c in choices if len(word) >= 3 and c.startswith(word)]
    return prefixed[:1] or difflib.get_close_matches(word, list(choices), n=1)


def _choice_message(value: object, choices: Sequence[str], key: str) -> str:
    """``got 'mlpp'; did you mean 'mlp'? Expected one of ..., e.g. model: mlp``."""
    listed = ", ".join(repr(c) for c in choices)
    if isinstance(value, str):
        close = _suggest(value, choices)
        if close:
            return (
                f"got {_show(value)}; did you mean {close[0]!r}? "
                f"Expected one of {listed}, e.g. {key}: {close[0]}"
            )
    return f"got {_show(value)}; expected one of {listed}, e.g. {key}: {choices[0]}"


def _example(key: str) -> str:
    return f", e.g. {_EXAMPLES[key]}" if key in _EXAMPLES else ""


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "list": "a list",
    "dict": "a mapping",
    "model": "a mapping",
}


def _message(err: Any) -> tuple[str, str]:
    """(field path, friendly message) for one pydantic error."""
    etype = err["type"]
    ctx = err.get("ctx") or {}
    loc = tuple(err["loc"])
    value = err.get("input")
    if etype == "scenario":
        path = _walk(loc)[0]
        return f"{path}.{ctx['field']}" if path else ctx["field"], ctx["message"]
    if etype == "extra_forbidden":
        path = _walk(loc)[0]
        containers = _walk(loc[:-1])[3]
        allowed = _allowed_keys(containers[0]) if len(containers) == 1 else []
        close = _suggest(str(loc[-1]), allowed)
        if close:
            return path, f"unknown key {str(loc[-1])!r}; did you mean {close[0]!r}?"
        listed = ", ".join(allowed)
        return path, f"unknown key {str(loc[-1])!r}; allowed keys here: {listed}"
    path, _, key, _ = _walk(loc)
    if etype == "missing":
        return path, f"missing; required{_example(key)}"
    if etype == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        return f"{path}.kind", _choice_message(ctx.get("tag"), tags, key)
    if etype == "union_tag_not_found":
        return f"{path}.kind", f"missing; required{_example('strategy')}"
    if etype == "literal_error":
        choices = [c.strip(" '") for c in re.split(r",| or ", str(ctx.get("expected", "")))]
        parent = path.split(".")[-2] if "." in path else ""
        if key == _SHORTHAND_KEYS.get(parent):
            key = parent
        return path, _choice_message(value, [c for c in choices if c], key)
    if etype in ("value_error", "assertion_error"):
        return path, str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    if etype in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[etype]
        bound = next(iter(ctx.values()))
        return path, f"got {_show(value)}; expected a value {op} {bound}{_example(key)}"
    if etype in ("too_short", "too_long"):
        return path, f"got {_show(value)}; {err['msg'].lower()}{_example(key)}"
    for word, text in _TYPE_WORDS.items():
        if etype.startswith(word):
            return path, f"got {_show(value)}; expected {text}{_example(key)}"
    return path, f"got {_show(value)}; {err['msg']}{_example(key)}"


# ---------------------------------------------------------------- public API


def scenario_from_dict(
    data: dict[str, Any], source: str = "<scenario>", base_dir: Path | None = None
) -> Scenario:
    """Validate plain data (as read from YAML) into a :class:`Scenario`.

    Relative file paths in the data are resolved against ``base_dir`` (the scenario
    file's folder; the working directory when ``None``). Raises one ScenarioError.
    """
    if not isinstance(data, dict):
        raise ScenarioError(
            source,
            "",
            f"got {type(data).__name__}; expected a mapping at the top level, e.g. name: my_run",
        )
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        field, message = _message(exc.errors(include_url=False)[0])
        raise ScenarioError(source, field, message) from None


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], source: str = "--set"
) -> dict[str, Any]:
    """A copy of ``data`` with each ``"a.b.c=value"`` applied (value read as YAML).

    Missing intermediate mappings are created, and a shorthand such as ``strategy: mirrored``
    is expanded so that ``strategy.all_reduce=tree`` works on top of it. ``cluster.hosts=N``
    replaces a ``cluster.worker`` list (its workers are then named worker0, worker1, ...).
    """
    result = copy.deepcopy(data)
    for item in overrides:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise ScenarioError(
                source, key, f"no '=' in {item!r}; expected path=value, e.g. cluster.hosts=8"
            )
        parts = key.split(".")
        if not key or any(not p for p in parts):
            raise ScenarioError(
                source, key, f"bad path in {item!r}; expected dotted keys, e.g. cluster.hosts=8"
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ScenarioError(source, key, f"value {raw!r} is not valid YAML: {exc}") from None
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and part in _SHORTHAND_KEYS:
                child = node[part] = {_SHORTHAND_KEYS[part]: child}
            elif not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ScenarioError(
                    source, key, f"cannot set {key!r}: {where} is {_show(child)}, not a mapping"
                )
            node = child
        if parts == ["cluster", "hosts"]:
            # A count given on the command line replaces a TF_CONFIG-style worker list.
            node.pop("worker", None)
        node[parts[-1]] = value
    return result


def load_scenario(
    path: str | Path, overrides: Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Read, override (``--set``), and validate a scenario file; ``seed`` replaces its seed."""
    source = str(path)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(
            source, "", "file not found; expected a YAML scenario file, e.g. scenarios/ps_4w2s.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "", f"cannot read the file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(source, "", f"not valid YAML{where}: {problem}") from None
    if data is None:
        raise ScenarioError(
            source,
            "",
            "the file is empty; expected a mapping with at least name and workload, "
            "e.g. name: my_run",
        )
    if not isinstance(data, dict):
        raise ScenarioError(
            source,
            "",
            f"the top level is a {type(data).__name__}; expected a mapping of keys "
            "such as name, cluster, workload, strategy, e.g. name: my_run",
        )
    data = apply_overrides(data, overrides, "--set")
    if seed is not None:
        data["seed"] = seed
    return scenario_from_dict(data, source, base_dir=file.parent)


def dump_scenario(s: Scenario) -> str:
    """The fully resolved scenario as YAML, SI numbers, YAML keys; loads back to an equal one."""
    data = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    cluster = data["cluster"]
    cluster["ps"] = list(s.cluster.ps_names)
    if s.cluster.chief_names and s.strategy.kind != "parameter_server":
        cluster["worker"] = cluster["worker"][len(s.cluster.chief_names) :]
    data["workload"].pop("global_batch_size")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
