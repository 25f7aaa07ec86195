"""Several jobs on one cluster: each job's hosts, and each job as a scenario of its own.

A scenario with ``jobs:`` describes one cluster (``cluster:``, its hosts, links and
network) and the jobs that share it, each a :class:`JobSpec`. :func:`resolve_jobs` gives
every job its hosts (names, or a count of free hosts), checks that no host runs two jobs,
and validates each job as a :class:`~simdist.scenario.schema.Scenario` of its own — the
job's hosts as the cluster (the same names and the cluster's links and network), its
workload, strategy, faults, checkpoint and input, the scenario's numerics, and a seed
drawn from the stream named after the job (:func:`simdist.seeds.job_seed`). Every check a
single-job scenario passes (the strategy's own, the batch split, the fault targets) so
runs on each job, and its first problem is reported at the job's field:
``jobs[1].strategy.staleness_bound``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, field_validator

from simdist.scenario.cluster import HOST_NAME_RE, ClusterSpec
from simdist.scenario.effects import CheckpointSpec, FaultsSpec, InputSpec
from simdist.scenario.fields import MAX_NAME_CHARS, shorthand
from simdist.scenario.hosts import check_ps_placement, check_size, resolve_hosts
from simdist.scenario.messages import choice_message, error_message
from simdist.scenario.strategy import StrategySpec, default_strategy
from simdist.scenario.workload import WorkloadSpec
from simdist.spec import Int, Spec, fail, show

#: The scenario class a job's own scenario is validated as (the class holding ``jobs:``).
ScenarioT = TypeVar("ScenarioT", bound=BaseModel)

#: The sections of a run that each job has for itself; the scenario may not give them.
JOB_SECTIONS = ("workload", "strategy", "faults", "checkpoint", "input")

#: Scenario fields a job's own scenario takes from the scenario with the jobs.
SHARED = ("numerics",)


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
            if not isinstance(name, str) or not HOST_NAME_RE.fullmatch(name):
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
    strategy: Annotated[StrategySpec, BeforeValidator(shorthand("kind"))] = Field(
        default_factory=default_strategy
    )
    faults: FaultsSpec = Field(default_factory=FaultsSpec)
    checkpoint: CheckpointSpec | None = None
    input: InputSpec | None = None

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


def resolve_jobs(
    jobs: list[JobSpec],
    cluster: ClusterSpec,
    seed: int,
    shared: dict[str, Any],
    scenario_class: type[ScenarioT],
    context: dict[str, Any] | None,
) -> list[ScenarioT]:
    """Resolve and check ``jobs`` on ``cluster`` in place; each job as a scenario of its own.

    ``seed`` is the scenario's (each job's is drawn from it: :func:`simdist.seeds.job_seed`),
    ``shared`` the fields every job takes from it (:data:`SHARED`); each job's scenario is
    validated as ``scenario_class``, the class holding ``jobs:``, which this module need not
    import. ``context`` is the validation context (the scenario file's folder, for relative
    paths in a job's workload). Raises :func:`fail` at the first problem.
    """
    c = cluster
    if not jobs:
        raise fail(
            "jobs",
            "got an empty list; expected at least one job, e.g. jobs: [{name: a, hosts: 2, "
            "workload: {...}, strategy: multi_worker_mirrored}]",
        )
    if c.chief_names:
        raise fail(
            "cluster.chief",
            "the scenario has jobs:, and each job's first host is its chief; list the chief "
            "in cluster.worker (or count it in cluster.hosts) and name it first in its job",
        )
    resolve_hosts(c, chief_trains=False)
    check_ps_placement(c)
    check_size(c, replicas=0)
    seen: dict[str, int] = {}
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise fail(
                f"jobs[{i}].name",
                f"got {job.name!r}, already the name of jobs[{seen[job.name]}]; job names "
                f"must differ (each names a report folder), e.g. name: {job.name}-{i}",
            )
        seen[job.name] = i
    for key, names in (("hosts", c.worker_names), ("ps", c.ps_names)):
        _assign(jobs, key, list(names))
    _place_ps(jobs, c)
    return [
        _job_scenario(seed, shared, c, scenario_class, i, job, context)
        for i, job in enumerate(jobs)
    ]


def _assign(jobs: list[JobSpec], key: str, names: list[str]) -> None:
    """Turn every job's ``key`` (``hosts`` or ``ps``) into a list of names from ``names``.

    Named tasks first (each must exist and belong to one job only), then counts, which take
    the first tasks in cluster order that no job names and no earlier count took.
    """
    what = "worker host" if key == "hosts" else "parameter-server task"
    owner: dict[str, int] = {}
    for i, job in enumerate(jobs):
        given = getattr(job, key)
        if isinstance(given, int):
            continue
        for k, name in enumerate(given):
            if name not in names:
                raise fail(f"jobs[{i}].{key}[{k}]", _unknown(name, names, key, what))
            if name in owner:
                raise fail(
                    f"jobs[{i}].{key}[{k}]",
                    f"got {name!r}, already a {what} of job {jobs[owner[name]].name!r} "
                    f"(jobs[{owner[name]}]); a host runs one job, e.g. give each job its "
                    f"own {key}",
                )
            owner[name] = i
    free = [name for name in names if name not in owner]
    for i, job in enumerate(jobs):
        given = getattr(job, key)
        if not isinstance(given, int):
            continue
        if given > 0 and not names:
            raise fail(f"jobs[{i}].{key}", f"got {given}; {_none(key, what)}")
        if given > len(free):
            left = f" ({', '.join(free)})" if free else ""
            raise fail(
                f"jobs[{i}].{key}",
                f"got {given}; only {len(free)} {what}(s) of the cluster are free for this "
                f"job{left}: give the cluster more, or this job fewer, e.g. {key}: "
                f"{max(len(free), 1 if key == 'hosts' else 0)}",
            )
        setattr(job, key, free[:given])
        free = free[given:]


def _place_ps(jobs: list[JobSpec], c: ClusterSpec) -> None:
    """Check ``cluster.ps_placement`` against the jobs; ``colocated`` becomes a list.

    A co-located PS task shares a worker machine's NIC, so it must sit on a host of its own
    job. ``colocated`` places each job's PS tasks on that job's hosts in turn (PS task k of
    a job on its host k mod hosts: TF's layout, job by job).
    """
    job_of_ps = {p: i for i, job in enumerate(jobs) for p in job.ps}
    if c.ps_placement == "separate":
        return
    if c.ps_placement == "colocated":
        idle = [p for p in c.ps_names if p not in job_of_ps]
        if idle:
            raise fail(
                "cluster.ps_placement",
                f"colocated puts each job's parameter-server tasks on its own hosts, and "
                f"{idle[0]} is in no job; give it to a job, or name its machine, e.g. "
                f"ps_placement: [{', '.join(c.worker_names[i % c.hosts] for i in range(c.ps))}]",
            )
        machines = {p: job.hosts[k % len(job.hosts)] for job in jobs for k, p in enumerate(job.ps)}
        c.ps_placement = [machines[p] for p in c.ps_names]
        return
    for k, (p, machine) in enumerate(zip(c.ps_names, c.ps_placement, strict=True)):
        i = job_of_ps.get(p)
        if i is not None and machine not in jobs[i].hosts:
            job = jobs[i]
            raise fail(
                f"cluster.ps_placement[{k}]",
                f"got {machine!r} for {p}, a parameter-server task of job {job.name!r} "
                f"(jobs[{i}]); a co-located PS task shares the NIC of a host of its own job, "
                f"e.g. one of {', '.join(job.hosts)}",
            )


def _unknown(name: str, names: list[str], key: str, what: str) -> str:
    """The message for a job naming a task the cluster does not have."""
    if not names:
        return f"got {name!r}; {_none(key, what)}"
    return choice_message(name, names, key).replace(f"e.g. {key}: ", f"e.g. {key}: [", 1) + "]"


def _none(key: str, what: str) -> str:
    """The end of a message for a job asking for tasks of a kind the cluster has none of."""
    example = "ps: 2" if key == "ps" else "hosts: 4"
    return f"the cluster has no {what}s, e.g. give the cluster some (cluster: {{{example}}})"


def _sub_cluster(c: ClusterSpec, hosts: list[str], ps: list[str]) -> ClusterSpec:
    """The cluster section of a job: ``hosts`` and ``ps`` of ``c``, with ``c``'s links,
    network and devices (each listed host keeps its own)."""
    update: dict[str, Any] = {
        "hosts": len(hosts),
        "worker_names": list(hosts),
        "chief_names": [],
        "ps": len(ps),
        "ps_names": list(ps),
    }
    if isinstance(c.ps_placement, list):
        where = dict(zip(c.ps_names, c.ps_placement, strict=True))
        update["ps_placement"] = [where[p] for p in ps] if ps else "separate"
    if c.host_specs is not None:
        index = {name: k for k, name in enumerate(c.worker_names)}
        specs = [copy.deepcopy(c.host_specs[index[h]]) for h in hosts]
        update["host_specs"] = specs
        update["devices_per_host"] = specs[0].devices
    sub = c.model_copy(deep=True, update=update)
    # As if written so: the names are the job's, not worker0, worker1, ...
    sub.__pydantic_fields_set__.update(("hosts", "worker_names"))
    sub.__pydantic_fields_set__.discard("chief_names")
    return sub


def _job_scenario(
    seed: int,
    shared: dict[str, Any],
    cluster: ClusterSpec,
    scenario_class: type[ScenarioT],
    i: int,
    job: JobSpec,
    context: dict[str, Any] | None,
) -> ScenarioT:
    """Job ``i`` as a validated scenario of its own; its first problem raised at ``jobs[i]``."""
    from simdist.seeds import job_seed

    topology = type(job.strategy).wiring
    if topology != "switch":
        raise fail(
            f"jobs[{i}].strategy.kind",
            f"got {job.strategy.kind!r}, which runs on its own {topology} topology; a job "
            "shares the cluster's network, so run it as a scenario of its own, e.g. "
            "kind: multi_worker_mirrored",
        )
    data: dict[str, Any] = {
        "name": job.name,
        "seed": job_seed(seed, job.name),
        "cluster": _sub_cluster(cluster, list(job.hosts), list(job.ps)),
        **shared,
        **{key: getattr(job, key) for key in JOB_SECTIONS if getattr(job, key) is not None},
    }
    try:
        return scenario_class.model_validate(data, context=context)
    except ValidationError as exc:
        path, message = error_message(exc.errors(include_url=False)[0], scenario_class)
        raise fail(job_field(i, path), message) from None


def job_field(i: int, path: str) -> str:
    """Where field ``path`` of job ``i``'s own scenario is written in the scenario file.

    The job's cluster is its ``hosts`` and ``ps``; the rest of the cluster section, the
    seed and numerics are the scenario's; everything else is the job's own.
    """
    head, _, rest = path.partition(".")
    if head == "cluster":
        key = rest.split(".")[0].split("[")[0]
        if key in ("", "hosts", "worker", "chief"):
            return f"jobs[{i}].hosts"
        if key == "ps":
            return f"jobs[{i}].ps"
        return path
    if head in ("seed", "numerics"):
        return path
    return f"jobs[{i}].{path}" if path else f"jobs[{i}]"
