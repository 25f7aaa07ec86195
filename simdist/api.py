"""The Python API for notebooks and scripts: ``run`` a scenario, ``load_report`` a folder,
``compare`` several runs.

Both return a :class:`~simdist.engine.Result` whose DataFrames equal the CSV
files of the report folder, dtypes included: ``run(...).events`` and
``load_report(folder).events`` compare equal with
``pandas.testing.assert_frame_equal``.  The one subtlety is that a CSV cell
cannot tell an empty string from a missing number; :func:`read_table` reads
empty cells as NaN in numeric columns and as ``""`` in text columns, which is
what the recorder writes.

```python
import simdist
result = simdist.run("scenarios/ps_4w2s.yaml", cluster__hosts=8, strategy__staleness_bound=2)
result.metrics.query("metric == 'test_accuracy'")
same = simdist.load_report("reports/ps_4w2s")
folder, table = simdist.api.compare(["scenarios/ps_4w2s.yaml", "reports/mirrored_4dev"])
```

The API runs and loads; :mod:`simdist.report` only writes (report folders,
comparison folders) and never imports the API or the engine.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from simdist.errors import DataError, ScenarioError, SimdistError

if TYPE_CHECKING:
    import pandas as pd

    from simdist.engine import Result
    from simdist.jobs import JobsResult
    from simdist.runs import DASK_MIN_RUNS, run_many, run_seeds, seed_list
    from simdist.tradeoff import Tradeoff, tradeoff

# pandas, the engine (SimPy) and the recorder are imported where they are used, so
# ``simdist validate`` (preflight) starts without them (issue 15).


#: Names of the API that live in their own modules (loaded on first use): many runs
#: (seeds, Dask) in :mod:`simdist.runs`, the trade-off study in :mod:`simdist.tradeoff`.
_ELSEWHERE = {
    "DASK_MIN_RUNS": "simdist.runs",
    "run_many": "simdist.runs",
    "run_seeds": "simdist.runs",
    "seed_list": "simdist.runs",
    "Tradeoff": "simdist.tradeoff",
    "tradeoff": "simdist.tradeoff",
}


def __getattr__(name: str) -> Any:
    if name == "Result":  # simdist.api.Result, loaded on first use
        from simdist.engine import Result

        return Result
    if name in _ELSEWHERE:
        from importlib import import_module

        return getattr(import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module 'simdist.api' has no attribute {name!r}")


__all__ = [
    "DASK_MIN_RUNS",
    "Preflight",
    "Result",
    "Tradeoff",
    "compare",
    "load_report",
    "preflight",
    "read_params",
    "read_table",
    "run",
    "run_many",
    "run_seeds",
    "seed_list",
    "tradeoff",
    "warnings_after",
]

#: CSV files of a report folder that are not extra tables.
_NOT_TABLES = ("metrics", "events")


def conform(frame: pd.DataFrame, dtypes: Mapping[str, str]) -> pd.DataFrame:
    """``frame`` with the listed columns cast to ``dtypes``; text columns have ``""``, not NaN."""
    casts = {}
    for column, dtype in dtypes.items():
        if column not in frame.columns:
            continue
        values = frame[column]
        if dtype == "str":
            values = values.astype(object).fillna("")
        casts[column] = values.astype(dtype)
    return frame.assign(**casts) if casts else frame


def read_table(path: str | Path, dtypes: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Read a CSV table of a report folder back into the DataFrame that was written.

    Only empty cells are missing (a host called ``NA`` stays a string);
    empty cells are NaN in numeric columns and ``""`` in text columns.
    ``dtypes`` pins known columns (an all-empty text column would otherwise
    read as float NaN).
    """
    import pandas as pd

    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    text = {c: frame[c].fillna("") for c in frame.columns if pd.api.types.is_string_dtype(frame[c])}
    if text:
        frame = frame.assign(**text)
    return conform(frame, dtypes or {})


def _literal(value: Any) -> str:
    """``value`` as YAML text that reads back as the same Python value."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value, default=str)


def override_strings(overrides: Mapping[str, Any] | Sequence[str] = (), **kw: Any) -> list[str]:
    """``--set``-style ``"a.b=value"`` strings from the API's override forms.

    ``overrides`` is either ``--set`` strings (values read as YAML, as on the
    command line) or a mapping of dotted paths to Python values; keyword
    arguments spell dots as ``__`` (``cluster__hosts=8`` → ``cluster.hosts=8``).
    Python values keep their type: ``"8"`` stays a string, ``8`` an integer.
    """
    if isinstance(overrides, str):
        raise TypeError("overrides: give a sequence of 'path=value' strings or a mapping")
    if isinstance(overrides, Mapping):
        strings = [f"{key}={_literal(value)}" for key, value in overrides.items()]
    else:
        strings = [str(item) for item in overrides]
    strings += [f"{key.replace('__', '.')}={_literal(value)}" for key, value in kw.items()]
    return strings


def resolve_scenario(
    path_or_scenario: Any, overrides: Mapping[str, Any] | Sequence[str] = (), **kw: Any
) -> Any:
    """A validated :class:`~simdist.scenario.Scenario` from a file, a Scenario or a dict.

    Overrides apply to all three: a Scenario is dumped to its resolved YAML
    form, overridden and validated again, so the result is a new object.
    """
    import yaml

    from simdist.scenario import (
        Scenario,
        apply_overrides,
        dump_scenario,
        load_scenario,
        scenario_from_dict,
    )

    strings = override_strings(overrides, **kw)
    if isinstance(path_or_scenario, Scenario):
        if not strings:
            return path_or_scenario
        data = yaml.safe_load(dump_scenario(path_or_scenario))
        return scenario_from_dict(apply_overrides(data, strings), f"<scenario {data['name']}>")
    if isinstance(path_or_scenario, Mapping):
        return scenario_from_dict(apply_overrides(dict(path_or_scenario), strings), "<dict>")
    return load_scenario(path_or_scenario, strings)


#: Above this estimated wall time a run is called huge (a warning, not an error).
HUGE_RUN_S = 3600.0
#: Rough wall time per simulated step: per training device or PS task, and for the
#: numerics (one jitted gradient and update); measured on a 2-core CPU for digits/mlp.
WALL_S_PER_TASK_STEP = 30e-6
WALL_S_PER_NUMERIC_STEP = 1e-3
#: A final train loss this many times its first is reported as a likely divergence.
BLOW_UP_FACTOR = 10.0
#: Least memory one simulated step of one task takes: a run keeps its events and metrics
#: until the report is written (measured 600-1,800 bytes with the tables built).
RECORD_BYTES_PER_TASK_STEP = 300


@dataclass(frozen=True)
class Preflight:
    """What :func:`preflight` found: the run's expected size, and warnings to print.

    ``total_steps`` is None only for ``epochs`` without a data set (refused at load);
    ``train_examples`` is None when the scenario trains on no data set.
    """

    total_steps: int | None
    train_examples: int | None
    wall_s: float
    warnings: tuple[str, ...] = ()


def _source(path_or_scenario: Any) -> str | None:
    if isinstance(path_or_scenario, str | Path):
        return str(path_or_scenario)
    return None


def _duration_words(seconds: float) -> str:
    """``3.2 h``, ``12 days``, ``4.1e+20 years``: the scale a person reads at a glance."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("h", 3600.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.3g} {unit}" if value < 1e6 else f"{value:.2g} {unit}"
    return f"{seconds / 60:.3g} min"


def _batch_field(scenario: Any) -> str:
    given = scenario.workload.model_fields_set
    return "workload.global_batch_size" if "global_batch_size" in given else "workload.batch_size"


def _check_files_and_model(scenario: Any, source: str) -> None:
    """Read the data files whole and build the model on shapes: what a run's first
    moments would refuse (a bad npz or init_from, a model too large for the memory or
    unfit for the data). Raises DataError, or ScenarioError naming ``source``."""
    from simdist.catalog import FULLSIZE_MODELS
    from simdist.numerics.data import model_inputs
    from simdist.numerics.memory import check_param_bytes, known_model_size

    w = scenario.workload
    if w.dataset is not None:
        shape, outputs = model_inputs(w.dataset, scenario.seed)
        if w.model is not None and w.model.name not in FULLSIZE_MODELS:
            known = known_model_size(w.model, shape, outputs) if w.init_from is None else None
            if known is not None:  # built on these shapes before: no JAX needed
                check_param_bytes(*known, w.model)
                return
            from simdist.numerics.executor import check_model

            try:
                check_model(w.model, shape, outputs, w.init_from)
            except DataError:
                raise
            except SimdistError as exc:  # e.g. a cnn on flat vectors
                raise ScenarioError(source, "workload.model", str(exc)) from None
            return
    if w.init_from is not None:
        from simdist.numerics.executor import read_params_file

        read_params_file(w.init_from)


def preflight(
    scenario: Any,
    *,
    out: str | Path | None = None,
    source: str | None = None,
    data: bool = False,
) -> Preflight:
    """Check what a run of ``scenario`` would hit before its first step, and estimate it.

    Raises :class:`~simdist.errors.ScenarioError` (naming ``source``, the scenario's
    file) for a global batch larger than the training set (with numerics on) and a data
    file that cannot be used, and :class:`~simdist.errors.SimdistError` for an ``out``
    that cannot be a report folder. Returns the expected step count, a rough wall time
    and warnings, e.g. for a run that would take longer than an hour.

    ``data=True`` (``simdist validate``) also reads an npz data set and an ``init_from``
    file whole and checks their values, and checks the model on shapes alone (its size
    against the memory, ``init_from`` against its parameters); a run does all that as it
    builds its workload.
    """
    from simdist.numerics.data import train_examples
    from simdist.report.tables import check_output_folder
    from simdist.spec import show

    source = source or f"<scenario {scenario.name}>"
    if getattr(scenario, "jobs", None) is not None:
        return _preflight_jobs(scenario, out=out, source=source, data=data)
    if out is not None:
        check_output_folder(Path(out))
    w = scenario.workload
    n_train = None
    try:
        if w.dataset is not None:
            n_train = train_examples(w.dataset, scenario.seed)
        if data:
            _check_files_and_model(scenario, source)
    except DataError as exc:
        raise exc.in_scenario(source) from None
    batch = scenario.global_batch
    if scenario.numerics and n_train is not None and batch > n_train:
        per = max(1, n_train // scenario.replicas)
        raise ScenarioError(
            source,
            _batch_field(scenario),
            f"the global batch of {batch:,} examples ({scenario.replicas} replica(s) x "
            f"{w.batch_size:,}) is larger than the training set of {n_train:,} "
            f"({w.dataset.name}); a step draws distinct examples, so use at most "
            f"{n_train:,}, e.g. batch_size: {per}",
        )
    total = w.steps
    if total is None and n_train is not None:
        total = w.total_steps(n_train)
    tasks = max(1, scenario.replicas + scenario.cluster.ps)
    per_step = WALL_S_PER_TASK_STEP * tasks + (WALL_S_PER_NUMERIC_STEP if scenario.numerics else 0)
    steps = float(min(total or 0, 10**300))
    wall = per_step * steps
    warnings = []
    if wall > HUGE_RUN_S:
        from simdist.numerics.memory import physical_memory_nbytes

        field = "workload.steps" if w.steps is not None else "workload.epochs"
        huge = (
            f"{f'{total:,}' if total < 10**15 else show(total)} steps is huge: simulating them "
            f"would take about {_duration_words(wall)} of wall time (roughly "
            f"{per_step * 1e3:.2g} ms a step here)"
        )
        memory, ram = RECORD_BYTES_PER_TASK_STEP * tasks * steps, physical_memory_nbytes()
        if ram is not None and memory > ram:
            raise ScenarioError(
                source,
                field,
                f"{huge} and at least {memory / 1e9:.2g} GB of memory for what it records "
                f"(kept until the report is written), more than this machine's "
                f"{ram / 1e9:.3g} GB; e.g. steps: 1000",
            )
        warnings.append(f"{source}: {field}: {huge}; Ctrl-C stops a run")
    return Preflight(total, n_train, wall, tuple(warnings))


def _preflight_jobs(scenario: Any, *, out: str | Path | None, source: str, data: bool) -> Preflight:
    """:func:`preflight` of every job of a scenario with ``jobs:``, its errors at the job's
    fields; the step count and wall time add up (each job also runs alone, timing-only)."""
    from simdist.report.tables import check_output_folder
    from simdist.scenario.jobs import job_field

    if out is not None:
        check_output_folder(Path(out))
    total, wall, warnings = 0, 0.0, []
    for i, job in enumerate(scenario.jobs):
        try:
            checked = preflight(job.scenario, source=source, data=data)
        except ScenarioError as exc:
            raise ScenarioError(exc.source, job_field(i, exc.field), exc.message) from None
        total += checked.total_steps or 0
        wall += checked.wall_s
        warnings += [w.replace(f"{source}: ", f"{source}: jobs[{i}].", 1) for w in checked.warnings]
    return Preflight(total, None, wall, tuple(warnings))


def warnings_after(result: Result, source: str | None = None) -> list[str]:
    """Warnings about a finished run: what the scenario asked for that did not happen.

    A failure scheduled after the run ended (it never happened), and a train loss that
    blew up without becoming NaN or inf (its last value far above its first).
    """
    scenario, summary = result.scenario, result.summary
    source = source or f"<scenario {scenario.name}>"
    from simdist.units import format_duration

    end = float(summary["simulated_time_s"])
    warnings = []
    for i, failure in enumerate(scenario.faults.failures):
        if failure.at_s is not None and failure.at_s > end:
            at = failure.at_s
            when = f"{at / 3600:,.6g} h" if at >= 3600 else format_duration(at)
            warnings.append(
                f"{source}: faults.failures[{i}].at: {when} is after the run ended at "
                f"simulated t = {format_duration(end)}; this failure never happened"
            )
    losses = result.metrics.loc[result.metrics["metric"] == "train_loss", "value"]
    if not summary.get("diverged") and len(losses) > 1:
        first, last = float(losses.iloc[0]), float(losses.iloc[-1])
        if first > 0 and last > BLOW_UP_FACTOR * first:
            warnings.append(
                f"{source}: workload.optimizer.learning_rate: the train loss rose from "
                f"{first:.4g} at the first step to {last:.4g} at the last without becoming "
                "NaN or inf; the run has probably diverged, e.g. try a smaller learning_rate"
            )
    return warnings


def run(
    path_or_scenario: str | Path | Any,
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
    :func:`preflight`), and so does an ``out`` that cannot be a report folder.
    ``on_step(step, total)`` and ``on_time(simulated_s)`` are called as the
    simulation advances (a progress bar).  Errors name ``source``: by default the
    scenario file given, else ``<scenario NAME>``.  A diverged run returns
    normally, with ``summary["diverged"]`` set.

    A scenario with ``jobs:`` (several jobs sharing one cluster) returns a
    :class:`simdist.jobs.JobsResult` instead: each job's Result in company and alone,
    and the interference table; its report folder holds a subfolder per job
    (:mod:`simdist.report.jobs`).
    """
    from simdist.engine import run as run_engine

    scenario = resolve_scenario(path_or_scenario, overrides, **kw)
    source = source or _source(path_or_scenario)
    preflight(scenario, out=out, source=source)
    if scenario.jobs is not None:
        return _run_jobs(scenario, out, on_step, on_time, source)
    try:
        result = run_engine(scenario, on_step=on_step, on_time=on_time)
    except DataError as exc:
        raise exc.in_scenario(source or f"<scenario {scenario.name}>") from None
    from simdist.recorder import EVENT_DTYPES, METRIC_DTYPES

    result.events = conform(result.events, EVENT_DTYPES)
    result.metrics = conform(result.metrics, METRIC_DTYPES)
    if out is not None:
        from simdist.report import write_report

        write_report(result, Path(out))
    return result


def _run_jobs(
    scenario: Any,
    out: str | Path | None,
    on_step: Callable[[int, int], None] | None,
    on_time: Callable[[float], None] | None,
    source: str | None,
) -> Any:
    """:func:`run` of a scenario with ``jobs:``: a :class:`simdist.jobs.JobsResult`, its
    folder written by :func:`simdist.report.jobs.write_jobs_report` (a subfolder per job)."""
    from simdist.jobs import run_jobs
    from simdist.recorder import EVENT_DTYPES, METRIC_DTYPES

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


def _unflatten(flat: Mapping[str, np.ndarray]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, array in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = array
    return tree


def read_params(path: str | Path, layout: Literal["tree", "flat"] = "tree") -> Any:
    """The arrays of a ``params.npz`` written by a run.

    ``flat``: ``{"params/Dense_0/kernel": array, …}`` — keys are the pytree
    paths, as stored.  ``tree``: the same arrays nested by path,
    ``{"params": {"Dense_0": {"kernel": array}}}`` — the structure of a Flax
    ``params`` pytree (dicts of dicts), so it can be passed to ``model.apply``;
    a pytree with lists or tuples would come back as dicts keyed ``"0"``, ``"1"``…
    """
    with np.load(path, allow_pickle=False) as data:
        flat = {key: np.asarray(data[key]) for key in data.files}
    if layout == "flat":
        return flat
    if layout == "tree":
        return _unflatten(flat)
    raise ValueError(f"layout: got {layout!r}; expected 'tree' or 'flat'")


def load_report(path: str | Path, *, params: Literal["tree", "flat"] = "tree") -> Result:
    """Read a report folder back into a :class:`Result`.

    Reads ``metrics.csv``, ``events.csv``, ``summary.json``, ``scenario.yaml``,
    every other ``*.csv`` as an extra table (``updates.csv`` →
    ``result.tables["updates"]``) and ``params.npz`` when present (see
    :func:`read_params` for ``params``: ``tree`` or ``flat``).  Raises
    :class:`~simdist.errors.SimdistError` if the folder is not a report.
    """
    from simdist.engine import Result
    from simdist.recorder import EVENT_DTYPES, METRIC_DTYPES
    from simdist.scenario import load_scenario

    folder = Path(path)
    if (folder / "interference.csv").is_file() and not (folder / "events.csv").is_file():
        jobs = sorted(p.parent.name for p in folder.glob("*/summary.json"))
        raise SimdistError(
            f"{folder}: the report of several jobs on one cluster (simdist.report.jobs); load "
            f"one job's folder, e.g. {folder / (jobs[0] if jobs else '<job>')}"
        )
    if not (folder / "summary.json").is_file():
        raise SimdistError(f"{folder}: not a simdist report folder (no summary.json in it)")
    missing = [
        n for n in ("metrics.csv", "events.csv", "scenario.yaml") if not (folder / n).is_file()
    ]
    if missing:
        raise SimdistError(f"{folder}: incomplete report, missing {', '.join(missing)}")
    from simdist.network.telemetry import TABLE_DTYPES

    tables = {
        csv.stem: read_table(csv, TABLE_DTYPES.get(csv.stem))
        for csv in sorted(folder.glob("*.csv"))
        if csv.stem not in _NOT_TABLES
    }
    npz = folder / "params.npz"
    return Result(
        scenario=load_scenario(folder / "scenario.yaml"),
        metrics=read_table(folder / "metrics.csv", METRIC_DTYPES),
        events=read_table(folder / "events.csv", EVENT_DTYPES),
        summary=json.loads((folder / "summary.json").read_text()),
        params=read_params(npz, params) if npz.is_file() else None,
        tables=tables,
        out_dir=folder,
    )


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"


def compare(
    sources: Sequence[str | Path],
    *,
    out: str | Path | None = None,
    target: float | None = None,
    overrides: Sequence[str] = (),
    on_run: Callable[[str], None] | None = None,
    seeds: int | Sequence[int] | None = None,
    parallel: bool | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
) -> tuple[Path, pd.DataFrame]:
    """Run or load every source, then write one comparison report; return (folder, table).

    A source is a scenario file (``overrides`` — ``--set`` strings — apply to
    it) or a report folder (:func:`load_report`).  Every scenario is validated
    and every report loaded before anything runs, so a bad input fails fast.
    ``target`` is the test accuracy of "time to target" (default
    :data:`simdist.report.compare.DEFAULT_TARGET`, 0.9).  ``out`` defaults to
    ``reports/compare_<name>_<name>…``.  ``on_run(name)`` is called before each
    simulation.  The table is :func:`simdist.report.compare.compare_table`'s,
    as written to ``compare.csv``.

    ``seeds`` (a count N for seeds 0…N−1, or a list) runs every scenario file once per
    seed (a report folder is one run, its own seed), on Dask when there are many
    (:func:`run_many`: ``parallel``, ``processes``, ``scheduler``). The table is then
    :func:`simdist.report.compare.seeds_summary`'s — one row per scenario with each
    figure's mean, min, max, t-based 95% interval and count of seeds (for time to target,
    how many reached it) — and the folder also holds ``per_seed.csv``.
    """
    from simdist.engine import Result
    from simdist.report.compare import DEFAULT_TARGET, write_compare, write_compare_seeds
    from simdist.report.tables import check_output_folder
    from simdist.scenario import load_scenario

    target = DEFAULT_TARGET if target is None else target
    if not sources:
        raise SimdistError("compare needs at least one scenario file or report folder")
    if not 0 < target <= 1:
        raise SimdistError(f"--target: got {target:g}; expected an accuracy in (0, 1], e.g. 0.9")
    from simdist.runs import run_many, seed_list

    seeds_given = seed_list(seeds) if seeds is not None else None
    loaded: list[list[Any]] = []
    for source in map(Path, sources):
        if source.is_dir():
            loaded.append([load_report(source)])
        elif source.is_file() and seeds_given is None:
            loaded.append([load_scenario(source, overrides)])
        elif source.is_file():
            per_seed = [load_scenario(source, [*overrides, f"seed={s}"]) for s in seeds_given]
            loaded.append(per_seed)
        else:
            raise SimdistError(
                f"{source}: not found; expected a scenario .yaml file or a report folder"
            )
        for item in loaded[-1]:
            if not isinstance(item, Result):
                if item.jobs is not None:
                    raise SimdistError(
                        f"{source}: a scenario with jobs: (several jobs on one cluster) is not "
                        f"one run; run it, then compare its jobs' report folders, e.g. simdist "
                        f"compare {' '.join(f'reports/{item.name}/{j.name}' for j in item.jobs)}"
                    )
                preflight(item, source=str(source))
    if out is not None:
        check_output_folder(Path(out))
    if seeds_given is None:
        results = []
        for [item], source in zip(loaded, sources, strict=True):
            if not isinstance(item, Result):
                if on_run is not None:
                    on_run(item.name)
                item = run(item, source=str(source))
            results.append(item)
        names = [_slug(r.summary.get("name", r.scenario.name)) for r in results]
        out_dir = Path(out) if out is not None else Path("reports") / ("compare_" + "_".join(names))
        table = write_compare(results, out_dir, target, [str(s) for s in sources])
        return out_dir, table
    todo = [item for items in loaded for item in items if not isinstance(item, Result)]
    ran = iter(
        run_many(todo, parallel=parallel, processes=processes, scheduler=scheduler, on_run=on_run)
    )
    by_label: dict[str, list[Any]] = {}
    labels: dict[str, str] = {}
    for items, source in zip(loaded, sources, strict=True):
        results = [item if isinstance(item, Result) else next(ran) for item in items]
        name = results[0].summary.get("name", results[0].scenario.name)
        label, k = name, 1
        while label in by_label:
            k += 1
            label = f"{name} ({k})"
        by_label[label], labels[label] = results, str(source)
    names = [_slug(label) for label in by_label]
    out_dir = Path(out) if out is not None else Path("reports") / ("compare_" + "_".join(names))
    summary, _ = write_compare_seeds(by_label, out_dir, target, labels)
    return out_dir, summary
