"""Several jobs on one cluster: one SimPy clock, one network, one report per job.

A scenario with ``jobs:`` (:mod:`simdist.scenario.jobs`) runs every job at once on the
same :class:`simpy.Environment` and the same topology, built once for the whole
cluster, so their flows contend on the links they share (a leaf–spine's uplinks) under
the scenario's sharing model. Each job has its own view of the cluster (a
:class:`~simdist.hardware.cluster.Cluster` of its hosts: the same names, so the topology routes it),
its own strategy, :class:`~simdist.network.Network` front end and
:class:`~simdist.runtime.recorder.Recorder`, so each gets the tables and summary of an ordinary
run. A job's tables are cut when its training ends: what its background processes do
afterwards (none of them moves bytes) is not its run.

Interference: every job also runs alone on the same cluster (the same hosts and
topology, no other job), and its throughput alone over its throughput together is its
*interference slowdown* (1 when nothing is shared: on a non-blocking switch the jobs'
hosts are disjoint, so are their links). The alone runs are timing-only: the clock of a
job does not depend on its values (unless it diverges), and the figure compares clocks.

Randomness: each job's scenario has a seed drawn from the stream named after the job
(:func:`simdist.seeds.job_seed`), so adding a job does not change another's draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import simpy

from simdist.errors import SimdistError
from simdist.hardware.cluster import Cluster
from simdist.network.telemetry import link_frames
from simdist.runtime.assembly import (
    Floor,
    Placed,
    TopologyFactory,
    build_floor,
    place,
    until_settled,
)
from simdist.runtime.costs import measure_costs
from simdist.runtime.engine import (
    Result,
    cached_workload,
    gc_paused,
    needs_workload,
    run_result,
    surrogate_note,
)
from simdist.runtime.recorder import Recorder
from simdist.scenario import Scenario
from simdist.step_costs import Costs
from simdist.summary import SUMMARY_VERSION

if TYPE_CHECKING:
    from simdist.network import Link
    from simdist.numerics.executor import Workload
    from simdist.strategies.base import Strategy

#: Columns of ``interference.csv``: one row per job.
INTERFERENCE_COLUMNS = (
    "job",
    "strategy",
    "hosts",
    "ps",
    "steps",
    "time_alone_s",
    "time_together_s",
    "examples_per_s_alone",
    "examples_per_s_together",
    "slowdown",
)


@dataclass(frozen=True)
class JobRun:
    """What one job brings to a shared run: its own scenario, costs and workload."""

    scenario: Scenario  # the job as a scenario of its own (Scenario.job_scenarios)
    costs: Costs
    workload: Workload | None = None  # None: timing only


@dataclass
class SharedRun:
    """The outcome of jobs run together: each job's Result, the network's telemetry."""

    results: dict[str, Result]
    tables: dict[str, pd.DataFrame]  # links, link_buckets, link_load of the whole network
    end_s: float  # when the last job ended


@dataclass
class JobsResult:
    """A scenario with jobs, run: each job together and alone, and the comparison.

    ``jobs`` are the runs in company (each a full :class:`~simdist.runtime.engine.Result`, written
    as a report of its own), ``alone`` each job's timing-only run by itself on the same
    cluster; ``tables["interference"]`` compares their throughput, and ``tables`` also
    holds the whole network's link telemetry of the run together.
    """

    scenario: Scenario
    jobs: dict[str, Result]
    alone: dict[str, Result]
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    out_dir: Path | None = None

    @property
    def interference(self) -> pd.DataFrame:
        """One row per job: its throughput alone and together, and the slowdown."""
        return self.tables["interference"]


def simulate_jobs(
    scenario: Scenario,
    runs: Sequence[JobRun],
    *,
    on_step: Callable[[int], None] | None = None,
    on_time: Callable[[float], None] | None = None,
    make_topology: TopologyFactory | None = None,
) -> SharedRun:
    """Run ``runs`` together on ``scenario``'s cluster and network until every one ends.

    One environment, one topology for the whole cluster (``make_topology``, by default
    the scenario's), and per job its strategy on a view of the cluster holding its hosts.
    The jobs start at time 0 in the order given (equal times are ordered by it). Each
    job's Result is taken when its training process ends, at its own end time.
    ``on_step(step)`` and ``on_time(simulated_s)`` follow every job's steps.
    """

    def together(runs: Sequence[JobRun]) -> tuple[Sequence[JobRun], Floor, dict, dict]:
        floor = build_floor(scenario, [r.scenario.strategy.kind for r in runs], make_topology)
        env = floor.env

        def stepped(step: int) -> None:
            if on_time is not None:
                on_time(env.now)
            if on_step is not None:
                on_step(step)

        results: dict[str, Result] = {}
        strategies: dict[str, Strategy] = {}
        mains = []
        for run in runs:
            js = run.scenario
            view = Cluster(js.cluster)
            job = place(floor, js, view, run.workload, run.costs, on_step=stepped)
            strategies[js.name] = job.strategy
            machines = set(view.machines)  # its links: its machines' NICs and intra-host links
            own = [link for link in floor.topology.links() if link.host in machines]

            def ended(
                _: simpy.Event, run: JobRun = run, job: Placed = job, own: list[Link] = own
            ) -> None:
                result = _result(run, job.strategy, job.recorder, float(env.now), own)
                if len(runs) > 1:
                    result.summary = {"_shared": _company(scenario, run, runs), **result.summary}
                results[run.scenario.name] = result

            job.main.callbacks.append(ended)
            mains.append(job.main)
        with gc_paused():
            env.run(until=env.all_of(mains))
        return runs, floor, results, strategies

    def diverged(done: tuple[Sequence[JobRun], Floor, dict, dict]) -> list[JobRun] | None:
        runs, _, _, strategies = done
        rerun = {name: s.rerun_with for name, s in strategies.items() if s.rerun_with is not None}
        if not rerun:
            return None
        return [replace(run, workload=rerun.get(run.scenario.name, run.workload)) for run in runs]

    runs, floor, results, _ = until_settled(together, runs, diverged)
    end_s = float(floor.env.now)
    ordered = {run.scenario.name: results[run.scenario.name] for run in runs}
    return SharedRun(ordered, link_frames(floor.topology.links(), end_s), end_s)


def _company(scenario: Scenario, run: JobRun, runs: Sequence[JobRun]) -> str:
    """The note on a job's report that it ran in company (report.md shows it first)."""
    others = ", ".join(r.scenario.name for r in runs if r is not run)
    return (
        f"job {run.scenario.name} of scenario {scenario.name}, run at once with {others} on "
        f"one cluster, sharing its network; its throughput alone and the interference "
        f"slowdown are in ../report.md"
    )


def _result(
    run: JobRun, strategy: Strategy, recorder: Recorder, end_s: float, links: Sequence[Link]
) -> Result:
    """One job's Result at its end, as :func:`simdist.runtime.engine.simulate` makes a run's."""
    js = run.scenario
    result = run_result(js, run.costs, strategy.workload, strategy, recorder, links, end_s)
    note = surrogate_note(js) if strategy.workload is not None else None
    if note:
        result.summary = {"_surrogate": note, **result.summary}
    return result


def job_runs(scenario: Scenario) -> list[JobRun]:
    """Each job of ``scenario`` with its measured costs (and its workload, with numerics)."""
    if scenario.jobs is None:
        raise SimdistError(f"{scenario.name}: the scenario has no jobs")
    runs = []
    devices = [js.numeric_devices for js in scenario.job_scenarios if js.runs_on_devices]
    if devices:
        from simdist.numerics.executor import ensure_devices

        ensure_devices(max(devices))
    for js in scenario.job_scenarios:
        workload = cached_workload(js) if needs_workload(js) else None
        costs = measure_costs(js, workload)
        runs.append(JobRun(js, costs, workload if js.numerics else None))
    return runs


def run_jobs(
    scenario: Scenario,
    *,
    on_step: Callable[[int, int], None] | None = None,
    on_time: Callable[[float], None] | None = None,
    make_topology: TopologyFactory | None = None,
    runs: Sequence[JobRun] | None = None,
) -> JobsResult:
    """Run ``scenario``'s jobs together, then each alone; compare their throughput.

    ``runs`` (default :func:`job_runs`) gives each job's costs, as hand-made
    :class:`Costs` in tests. ``on_step(done, total)`` counts the steps of every run
    (together and alone); ``on_time`` follows the simulated clock of each.
    """
    runs = list(runs) if runs is not None else job_runs(scenario)
    alone_too = len(runs) > 1
    total = sum(run.costs.total_steps for run in runs) * (2 if alone_too else 1)
    done = 0

    def counted(step: int) -> None:
        nonlocal done
        del step
        done += 1
        if on_step is not None:
            on_step(done, total)

    options = {"on_step": counted, "on_time": on_time, "make_topology": make_topology}
    together = simulate_jobs(scenario, runs, **options)
    if alone_too:
        alone = {
            run.scenario.name: simulate_jobs(
                scenario, [replace(run, workload=None)], **options
            ).results[run.scenario.name]
            for run in runs
        }
    else:  # one job: in company is alone
        alone = dict(together.results)
    table = interference_table(scenario, together.results, alone)
    summary = jobs_summary(scenario, together, table)
    return JobsResult(
        scenario=scenario,
        jobs=together.results,
        alone=alone,
        summary=summary,
        tables={"interference": table, **together.tables},
    )


def interference_table(
    scenario: Scenario, together: dict[str, Result], alone: dict[str, Result]
) -> pd.DataFrame:
    """One row per job (:data:`INTERFERENCE_COLUMNS`): slowdown = examples/s alone ÷ together."""
    rows = []
    assert scenario.jobs is not None
    for job in scenario.jobs:
        a, t = alone[job.name].summary, together[job.name].summary
        rate_a, rate_t = a["examples_per_s"], t["examples_per_s"]
        rows.append(
            (
                job.name,
                job.strategy.kind,
                len(job.hosts),
                len(job.ps),
                int(t["steps"]),
                float(a["simulated_time_s"]),
                float(t["simulated_time_s"]),
                rate_a,
                rate_t,
                rate_a / rate_t if rate_a and rate_t else None,
            )
        )
    frame = pd.DataFrame(rows, columns=list(INTERFERENCE_COLUMNS))
    return frame.astype(
        {
            "hosts": "int64",
            "ps": "int64",
            "steps": "int64",
            "examples_per_s_alone": "float64",
            "examples_per_s_together": "float64",
            "slowdown": "float64",
        }
    )


def jobs_summary(scenario: Scenario, together: SharedRun, table: pd.DataFrame) -> dict[str, Any]:
    """summary.json of a scenario with jobs: the shared network, and per job its figures."""
    assert scenario.jobs is not None
    network = scenario.cluster.network
    jobs = []
    rows = zip(scenario.jobs, scenario.job_scenarios, table.itertuples(index=False), strict=True)
    for job, js, row in rows:
        own = together.results[job.name].summary
        jobs.append(
            {
                "name": job.name,
                "strategy": job.strategy.kind,
                "seed": js.seed,
                "hosts": list(job.hosts),
                "ps": list(job.ps),
                "steps": int(row.steps),
                "simulated_time_s": {"alone": row.time_alone_s, "together": row.time_together_s},
                "examples_per_s": {
                    "alone": _number(row.examples_per_s_alone),
                    "together": _number(row.examples_per_s_together),
                },
                "slowdown": _number(row.slowdown),
                "diverged": bool(own.get("diverged", False)),
                "report": f"{job.name}/",
            }
        )
    return {
        "summary_version": SUMMARY_VERSION,
        "name": scenario.name,
        "seed": scenario.seed,
        "numerics": bool(scenario.numerics),
        "hosts": scenario.cluster.hosts,
        "ps_tasks": scenario.cluster.ps,
        "network": {
            "topology": network.topology,
            "duplex": network.duplex,
            "sharing": network.sharing,
        },
        "simulated_time_s": together.end_s,
        "jobs": jobs,
    }


def _number(value: Any) -> float | None:
    """A float, or None for a missing (NaN) one."""
    if value is None or value != value:
        return None
    return float(value)
