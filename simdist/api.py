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

import contextlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from simdist.errors import DataError, SimdistError
from simdist.preflight import (  # the API's checks before and after a run, re-exported
    Preflight,
    _source,
    preflight,
    warnings_after,
)

if TYPE_CHECKING:
    import numpy as np
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
    (:mod:`simdist.report.jobs`). Two runs into one ``out`` at once: the second is refused
    (:func:`simdist.report.tables.report_lock`).
    """
    scenario = resolve_scenario(path_or_scenario, overrides, **kw)
    source = source or _source(path_or_scenario)
    preflight(scenario, out=out, source=source)
    guard: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if out is not None:
        from simdist.report.tables import report_lock

        guard = report_lock(Path(out))  # a second run into the same folder at once is refused
    with guard:
        if scenario.jobs is not None:
            return _run_jobs(scenario, out, on_step, on_time, source)
        from simdist.engine import run as run_engine

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
    import numpy as np

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
