"""Sweeps: a grid over scenario fields × seeds, each point one independent run on Dask.

A sweep is a base scenario and a grid, ``{field path: [values]}``; every
combination of values is a *point*, applied to the base scenario exactly as
``simdist run --set path=value`` would.  Points are independent runs, so they
are executed as Dask tasks (DESIGN.md §7): on a ``LocalCluster`` of worker
processes by default, or on an existing scheduler when its address is given.

Everything a point produced is stored as soon as it arrives, in
``<out>/points/<point>.json`` (status, error, summary) and
``<out>/points/<point>.metrics.csv``; a re-run skips every point whose stored
result is ``ok`` and was made from the same resolved scenario (a fingerprint
of it is stored), so an interrupted sweep resumes where it stopped and an
edited base scenario is recomputed.  A point that fails is stored with its
error and the others go on; failed points are retried on the next run.  At the
end the points are merged into ``<out>/sweep.csv`` (one row per point, its
parameters then its summary flattened: ``staleness.mean``,
``time_split.comm``) and ``<out>/sweep_<metric>.png``.

The sweep file (YAML)::

    name: ps_workers            # optional; default: the file's name
    base: ps_4w2s.yaml          # the scenario, relative to this file
    set: {workload.steps: 500}  # optional: overrides applied to every point
    grid:                       # field path: values (a list, or "a..b" for whole numbers)
      cluster.hosts: [1, 2, 4, 8]
      seed: 0..2
    metric: final_test_accuracy # optional: the summary figure to plot
    processes: 2                # optional: local worker processes
    scheduler: null             # optional: tcp://host:8786 for an existing Dask scheduler
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from simdist.errors import ScenarioError, SimdistError

DEFAULT_METRIC = "final_test_accuracy"
_SWEEP_KEYS = ("name", "base", "set", "grid", "metric", "processes", "scheduler")
_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*$")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")
# YAML 1.1 (PyYAML) reads "1e-3" as a string; on the command line it is meant as a number.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


# ---------------------------------------------------------------- the grid


@dataclass(frozen=True)
class Axis:
    """One field of the grid and the values it takes, in order."""

    path: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """One combination of grid values; ``params`` maps each axis path to its value."""

    name: str
    params: tuple[tuple[str, Any], ...]

    @property
    def overrides(self) -> tuple[str, ...]:
        """The point as ``--set`` arguments: ``simdist run BASE --set ...`` reproduces it."""
        return tuple(f"{path}={flow_yaml(value)}" for path, value in self.params)


def flow_yaml(value: Any) -> str:
    """``value`` as one line of YAML that ``yaml.safe_load`` reads back to an equal value."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def expand_values(raw: Any, where: str) -> list[Any]:
    """Grid values from a YAML list, a scalar, or text: ``0,1,2``, ``0..4``, ``[[16], [32]]``.

    ``a..b`` stands for every whole number from a to b, both included.
    Items of a comma list are read as YAML, so ``1e-3`` is a number and
    ``10Gbit/s`` a string.
    """
    parse = False
    if isinstance(raw, list):
        items: list[Any] = raw
    elif isinstance(raw, str) and raw.strip().startswith("["):
        try:
            items = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise SimdistError(f"{where}: {raw!r} is not a valid YAML list: {exc}") from None
        if not isinstance(items, list):
            raise SimdistError(f"{where}: {raw!r} is not a YAML list, e.g. [[16], [32]]")
    elif isinstance(raw, str):
        items, parse = [part.strip() for part in raw.split(",")], True
        if any(not part for part in items):
            raise SimdistError(f"{where}: empty value in {raw!r}; expected e.g. 0,1,2 or 0..4")
    else:
        items = [raw]
    values: list[Any] = []
    for item in items:
        match = _RANGE.match(item) if isinstance(item, str) else None
        if match:
            low, high = int(match[1]), int(match[2])
            if low > high:
                raise SimdistError(f"{where}: range {item!r} runs backwards; expected e.g. 0..4")
            values.extend(range(low, high + 1))
        elif parse and _EXPONENT.fullmatch(item):
            values.append(float(item))
        elif parse:
            try:
                values.append(yaml.safe_load(item))
            except yaml.YAMLError as exc:
                raise SimdistError(f"{where}: value {item!r} is not valid YAML: {exc}") from None
        else:
            values.append(item)
    if not values:
        raise SimdistError(f"{where}: no values; expected e.g. 0,1,2 or 0..4")
    return values


def parse_grid_option(text: str) -> Axis:
    """An axis from a ``--grid`` option: ``strategy.staleness_bound=0,1,2`` or ``seed=0..4``."""
    path, eq, raw = text.partition("=")
    path = path.strip()
    if not eq or not path or any(not part for part in path.split(".")):
        raise SimdistError(
            f"--grid: got {text!r}; expected path=values, e.g. --grid seed=0..4 "
            "or --grid strategy.staleness_bound=0,1,2"
        )
    return Axis(path, tuple(expand_values(raw, f"--grid {path}")))


def _labels(axes: Sequence[Axis]) -> list[str]:
    """Short axis names: the last key of each path, or the whole path where that is ambiguous."""
    last = [axis.path.rsplit(".", 1)[-1] for axis in axes]
    return [
        label if last.count(label) == 1 else axis.path
        for label, axis in zip(last, axes, strict=True)
    ]


def _value_label(value: Any) -> str:
    text = flow_yaml(value)
    for ch in "[]{}'\" ":
        text = text.replace(ch, "")
    return _NAME_UNSAFE.sub("_", text.replace(",", "-").replace(":", "-")) or "_"


def grid_points(axes: Sequence[Axis]) -> list[Point]:
    """Every combination of the axes' values, the last axis varying fastest.

    A point's name is ``label=value`` per axis joined by commas
    (``staleness_bound=0,seed=3``); it names the point's files, so characters
    other than letters, digits and ``_.+-`` become ``_``.
    """
    labels = _labels(axes)
    points: list[Point] = []
    seen: set[str] = set()
    for combo in itertools.product(*(axis.values for axis in axes)):
        name = ",".join(
            f"{label}={_value_label(value)}" for label, value in zip(labels, combo, strict=True)
        )
        unique, n = name, 2
        while unique in seen:
            unique, n = f"{name}-{n}", n + 1
        seen.add(unique)
        points.append(Point(unique, tuple((a.path, v) for a, v in zip(axes, combo, strict=True))))
    return points


# ---------------------------------------------------------------- the sweep


@dataclass
class Sweep:
    """A base scenario, the grid over it, and how to run it."""

    name: str
    base: Path
    base_data: dict[str, Any]
    axes: list[Axis]
    fixed: tuple[str, ...] = ()
    metric: str = DEFAULT_METRIC
    processes: int | None = None
    scheduler: str | None = None

    def points(self) -> list[Point]:
        """The grid's points, in grid order."""
        return grid_points(self.axes)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(
            str(path), "", "file not found; expected a scenario or sweep YAML file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(path), "", f"cannot read the file: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(str(path), "", f"not valid YAML: {exc}") from None


def is_sweep_file(data: Any) -> bool:
    """A sweep file names a ``base`` scenario; a scenario never has that key."""
    return isinstance(data, dict) and "base" in data


def load_sweep(
    path: str | Path,
    grid: Sequence[str] = (),
    overrides: Sequence[str] = (),
    *,
    metric: str | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
) -> Sweep:
    """A :class:`Sweep` from a sweep file or a scenario file, plus command-line options.

    ``grid`` holds ``--grid`` texts (added to the file's grid; the same path
    replaces the file's values), ``overrides`` ``--set`` texts applied to every
    point; the other options replace the file's.
    """
    path = Path(path)
    data = _read_yaml(path)
    source = str(path)
    axes: list[Axis] = []
    fixed: list[str] = []
    options: dict[str, Any] = {}
    if is_sweep_file(data):
        unknown = [k for k in data if k not in _SWEEP_KEYS]
        if unknown:
            raise ScenarioError(
                source, str(unknown[0]), f"unknown key; a sweep file has: {', '.join(_SWEEP_KEYS)}"
            )
        base = Path(str(data["base"]))
        base = base if base.is_absolute() else path.parent / base
        name = str(data.get("name") or path.stem)
        grid_data = data.get("grid") or {}
        if not isinstance(grid_data, dict):
            raise ScenarioError(
                source, "grid", "expected a mapping of field path to values, e.g. seed: [0, 1]"
            )
        for key, raw in grid_data.items():
            axes.append(Axis(str(key), tuple(expand_values(raw, f"{source}: grid.{key}"))))
        fixed_data = data.get("set") or {}
        if not isinstance(fixed_data, dict):
            raise ScenarioError(
                source, "set", "expected a mapping, e.g. set: {workload.steps: 500}"
            )
        fixed = [f"{key}={flow_yaml(value)}" for key, value in fixed_data.items()]
        options = {k: data.get(k) for k in ("metric", "processes", "scheduler")}
        base_data = _read_yaml(base)
    else:
        base, base_data = path, data
        name = f"{data.get('name', path.stem) if isinstance(data, dict) else path.stem}_sweep"
    if not isinstance(base_data, dict):
        raise ScenarioError(str(base), "", "expected a scenario: a mapping with name, workload, …")
    for text in grid:
        axis = parse_grid_option(text)
        axes = [a for a in axes if a.path != axis.path] + [axis]
    if not axes:
        raise SimdistError(
            f"{source}: no grid; give --grid path=values (e.g. --grid seed=0..4) "
            "or a grid: section in a sweep file"
        )
    procs = processes if processes is not None else options.get("processes")
    if procs is not None and (not isinstance(procs, int) or procs < 1):
        raise ScenarioError(source, "processes", f"got {procs!r}; expected a whole number >= 1")
    return Sweep(
        name=name,
        base=base,
        base_data=base_data,
        axes=axes,
        fixed=(*fixed, *overrides),
        metric=metric or options.get("metric") or DEFAULT_METRIC,
        processes=procs,
        scheduler=scheduler or options.get("scheduler"),
    )


@dataclass
class PreparedPoint:
    """A point with its validated scenario, or the error that makes it invalid."""

    point: Point
    scenario: Any | None
    error: str | None
    fingerprint: str


def fingerprint(scenario: Any) -> str:
    """A hash of the fully resolved scenario: equal hashes, equal runs."""
    from simdist.scenario import dump_scenario

    return hashlib.sha256(dump_scenario(scenario).encode()).hexdigest()[:16]


def _names_grid_path(error: ScenarioError, sweep: Sweep) -> bool:
    """Whether ``error`` says that a grid path itself does not exist."""
    return error.message.startswith("unknown key") and any(
        error.field == axis.path or axis.path.startswith(f"{error.field}.") for axis in sweep.axes
    )


def prepare(sweep: Sweep) -> list[PreparedPoint]:
    """Validate every point's scenario before anything runs.

    A grid path that names no field, or a base scenario that no point can
    fix, is a :class:`ScenarioError` (the CLI exits 2).  A value that is
    wrong only in some combinations (say, a global batch not divisible by one
    of the worker counts) makes just those points invalid: they are recorded
    with the message and the others run.
    """
    from simdist.scenario import apply_overrides, scenario_from_dict

    prepared: list[PreparedPoint] = []
    first: ScenarioError | None = None
    for point in sweep.points():
        source = f"{sweep.base} [{point.name}]"
        try:
            data = apply_overrides(sweep.base_data, sweep.fixed, "--set")
            data = apply_overrides(data, point.overrides, f"{sweep.base} --grid")
            scenario = scenario_from_dict(data, source, base_dir=sweep.base.parent)
        except ScenarioError as error:
            if error.source.endswith("--grid") or _names_grid_path(error, sweep):
                raise
            first = first or error
            prepared.append(PreparedPoint(point, None, str(error), ""))
            continue
        prepared.append(PreparedPoint(point, scenario, None, fingerprint(scenario)))
    if first is not None and all(p.scenario is None for p in prepared):
        raise first
    return prepared


# ---------------------------------------------------------------- one point (a Dask task)


def devices_needed(prepared: Sequence[PreparedPoint]) -> int:
    """JAX devices a worker must create up front: the most any point runs on explicitly."""
    needed = 1
    for p in prepared:
        s = p.scenario
        if s is not None and s.numerics and getattr(s.strategy, "execution", None) == "devices":
            needed = max(needed, s.replicas)
    return needed


def run_point(scenario: Any, devices: int = 1) -> dict[str, Any]:
    """Run one point; never raises, so one bad point cannot stop the others.

    This is the Dask task.  ``devices`` is the same for every point of a
    sweep: JAX fixes its device count when a worker process first uses it,
    so the first point a worker runs must ask for as many as any point needs.
    Returns ``{"status": "ok", "summary", "metrics"}`` or ``{"status":
    "error", "error"}``.
    """
    try:
        if devices > 1 and scenario.numerics:
            from simdist.numerics.executor import ensure_devices

            ensure_devices(devices)
        from simdist.engine import run

        result = run(scenario)
    except SimdistError as exc:
        return {"status": "error", "error": str(exc)}
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "ok", "summary": result.summary, "metrics": result.metrics}


# ---------------------------------------------------------------- storage


def point_path(out_dir: Path, point: Point) -> Path:
    """Where a point's record is stored (its metrics sit beside it, ``.metrics.csv``)."""
    return Path(out_dir) / "points" / f"{point.name}.json"


def _replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    tmp.replace(path)


def store_point(out_dir: Path, prepared: PreparedPoint, outcome: dict[str, Any]) -> dict[str, Any]:
    """Write a point's record (and metrics), metrics first: the record marks it finished."""
    from simdist.report.tables import write_csv, write_json

    path = point_path(out_dir, prepared.point)
    path.parent.mkdir(parents=True, exist_ok=True)
    if outcome.get("metrics") is not None:
        metrics = outcome["metrics"]
        _replace_atomically(path.with_suffix(".metrics.csv"), lambda tmp: write_csv(metrics, tmp))
    record = {
        "point": prepared.point.name,
        "params": dict(prepared.point.params),
        "overrides": list(prepared.point.overrides),
        "fingerprint": prepared.fingerprint,
        "status": outcome["status"],
        "error": outcome.get("error"),
        "summary": outcome.get("summary"),
    }
    _replace_atomically(path, lambda tmp: write_json(record, tmp))
    return json.loads(path.read_text())


def stored_point(out_dir: Path, prepared: PreparedPoint) -> dict[str, Any] | None:
    """The stored record of a finished point made from the same scenario, else None."""
    path = point_path(out_dir, prepared.point)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if record.get("status") != "ok" or record.get("fingerprint") != prepared.fingerprint:
        return None
    return record


# ---------------------------------------------------------------- running on Dask


@contextmanager
def dask_client(scheduler: str | None = None, processes: int | None = None) -> Iterator[Any]:
    """A Dask client: on the scheduler at ``scheduler``, else on a new local cluster.

    The local cluster has ``processes`` worker processes with one thread
    each: every point is a whole run that keeps one core busy, and separate
    processes keep JAX's per-process state (devices, compiled code) apart.
    """
    import logging

    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except ValueError as exc:
            raise SimdistError(
                f"--scheduler: got {scheduler!r}, not a scheduler address ({exc}); "
                "expected e.g. tcp://scheduler-host:8786"
            ) from None
        except OSError as exc:
            raise SimdistError(
                f"--scheduler: cannot reach the Dask scheduler at {scheduler}: {exc}"
            ) from None
        with client:
            yield client
        return
    n = processes or os.cpu_count() or 1
    with (
        LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@dataclass
class SweepResult:
    """What a sweep produced: the merged table and how many points ran, were reused, failed."""

    out_dir: Path
    table: pd.DataFrame
    ran: int = 0
    reused: int = 0
    failed: int = 0
    plot: Path | None = None
    errors: dict[str, str] = field(default_factory=dict)


def run_sweep(
    sweep: Sweep,
    out_dir: str | Path | None = None,
    *,
    client: Any | None = None,
    on_point: Callable[[str, str, int, int], None] | None = None,
) -> SweepResult:
    """Run every point not already finished, store each as it arrives, merge and plot.

    ``client`` is an existing Dask client; without one, a client is opened
    as :func:`dask_client` says (only when some point needs running).
    ``on_point(point, status, done, total)`` is called once per point,
    reused and invalid ones included.
    """
    out = Path(out_dir) if out_dir is not None else Path("reports") / sweep.name
    prepared = prepare(sweep)
    total = len(prepared)
    records: dict[str, dict[str, Any]] = {}
    result = SweepResult(out_dir=out, table=pd.DataFrame())
    notify = on_point or (lambda point, status, done, total: None)

    def finish(p: PreparedPoint, record: dict[str, Any], status: str) -> None:
        records[p.point.name] = record
        if record["status"] != "ok":
            result.failed += 1
            result.errors[p.point.name] = record["error"]
        notify(p.point.name, status, len(records), total)

    todo: list[PreparedPoint] = []
    for p in prepared:
        if p.scenario is None:
            finish(p, store_point(out, p, {"status": "error", "error": p.error}), "invalid")
            continue
        record = stored_point(out, p)
        if record is not None:
            result.reused += 1
            finish(p, record, "reused")
        else:
            todo.append(p)

    if todo:
        if client is None:
            n = min(sweep.processes or os.cpu_count() or 1, len(todo))
            with dask_client(sweep.scheduler, n) as own:
                _execute(own, todo, out, devices_needed(prepared), finish)
        else:
            _execute(client, todo, out, devices_needed(prepared), finish)
        result.ran = len(todo)

    ordered = [records[p.point.name] for p in prepared]
    result.table = sweep_table(ordered, [a.path for a in sweep.axes])
    from simdist.report.tables import write_csv

    write_csv(result.table, out / "sweep.csv")
    result.plot = out / f"sweep_{_NAME_UNSAFE.sub('_', sweep.metric)}.png"
    plot_sweep(result.table, sweep.axes, sweep.metric, result.plot, sweep.name)
    return result


def _execute(
    client: Any,
    todo: Sequence[PreparedPoint],
    out: Path,
    devices: int,
    finish: Callable[[PreparedPoint, dict[str, Any], str], None],
) -> None:
    from distributed import as_completed

    run_id = uuid.uuid4().hex[:8]
    futures = {
        client.submit(run_point, p.scenario, devices, key=f"simdist-{p.point.name}-{run_id}"): p
        for p in todo
    }
    for future in as_completed(futures):
        p = futures[future]
        try:
            outcome = future.result()
        except Exception as exc:  # the worker itself died or the task could not be sent
            outcome = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        finish(p, store_point(out, p, outcome), outcome["status"])
        future.release()


# ---------------------------------------------------------------- merging and plotting


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (``staleness.mean``); lists as JSON text."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = json.dumps(value)
        else:
            flat[name] = value
    return flat


def sweep_table(records: Sequence[dict[str, Any]], paths: Sequence[str]) -> pd.DataFrame:
    """One row per point: ``point``, the grid values, ``status``, ``error``, the summary flattened.

    Summary figures whose name equals a grid path (``seed``) are not repeated.
    """
    rows = []
    for record in records:
        row: dict[str, Any] = {"point": record["point"]}
        for path in paths:
            value = record["params"].get(path)
            row[path] = json.dumps(value) if isinstance(value, list | dict) else value
        row["status"] = record["status"]
        row["error"] = record.get("error")
        for key, value in flatten(record.get("summary") or {}).items():
            if key not in row:
                row[key] = value
        rows.append(row)
    return pd.DataFrame(rows)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _series(
    table: pd.DataFrame, axes: Sequence[Axis], x_axis: Axis, metric: str
) -> dict[str, dict[int, list[float]]]:
    """Finished values of ``metric`` by line label, then by position on ``x_axis``.

    Rows are in grid order, so each row's combination of grid values is
    known exactly (no round trip through CSV types); seeds fall together.
    """
    others = [a for a in axes if a is not x_axis and a.path != "seed"]
    labels = dict(zip([a.path for a in axes], _labels(axes), strict=True))
    positions = {flow_yaml(v): i for i, v in reversed(list(enumerate(x_axis.values)))}
    values = pd.to_numeric(table[metric], errors="coerce") if metric in table else None
    series: dict[str, dict[int, list[float]]] = {}
    combos = itertools.product(*(a.values for a in axes))
    for i, combo in enumerate(combos):
        chosen = dict(zip([a.path for a in axes], combo, strict=True))
        label = ", ".join(f"{labels[a.path]}={flow_yaml(chosen[a.path])}" for a in others)
        line = series.setdefault(label, {})
        y = math.nan if values is None else float(values.iloc[i])
        if table["status"].iloc[i] == "ok" and math.isfinite(y):
            line.setdefault(positions[flow_yaml(chosen[x_axis.path])], []).append(y)
    return series


def plot_sweep(
    table: pd.DataFrame, axes: Sequence[Axis], metric: str, path: Path, title: str
) -> None:
    """``metric`` over the first grid axis that is not ``seed``: one line per combination of the
    other axes; repeated seeds are averaged, their spread drawn as a band (min to max).

    ``table`` is :func:`sweep_table` of every point, in grid order.
    """
    from matplotlib.figure import Figure

    # A bare Figure (no pyplot): no global backend switch, no figure left open.
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    x_axis = next((a for a in axes if a.path != "seed"), axes[0])
    series = _series(table, axes, x_axis, metric)
    if not any(series.values()):
        ok = table[table["status"] == "ok"]
        timing_only = not ok.empty and "numerics" in ok and not ok["numerics"].astype(bool).any()
        note = (
            "timing-only runs (numerics: false): no loss or accuracy computed;\n"
            "plot another column, e.g. --metric examples_per_s"
            if timing_only and ("accuracy" in metric or "loss" in metric)
            else f"no values of {metric!r} in the finished points"
        )
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, wrap=True)
        ax.set_axis_off()
    else:
        numeric = all(_is_number(v) for v in x_axis.values)
        for label, line in series.items():
            at = sorted(line, key=lambda i: x_axis.values[i] if numeric else i)
            xs = [x_axis.values[i] if numeric else i for i in at]
            mean = [sum(line[i]) / len(line[i]) for i in at]
            (drawn,) = ax.plot(xs, mean, "o-", ms=4, label=label or None)
            low, high = [min(line[i]) for i in at], [max(line[i]) for i in at]
            if low != high:
                ax.fill_between(xs, low, high, alpha=0.2, color=drawn.get_color())
        if not numeric:
            ax.set_xticks(range(len(x_axis.values)))
            ax.set_xticklabels([flow_yaml(v) for v in x_axis.values])
        elif min(x_axis.values) > 0 and max(x_axis.values) / min(x_axis.values) >= 16:
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(x_axis.values), [flow_yaml(v) for v in x_axis.values])
            ax.minorticks_off()
        ax.set_xlabel(x_axis.path)
        ax.set_ylabel(metric)
        seeds = next((a for a in axes if a.path == "seed"), None)
        if seeds is not None and len(seeds.values) > 1 and seeds is not x_axis:
            ax.set_title(f"{title}: {metric} (mean of {len(seeds.values)} seeds, band min–max)")
        else:
            ax.set_title(f"{title}: {metric}")
        if len(series) > 1:
            ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    # No timestamp in the PNG metadata, so identical sweeps write identical files.
    fig.savefig(path, dpi=110, metadata={"Software": None})
