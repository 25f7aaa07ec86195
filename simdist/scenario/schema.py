"""The scenario: the top-level :class:`Scenario` and the checks across its sections.

Each section is a pydantic model in the module named after it: ``cluster:`` in
:mod:`~simdist.scenario.cluster`, ``workload:`` in :mod:`~simdist.scenario.workload`,
``strategy:`` (the union of every registered strategy's ``Spec``) in
:mod:`~simdist.scenario.strategy`, ``faults:``, ``checkpoint:`` and ``input:`` in
:mod:`~simdist.scenario.effects`, and ``jobs:`` in :mod:`~simdist.scenario.jobs`. They are
all importable from here too.

Adding a top-level section (faults, checkpoint, input, ...) means one model class, one
field on :class:`Scenario`, and optionally a few entries in
:data:`simdist.scenario.messages.EXAMPLES`; loading and error reporting are generic.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simdist.catalog import DATASETS, FULLSIZE_MODELS, MODELS, OPTIMIZERS, SCHEDULES
from simdist.scenario.cluster import (
    ClusterSpec,
    DeviceSpec,
    HostSpec,
    IntraHostLinkSpec,
    LinkSpec,
    LinksSpec,
    NetworkLinkSpec,
    NetworkSpec,
)
from simdist.scenario.effects import (
    CheckpointSpec,
    FailureSpec,
    FaultsSpec,
    InputSpec,
    SlowdownKind,
    SlowdownSpec,
    StragglerSpec,
)
from simdist.scenario.fields import (
    MAX_DEVICES,
    MAX_GENERATED_EXAMPLES,
    MAX_GENERATED_VALUES,
    MAX_NAME_CHARS,
    MAX_PS_TASKS,
    MAX_SEED,
    shorthand,
)
from simdist.scenario.goodput import GoodputSpec
from simdist.scenario.hosts import check_ps_placement, check_size, resolve_hosts
from simdist.scenario.jobs import JobSpec
from simdist.scenario.messages import EXAMPLES
from simdist.scenario.strategy import STRATEGIES, StrategySpec, default_strategy
from simdist.scenario.workload import (
    DatasetSpec,
    ModelSpec,
    OptimizerSpec,
    ScheduleSpec,
    WorkloadSpec,
)
from simdist.spec import Int, Spec, fail, show

__all__ = [
    "DATASETS",
    "MAX_DEVICES",
    "MAX_GENERATED_EXAMPLES",
    "MAX_GENERATED_VALUES",
    "MAX_NAME_CHARS",
    "MAX_PS_TASKS",
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
    "NetworkSpec",
    "OptimizerSpec",
    "Scenario",
    "ScheduleSpec",
    "SlowdownKind",
    "SlowdownSpec",
    "StragglerSpec",
    "StrategySpec",
    "WorkloadSpec",
]

# A report folder's name: never "." or "..", never hidden, at most MAX_NAME_CHARS.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class Scenario(Spec):
    """One validated run: cluster + workload + strategy + seed, units in SI.

    The cross-checks run in this order: host names (the chief trains unless the strategy
    says otherwise), the strategy's own
    :meth:`~simdist.strategies.spec_base.StrategySpecBase.check`, the batch split over the
    replicas, and the fault targets. The first problem is raised.
    """

    name: str
    seed: Int = Field(0, ge=0, le=MAX_SEED)
    numerics: Annotated[bool, Field(strict=True)] = True
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    # Required (a missing one is reported as before), and None only with jobs:.
    workload: WorkloadSpec | None
    strategy: Annotated[StrategySpec, BeforeValidator(shorthand("kind"))] = Field(
        default_factory=default_strategy
    )
    faults: FaultsSpec = Field(default_factory=FaultsSpec)
    checkpoint: CheckpointSpec | None = None
    input: InputSpec | None = None
    jobs: list[JobSpec] | None = Field(
        None, examples=["[{name: a, hosts: 2, workload: {...}, strategy: multi_worker_mirrored}]"]
    )
    goodput: GoodputSpec | None = None
    _job_scenarios: list[Scenario] = PrivateAttr(default_factory=list)

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
            from simdist.scenario.jobs import SHARED, resolve_jobs

            shared = {key: getattr(self, key) for key in SHARED}
            self._job_scenarios = resolve_jobs(
                self.jobs, self.cluster, self.seed, shared, type(self), info.context
            )
            return self
        if self.workload is None:
            raise fail("workload", f"got null; expected a mapping, e.g. {EXAMPLES['workload']}")
        _check_workload(self)
        resolve_hosts(self.cluster, self.chief_trains)
        self.strategy.check(self)
        _check_network(self)
        check_ps_placement(self.cluster)
        _resolve_batch(self)
        check_size(self.cluster, self.replicas)
        _check_faults(self)
        return self

    @property
    def job_scenarios(self) -> list[Scenario]:
        """Each job of ``jobs:`` as a scenario of its own, in order (empty without jobs)."""
        return self._job_scenarios

    @property
    def replicas(self) -> int:
        """Number of model replicas computing a gradient in one step."""
        return self.strategy.replicas(self.cluster)

    @property
    def global_batch(self) -> int:
        """Examples per step over all replicas."""
        return self.workload.batch_size * self.replicas

    @property
    def numeric_devices(self) -> int:
        """JAX devices the numerics run on with ``execution: devices`` (the replicas, or more
        for a strategy that splits each replica over devices)."""
        return self.strategy.numeric_devices(self.cluster)

    @property
    def runs_on_devices(self) -> bool:
        """Whether the numerics run each replica on a JAX device of its own (``execution:
        devices``), so that a process must create that many devices before JAX starts.

        ``execution`` is an option of the synchronous strategies' sections only (mirrored,
        multi_worker_mirrored, central_storage, tpu: ``test_scenario`` pins which)."""
        return self.numerics and self.requested_execution == "devices"

    @property
    def requested_execution(self) -> str:
        """The strategy section's ``execution`` option (``auto``, ``batched``, ``devices``);
        ``batched`` for the sections without one (parameter_server, pipeline, one_device)."""
        if "execution" in type(self.strategy).model_fields:
            return self.strategy.execution
        return "batched"

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
    sections = [("cluster.device", s.cluster.device)] + [
        (f"cluster.hosts[{i}].device", h.device)
        for i, h in enumerate(s.cluster.host_specs or ())
        if h.device is not None
    ]
    fp8 = [where for where, device in sections if device.precision == "fp8"]
    if fp8:
        raise fail(
            f"{fp8[0]}.precision",
            "fp8 is timing-only (simdist prices its FP8 GEMMs but does not compute in FP8): "
            "run it with numerics: false, or train at bf16",
        )
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


def _check_faults(s: Scenario) -> None:
    """Fault targets must exist in this cluster (the strategy has vetted the rest)."""
    c = s.cluster
    workers = s.strategy.workers(c)
    devices = s.numeric_devices
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
