"""The cluster's hosts, checked against the rest of the scenario: their names, where the
parameter-server tasks sit, and how many devices they hold in all.

A scenario runs these once the strategy is known (:class:`~simdist.scenario.schema.Scenario`),
and so does a scenario with ``jobs:`` for the cluster the jobs share
(:func:`simdist.scenario.jobs.resolve_jobs`), before each job's own scenario runs them
again on its hosts.
"""

from __future__ import annotations

from simdist.scenario.cluster import ClusterSpec
from simdist.scenario.fields import MAX_DEVICES
from simdist.scenario.messages import EXAMPLES
from simdist.spec import fail, show

__all__ = ["check_ps_placement", "check_size", "resolve_hosts"]


def resolve_hosts(c: ClusterSpec, chief_trains: bool) -> None:
    """Name the worker hosts in ``cluster.worker_names`` (listed hosts by their ``name``,
    else the TF_CONFIG-style lists, else ``worker0``, ``worker1``, ...; a chief that trains
    first) and count them in ``cluster.hosts``; no two tasks may share a name."""
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


def check_ps_placement(c: ClusterSpec) -> None:
    """``cluster.ps_placement`` places existing PS tasks on existing worker machines."""
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


def check_size(c: ClusterSpec, replicas: int) -> None:
    """A cluster one process can build: at most MAX_DEVICES devices, counting the strategy's
    ``replicas`` too (it has set ``devices_per_host`` where it decides it, as the tpu's
    topology does)."""
    devices = max(c.n_devices, replicas)
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
