"""``sweep_<metric>.png``: one summary figure over the grid, seeds averaged."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simdist.sweep.grid import Axis, axis_labels, flow_yaml


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
    labels = dict(zip([a.path for a in axes], axis_labels(axes), strict=True))
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
    from matplotlib.ticker import MaxNLocator

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
        else:
            if min(x_axis.values) > 0 and max(x_axis.values) / min(x_axis.values) >= 16:
                ax.set_xscale("log", base=2)
            grid = sorted(set(x_axis.values))
            if len(grid) <= 12:  # a tick at each grid value, never between two (2.5 workers)
                ax.set_xticks(grid, [flow_yaml(v) for v in grid])
            elif all(float(v).is_integer() for v in grid):
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.minorticks_off()
        if all(
            float(y).is_integer() for line in series.values() for ys in line.values() for y in ys
        ):
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: whole ticks
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
