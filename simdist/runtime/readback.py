"""A report folder read back into the :class:`~simdist.runtime.engine.Result` that wrote it.

:func:`load_report` is the inverse of :func:`simdist.report.write_report`: its DataFrames
equal the CSV files of the folder, dtypes included, so ``run(...).events`` and
``load_report(folder).events`` compare equal with ``pandas.testing.assert_frame_equal``.
The one subtlety is that a CSV cell cannot tell an empty string from a missing number;
:func:`read_table` reads empty cells as NaN in numeric columns and as ``""`` in text
columns, which is what the recorder writes, and :func:`conform` gives a run's own frames
the same dtypes.

pandas, NumPy and the engine are imported where they are used, so that importing this
module (``simdist validate`` imports the API) stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from simdist.errors import SimdistError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from simdist.runtime.engine import Result

__all__ = ["conform", "load_report", "read_params", "read_table"]

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
    from simdist.runtime.engine import Result
    from simdist.runtime.recorder import EVENT_DTYPES, METRIC_DTYPES
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
