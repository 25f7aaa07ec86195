"""Sweeps: a grid over scenario fields × seeds, each point one independent run on Dask.

A sweep is a base scenario and a grid, ``{field path: [values]}``; every
combination of values is a *point*, applied to the base scenario exactly as
``simdist run --set path=value`` would.  Points are independent runs, so they
are executed as Dask tasks (docs/seeds_and_sweeps.md): on a ``LocalCluster`` of worker
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

Modules: :mod:`~simdist.sweep.grid` (sweep files, the grid, point names,
validation), :mod:`~simdist.sweep.store` (the resume store and the merged
table), :mod:`~simdist.sweep.runner` (the Dask runner),
:mod:`~simdist.sweep.plot` (the summary figure).
"""

from __future__ import annotations

from simdist.sweep.grid import (
    DEFAULT_METRIC,
    Axis,
    Point,
    PreparedPoint,
    Sweep,
    expand_values,
    fingerprint,
    flow_yaml,
    grid_points,
    is_sweep_file,
    load_sweep,
    parse_grid_option,
    prepare,
)
from simdist.sweep.plot import plot_sweep
from simdist.sweep.runner import (
    SweepResult,
    dask_client,
    devices_needed,
    run_point,
    run_sweep,
)
from simdist.sweep.store import flatten, point_path, store_point, stored_point, sweep_table

__all__ = [
    "DEFAULT_METRIC",
    "Axis",
    "Point",
    "PreparedPoint",
    "Sweep",
    "SweepResult",
    "dask_client",
    "devices_needed",
    "expand_values",
    "fingerprint",
    "flatten",
    "flow_yaml",
    "grid_points",
    "is_sweep_file",
    "load_sweep",
    "parse_grid_option",
    "plot_sweep",
    "point_path",
    "prepare",
    "run_point",
    "run_sweep",
    "store_point",
    "stored_point",
    "sweep_table",
]
