"""Running scenarios: one (:func:`run`), once per seed, and many as Dask tasks.

The Python API (:mod:`simdist.api`) re-exports these. One seed cannot show a trade-off
between strategies, so a scenario is run once per seed (:func:`run_seeds`) and the results
are aggregated by :func:`simdist.bands.aggregate` and plotted with bands by
:func:`simdist.report.bands.accuracy_bands`.

pandas, NumPy, the engine (SimPy) and the recorder are imported where they are used, so
``simdist validate``, which imports the API, starts without them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simdist.errors import DataError, SimdistError
from simdist.runtime.preflight import preflight
from simdist.runtime.readback import conform
from simdist.scenario.fields import MAX_RUNS, MAX_SEED
from simdist.scenario.load import resolve_scenario
from simdist.scenario.overrides import override_strings
from simdist.scenario.schema import Scenario

if TYPE_CHECKING:
    from simdist.runtime.engine import Result
    from simdist.runtime.jobs import JobsResult

__all__ = [
    "BATCH_RUNS",
    "DASK_MIN_CORES",
    "DASK_MIN_RUNS",
    "run",
    "run_batch",
    "run_many",
    "run_seeds",
    "seed_list",
    "source_name",
]

#: From this many runs on, :func:`run_many` runs them as Dask tasks (when ``parallel`` is
#: None and the machine has :data:`DASK_MIN_CORES` cores): below it, starting worker
#: processes and compiling the model in each costs more than it saves for the small
#: teaching scenarios.
DASK_MIN_RUNS = 8
#: Cores from which many runs go to Dask by default. On two, the runs' numerics computed
#: together in this process (:func:`run_batch`) beat two worker processes that each
#: import JAX, load the programs and share the cores with the other's XLA threads
#: (docs/PERFORMANCE.md, "Seeds").
DASK_MIN_CORES = 4
#: Runs simulated in this process before their deferred numerics are computed together
#: (:func:`run_batch`): each keeps its recorded rows until then, so memory bounds it.
BATCH_RUNS = 16

#: What :func:`run` and friends take as a scenario: a file, a validated Scenario or a dict.
ScenarioLike = str | Path | Scenario | Mapping[str, Any]


def source_name(path_or_scenario: ScenarioLike) -> str | None:
    """The name a scenario's errors give: the file it was read from; None for a Scenario or a
    dict (the errors then say ``<scenario NAME>``)."""
    if isinstance(path_or_scenario, str | Path):
        return str(path_or_scenario)
    return None


def run(
    path_or_scenario: ScenarioLike,
    *,
    out: str | Path | None = None,
    overrides: Mapping[str, Any] | Sequence[str] = (),
    on_step: Callable[[int, int], None] | None = None,
    on_time: Callable[[float], None] | None = None,
    source: str | None = None,
    **kw: Any,
) -> Result | JobsResult:
    """Simulate a scenario and return its :class:`Result`; write its report if ``out`` is given.

    ``path_or_scenario`` is a scenario file, a ``Scenario`` or a scenario dict.
    Overrides: ``overrides=["cluster.hosts=8"]`` (``--set`` strings),
    ``overrides={"cluster.hosts": 8}``, or keywords with ``__`` for dots:
    ``run("x.yaml", cluster__hosts=8, seed=3)``.  Bad input raises
    :class:`~simdist.errors.ScenarioError` before anything runs (see
    :func:`~simdist.runtime.preflight.preflight`), and so does an ``out`` that cannot be a report
    folder. ``on_step(step, total)`` and ``on_time(simulated_s)`` are called as the
    simulation advances (a progress bar).  Errors name ``source``: by default the
    scenario file given, else ``<scenario NAME>``.  A diverged run returns
    normally, with ``summary["diverged"]`` set.

    A scenario with ``jobs:`` (several jobs sharing one cluster) returns a
    :class:`simdist.runtime.jobs.JobsResult` instead: each job's Result in company and alone,
    and the interference table; its report folder holds a subfolder per job
    (:mod:`simdist.report.jobs`). Two runs into one ``out`` at once: the second is refused
    (:func:`simdist.report.tables.report_lock`).
    """
    scenario = resolve_scenario(path_or_scenario, overrides, **kw)
    source = source or source_name(path_or_scenario)
    preflight(scenario, out=out, source=source)
    guard: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if out is not None:
        from simdist.report.tables import report_lock

        guard = report_lock(Path(out))  # a second run into the same folder at once is refused
    with guard:
        if scenario.jobs is not None:
            return _run_jobs(scenario, out, on_step, on_time, source)
        from simdist.runtime.engine import run as run_engine

        try:
            result = run_engine(scenario, on_step=on_step, on_time=on_time)
        except DataError as exc:
            raise exc.in_scenario(source or f"<scenario {scenario.name}>") from None
        from simdist.runtime.recorder import EVENT_DTYPES, METRIC_DTYPES

        result.events = conform(result.events, EVENT_DTYPES)
        result.metrics = conform(result.metrics, METRIC_DTYPES)
        if out is not None:
            from simdist.report import write_report

            write_report(result, Path(out))
    return result


def _run_jobs(
    scenario: Scenario,
    out: str | Path | None,
    on_step: Callable[[int, int], None] | None,
    on_time: Callable[[float], None] | None,
    source: str | None,
) -> JobsResult:
    """:func:`run` of a scenario with ``jobs:``: a :class:`simdist.runtime.jobs.JobsResult`, its
    folder written by :func:`simdist.report.jobs.write_jobs_report` (a subfolder per job)."""
    from simdist.runtime.jobs import run_jobs
    from simdist.runtime.recorder import EVENT_DTYPES, METRIC_DTYPES

    try:
        result = run_jobs(scenario, on_step=on_step, on_time=on_time)
    except DataError as exc:
        raise exc.in_scenario(source or f"<scenario {scenario.name}>") from None
    for job in result.jobs.values():
        job.events = conform(job.events, EVENT_DTYPES)
        job.metrics = conform(job.metrics, METRIC_DTYPES)
    if out is not None:
        from simdist.report.jobs import write_jobs_report

        write_jobs_report(result, Path(out))
    return result


def seed_list(seeds: int | Sequence[int]) -> list[int]:
    """The seeds ``seeds`` stands for: N → 0, 1, …, N−1; a list → itself (distinct seeds).
    At most :data:`MAX_RUNS`."""
    if isinstance(seeds, bool) or not isinstance(seeds, int | Sequence) or isinstance(seeds, str):
        raise SimdistError(
            f"seeds: got {seeds!r}; expected a count, e.g. 3, or a list, e.g. [0, 4]"
        )
    if isinstance(seeds, int):
        if seeds < 1:
            raise SimdistError(f"seeds: got {seeds}; expected at least 1, e.g. seeds: 3")
        if seeds > MAX_RUNS:
            raise SimdistError(
                f"seeds: got {seeds:,}; each seed is a whole run: at most {MAX_RUNS:,}, "
                "e.g. seeds: 10"
            )
        return list(range(seeds))
    values = list(seeds)
    if len(values) > MAX_RUNS:
        raise SimdistError(
            f"seeds: got {len(values):,} seeds; each is a whole run: at most {MAX_RUNS:,}"
        )
    import numpy as np

    if not values or any(
        isinstance(v, bool) or not isinstance(v, int | np.integer) for v in values
    ):
        raise SimdistError(f"seeds: got {seeds!r}; expected whole numbers, e.g. [0, 1, 2]")
    if any(v < 0 for v in values) or len(set(values)) != len(values):
        raise SimdistError(f"seeds: got {values}; expected distinct seeds >= 0, e.g. [0, 1, 2]")
    big = [v for v in values if v > MAX_SEED]
    if big:
        from simdist.spec import show

        shown = f"{int(big[0]):,}" if big[0] < 10**30 else show(int(big[0]))
        raise SimdistError(
            f"seeds: got {shown}; a seed is at most 2^63 - 1 "
            f"({MAX_SEED:,}: the reports keep seeds as 64-bit integers), e.g. [0, 1, 2]"
        )
    return [int(v) for v in values]


def run_batch(
    scenarios: Sequence[Scenario], on_run: Callable[[int], None] | None = None
) -> list[Result]:
    """:func:`run` of each validated scenario (no report written), in this process, the
    numerics of runs that share programs computed together
    (:func:`simdist.runtime.engine.run_batch`): each Result is the one :func:`run` gives.
    ``on_run(k)`` is called as run ``k`` starts."""
    from simdist.runtime.engine import run_batch as run_engine_batch
    from simdist.runtime.recorder import EVENT_DTYPES, METRIC_DTYPES

    scenarios = list(scenarios)
    if len(scenarios) == 1 or any(s.jobs is not None for s in scenarios):
        results = []
        for k, scenario in enumerate(scenarios):
            if on_run is not None:
                on_run(k)
            results.append(run(scenario))
        return results
    for scenario in scenarios:
        preflight(scenario)
    try:
        results = run_engine_batch(scenarios, on_run=on_run)
    except DataError:
        # Which run's data is bad? One by one, each error names its scenario.
        return [run(scenario) for scenario in scenarios]
    for result in results:
        result.events = conform(result.events, EVENT_DTYPES)
        result.metrics = conform(result.metrics, METRIC_DTYPES)
    return results


def _run_task(scenario: Scenario, devices: int) -> Result:
    """One run as a Dask task (a module-level function, so worker processes can import it)."""
    if devices > 1 and scenario.numerics:
        from simdist.numerics.executor import ensure_devices

        ensure_devices(devices)
    return run(scenario)


def run_many(
    scenarios: Sequence[Scenario],
    *,
    parallel: bool | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
    on_run: Callable[[str], None] | None = None,
    labels: Sequence[str] | None = None,
) -> list[Result]:
    """Run validated scenarios and return their Results, in order.

    Independent runs, so with ``parallel`` (default: when a ``scheduler`` or ``processes``
    > 1 is given, or from :data:`DASK_MIN_RUNS` runs on a machine of
    :data:`DASK_MIN_CORES` cores) they are Dask tasks on :func:`simdist.sweep.dask_client`
    (a local cluster of ``processes`` workers, default the cores, or the scheduler at
    ``scheduler``); else they run in this process, :data:`BATCH_RUNS` at a time, their
    numerics computed together where they share programs (:func:`run_batch`).
    Either way the same scenario gives the same Result (docs/ARCHITECTURE.md, "Rules the
    design keeps"). The first run that fails raises its error. ``on_run(name)`` is called
    as each run starts (in order when run here; as each is submitted on Dask) with a
    label that tells the runs apart: ``labels[k]`` when given, else the scenario's name and
    seed, and always "run k of n".
    """
    import os

    scenarios = list(scenarios)
    cores = processes or os.cpu_count() or 1
    if parallel is None:
        many = len(scenarios) >= DASK_MIN_RUNS and cores >= DASK_MIN_CORES
        parallel = scheduler is not None or (processes is not None and processes > 1) or many
    notify = on_run or (lambda name: None)
    named = list(labels) if labels is not None else [f"{s.name}, seed {s.seed}" for s in scenarios]
    named = [f"{label} (run {k} of {len(named)})" for k, label in enumerate(named, start=1)]
    if not parallel or (len(scenarios) <= 1 and scheduler is None):
        results = []
        for start in range(0, len(scenarios), BATCH_RUNS):
            chunk = scenarios[start : start + BATCH_RUNS]
            labels_ = named[start : start + BATCH_RUNS]
            results.extend(run_batch(chunk, on_run=lambda k, labels_=labels_: notify(labels_[k])))
        return results
    from simdist.sweep.runner import dask_client

    # JAX fixes its device count when a worker first uses it (simdist.sweep.devices_needed).
    explicit = [s.numeric_devices for s in scenarios if s.runs_on_devices]
    devices = max(explicit, default=1)
    with dask_client(scheduler, min(cores, len(scenarios))) as client:
        futures = []
        for scenario, label in zip(scenarios, named, strict=True):
            notify(label)
            futures.append(client.submit(_run_task, scenario, devices, pure=False))
        return client.gather(futures)


def run_seeds(
    scenario: ScenarioLike,
    seeds: int | Sequence[int],
    overrides: Mapping[str, Any] | Sequence[str] = (),
    *,
    timing_only: bool = False,
    parallel: bool | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
) -> list[Result]:
    """Run ``scenario`` once per seed; return the Results in the order of the seeds.

    ``seeds`` is a count N (seeds 0, 1, …, N−1) or a list of seeds. A seed sets
    ``seed:``, from which every random draw of a run derives (initial parameters, data
    split and order, stragglers, failures), so the runs differ only by chance.
    ``overrides`` are as :func:`run`'s (a ``seed`` among them is replaced);
    ``timing_only=True`` adds ``numerics=false`` (no loss or accuracy: fast). Many runs
    go to Dask (:func:`run_many`). Tabulate with
    :func:`simdist.report.compare.seed_table`, aggregate with
    :func:`simdist.bands.aggregate`, plot with :func:`simdist.report.bands.accuracy_bands`::

        runs = {"async": simdist.api.run_seeds("scenarios/ps_4w2s.yaml", 3)}
        per_seed = seed_table(runs, target=0.9)           # one row per seed
        simdist.bands.aggregate(per_seed, by=["run"])     # X_mean, X_min, X_max, X_ci95, X_n
    """
    strings = override_strings(overrides)
    extra = ["numerics=false"] if timing_only else []
    scenarios = [
        resolve_scenario(scenario, [*strings, *extra, f"seed={seed}"]) for seed in seed_list(seeds)
    ]
    for item in scenarios:
        preflight(item, source=source_name(scenario))
    return run_many(scenarios, parallel=parallel, processes=processes, scheduler=scheduler)
