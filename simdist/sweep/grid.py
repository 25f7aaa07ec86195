"""The grid of a sweep: sweep files, ``--grid`` axes, points and their names, validation.

A sweep is a base scenario and a grid, ``{field path: [values]}``; every
combination of values is a *point*, applied to the base scenario exactly as
``simdist run --set path=value`` would.  :func:`prepare` validates every
point's scenario before anything runs and fingerprints the resolved scenario,
which is what the store (:mod:`simdist.sweep.store`) keys a finished point on.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simdist.errors import ScenarioError, SimdistError
from simdist.scenario.fields import MAX_RUNS
from simdist.scenario.load import is_sweep_file
from simdist.scenario.strict_yaml import CoreLoader

if TYPE_CHECKING:
    from simdist.scenario.schema import Scenario

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
            items = yaml.load(raw, Loader=CoreLoader)  # a SafeLoader: 4:1 stays text
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
            if high - low + 1 > MAX_RUNS:
                raise SimdistError(
                    f"{where}: range {item!r} has {high - low + 1:,} values, each at least a "
                    f"whole run; at most {MAX_RUNS:,}, e.g. 0..99"
                )
            values.extend(range(low, high + 1))
        elif parse and _EXPONENT.fullmatch(item):
            values.append(float(item))
        elif parse:
            try:
                values.append(yaml.load(item, Loader=CoreLoader))
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


def safe_name(text: str) -> str:
    """``text`` as a file name: characters other than letters, digits and ``_.+-`` become ``_``."""
    return _NAME_UNSAFE.sub("_", text)


def axis_labels(axes: Sequence[Axis]) -> list[str]:
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
    return safe_name(text.replace(",", "-").replace(":", "-")) or "_"


def grid_points(axes: Sequence[Axis]) -> list[Point]:
    """Every combination of the axes' values, the last axis varying fastest.

    A point's name is ``label=value`` per axis joined by commas
    (``staleness_bound=0,seed=3``); it names the point's files, so characters
    other than letters, digits and ``_.+-`` become ``_``. A grid of more than
    :data:`MAX_RUNS` points is refused before any is made.
    """
    count = math.prod(len(axis.values) for axis in axes)
    if count > MAX_RUNS:
        sizes = " × ".join(f"{len(axis.values):,} ({axis.path})" for axis in axes)
        raise SimdistError(
            f"sweep: the grid has {sizes} = {count:,} points, each a whole run; at most "
            f"{MAX_RUNS:,}: split it into several sweeps, e.g. --grid seed=0..9"
        )
    labels = axis_labels(axes)
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
    """A sweep (or scenario) file as plain data, with the scenario loader's checks.

    Refused before reading unless a small regular file (so ``/dev/zero`` cannot hang a
    sweep), and parsed strictly: duplicate keys, alias bombs and deep nesting are errors.
    """
    from simdist.scenario.load import read_scenario_text
    from simdist.scenario.strict_yaml import parse_yaml

    return parse_yaml(read_scenario_text(path), str(path))


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
    scenario: Scenario | None
    error: str | None
    fingerprint: str


def fingerprint(scenario: Scenario) -> str:
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
