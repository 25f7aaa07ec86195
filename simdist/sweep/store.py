"""The resume store of a sweep: one record per point, kept across runs.

Everything a point produced is stored as soon as it arrives, in
``<out>/points/<point>.json`` (status, error, summary, the fingerprint of its
resolved scenario) and ``<out>/points/<point>.metrics.csv``.  A re-run reuses
every point whose stored record is ``ok`` and has the same fingerprint, so an
interrupted sweep resumes where it stopped, an edited base scenario is
recomputed and failed points are retried.  :func:`sweep_table` merges the
records into the one-row-per-point table of ``sweep.csv``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simdist.sweep.grid import Point, PreparedPoint


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


# ---------------------------------------------------------------- merging


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
