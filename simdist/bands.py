"""Results across seeds: means, min–max bands and t-based 95% intervals.

One seed cannot show a trade-off: with stragglers, time to 95% accuracy moved by a factor
of two between seeds 0, 1 and 2 of the same scenario. simdist therefore runs a
scenario once per seed and reports, per scenario, the mean and the spread of each figure:

* ``min`` and ``max`` over the seeds (the band the plots shade), and
* ``ci95``, the half-width of the two-sided 95% confidence interval of the mean from
  Student's t distribution: ``t(0.975, n - 1) · s / √n`` with ``s`` the sample standard
  deviation (``ddof=1``) of the ``n`` seeds that have a value. It assumes the seeds'
  values are independent draws from a normal distribution; with 3 seeds
  ``t = 4.303``, so the interval is wide — that is what 3 seeds can say.

A seed that never reached the target accuracy has no time to target (NaN): the time's
mean and spread are over the seeds that reached it, and ``time_to_target_s_n`` says how
many did ("reached by k of N", :func:`reached_text`).

Pure pandas and NumPy (no JAX, no SimPy, no SciPy): the per-seed table comes from
:func:`simdist.api.run_seeds` and :func:`simdist.report.compare.seed_table`, or is
made by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "aggregate",
    "band_separations",
    "curve_band",
    "reached_text",
    "t_critical",
    "value_columns",
]

#: Columns never aggregated: the seed itself labels a row.
_NOT_VALUES = ("seed",)


def _t_central_mass(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` (whole) degrees of freedom.

    Abramowitz & Stegun, *Handbook of Mathematical Functions* (1964), 26.7.3 (odd df)
    and 26.7.4 (even df): finite sums in θ = arctan(t / √df), exact for whole df.
    """
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:  # A = sin θ · (1 + ½cos²θ + (1·3)/(2·4)cos⁴θ + … up to cos^(df−2)θ)
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    # A = (2/π)(θ + sin θ cos θ · (1 + (2/3)cos²θ + … up to cos^(df−3)θ))
    term, total = 1.0, 1.0
    for k in range(1, (df - 1) // 2):
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2.0 / math.pi * (theta + s * math.cos(theta) * total)


def t_critical(df: int, confidence: float = 0.95) -> float:
    """The two-sided critical value of Student's t: P(|T| < t) = ``confidence``.

    ``t_critical(2) = 4.303``, ``t_critical(9) = 2.262``, → 1.960 as df grows. Solved by
    bisection on the exact distribution function (A&S 26.7.3–4) to about 1e-12.
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"df: got {df!r}; expected a whole number >= 1")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: got {confidence!r}; expected a fraction in (0, 1)")
    df = int(df)
    low, high = 0.0, 1.0
    while _t_central_mass(high, df) < confidence:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _t_central_mass(mid, df) < confidence:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    return 0.5 * (low + high)


def reached_text(reached: int, seeds: int) -> str:
    """``"reached by 2 of 3"``: how many seeds got to the target accuracy."""
    return f"reached by {reached} of {seeds}"


def value_columns(per_seed: pd.DataFrame, by: Sequence[str]) -> list[str]:
    """The columns :func:`aggregate` summarises: numeric and boolean, except ``by`` and ``seed``."""
    return [
        c
        for c in per_seed.columns
        if c not in by
        and c not in _NOT_VALUES
        and (pd.api.types.is_numeric_dtype(per_seed[c]) or pd.api.types.is_bool_dtype(per_seed[c]))
    ]


def _ci95(values: np.ndarray) -> float:
    n = len(values)
    if n < 2:
        return math.nan
    return t_critical(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)


def aggregate(per_seed: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """One row per group of ``by`` (a scenario, a grid point): the figures across its seeds.

    ``per_seed`` has one row per run: the ``by`` columns, optionally ``seed``, and the
    figures (e.g. ``time_to_target_s``, NaN for a seed that never reached the target;
    ``final_test_accuracy``; ``examples_per_s``). Every other numeric column ``X`` becomes

    * ``X_mean``, ``X_min``, ``X_max``: over the seeds with a finite value;
    * ``X_ci95``: half-width of the t-based 95% interval of the mean (NaN with < 2 values);
    * ``X_n``: how many seeds have a finite value (for time to target: how many reached it).

    A boolean column ``B`` (``diverged``, ``collapsed``) becomes ``B_count``, the seeds for
    which it is true. ``seeds`` is the number of rows in the group. Groups keep the order
    of their first row; text columns outside ``by`` (run names, sources) are dropped.
    """
    by = list(by)
    missing = [c for c in by if c not in per_seed.columns]
    if missing:
        raise KeyError(f"aggregate: by columns {missing} are not in the table")
    values = value_columns(per_seed, by)
    rows = []
    groups = per_seed.groupby(by, sort=False, dropna=False) if by else [((), per_seed)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, object] = dict(zip(by, key, strict=True))
        row["seeds"] = len(group)
        for column in values:
            if pd.api.types.is_bool_dtype(group[column]):
                row[f"{column}_count"] = int(group[column].sum())
                continue
            numbers = pd.to_numeric(group[column], errors="coerce")
            raw = numbers.to_numpy(dtype=float, na_value=np.nan)
            finite = raw[np.isfinite(raw)]
            empty = len(finite) == 0
            row[f"{column}_mean"] = math.nan if empty else float(finite.mean())
            row[f"{column}_min"] = math.nan if empty else float(finite.min())
            row[f"{column}_max"] = math.nan if empty else float(finite.max())
            row[f"{column}_ci95"] = _ci95(finite)
            row[f"{column}_n"] = len(finite)
        rows.append(row)
    return pd.DataFrame(rows)


def curve_band(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], grid: np.ndarray | None = None
) -> pd.DataFrame:
    """Mean, min and max across seeds of curves sampled at different times.

    ``curves`` holds one ``(time_s, value)`` pair of arrays per seed (e.g. test accuracy
    at each evaluation, whose times differ between seeds when stragglers do). Each curve
    is read at every time of ``grid`` (default: the union of all the curves' times):
    linearly between its samples, NaN before its first sample, and held at its last value
    after its end (a run that finished keeps its final model). Returns columns
    ``time_s``, ``mean``, ``min``, ``max`` and ``n`` (curves with a value at that time).
    """
    pairs = [(np.asarray(t, float), np.asarray(v, float)) for t, v in curves]
    pairs = [(t[np.argsort(t, kind="stable")], v[np.argsort(t, kind="stable")]) for t, v in pairs]
    if grid is None:
        times = [t for t, _ in pairs if len(t)]
        grid = np.unique(np.concatenate(times)) if times else np.array([], float)
    grid = np.asarray(grid, float)
    sampled = np.full((len(pairs), len(grid)), np.nan)
    for i, (t, v) in enumerate(pairs):
        if len(t) == 0:
            continue
        inside = grid >= t[0]
        sampled[i, inside] = np.interp(grid[inside], t, v)  # np.interp holds v[-1] after t[-1]
    n = np.isfinite(sampled).sum(axis=0)
    mean, low, high = (np.full(len(grid), np.nan) for _ in range(3))
    some = n > 0  # before the first sample of every curve there is nothing to summarise
    if some.any():
        mean[some] = np.nanmean(sampled[:, some], axis=0)
        low[some] = np.nanmin(sampled[:, some], axis=0)
        high[some] = np.nanmax(sampled[:, some], axis=0)
    return pd.DataFrame({"time_s": grid, "mean": mean, "min": low, "max": high, "n": n})


def band_separations(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (workers, severity) cell: the fastest strategy, and whose bands overlap it.

    ``per_seed`` has one row per run: ``strategy``, ``workers``, ``severity``,
    ``time_to_target_s`` (NaN: not reached) and optionally ``simulated_time_s`` (the
    run's end). A strategy's band is the min–max over its seeds of time to target; a seed
    that never reached the target lies somewhere in (its run's end, ∞), or (0, ∞) when
    the end is not known, so the band widens to include that. The fastest strategy of a
    cell is the lowest mean over seeds among the strategies that every seed took to the
    target (none if no strategy did). Two bands overlap when each starts no later than
    the other ends: then some seed of the slower strategy was as fast as some seed of
    the faster, and that many seeds cannot tell them apart.

    Returns one row per (cell, strategy), cells and strategies in order of appearance:
    ``workers``, ``severity``, ``strategy``, ``seeds``, ``reached``, ``mean_s`` (over
    the seeds that reached), ``low_s``, ``high_s``, ``fastest`` (the cell's, or None) and
    ``overlaps`` (True/False against the fastest's band; None for the fastest itself and
    in a cell without one).
    """
    rows = []
    for (workers, severity), cell in per_seed.groupby(["workers", "severity"], sort=False):
        bands = [_band(strategy, runs) for strategy, runs in cell.groupby("strategy", sort=False)]
        complete = [b for b in bands if b["reached"] == b["seeds"]]
        best = min(complete, key=lambda b: b["mean_s"]) if complete else None
        for band in bands:
            overlaps = None
            if best is not None and band is not best:
                overlaps = bool(band["low_s"] <= best["high_s"] and best["low_s"] <= band["high_s"])
            fastest = None if best is None else best["strategy"]
            rows.append({"workers": workers, "severity": severity, **band,
                         "fastest": fastest, "overlaps": overlaps})  # fmt: skip
    return pd.DataFrame(rows)


def _band(strategy: str, runs: pd.DataFrame) -> dict[str, Any]:
    """One strategy's seeds in one cell: counts, mean over those that reached, min–max band
    with each unreached seed as (its run's end, ∞)."""
    times = pd.to_numeric(runs["time_to_target_s"], errors="coerce").to_numpy(float)
    ends = (
        pd.to_numeric(runs["simulated_time_s"], errors="coerce").to_numpy(float)
        if "simulated_time_s" in runs
        else np.full(len(runs), np.nan)
    )
    reached = np.isfinite(times)
    low = np.where(reached, times, np.where(np.isfinite(ends), ends, 0.0))
    high = np.where(reached, times, math.inf)
    return {
        "strategy": strategy,
        "seeds": len(runs),
        "reached": int(reached.sum()),
        "mean_s": float(times[reached].mean()) if reached.any() else math.nan,
        "low_s": float(low.min()),
        "high_s": float(high.max()),
    }
