"""Accuracy against simulated time across seeds: a mean line and a min–max band per scenario.

Single-seed curves of different strategies overlap and cross by chance; the
band shows how far chance moves a curve, so a gap wider than the bands is a real one.
The numbers come from :func:`simdist.bands.curve_band`; this module only draws them.

```python
results = {"async": simdist.api.run_seeds("scenarios/ps_4w2s.yaml", 3),
           "sync": simdist.api.run_seeds("scenarios/ps_4w2s.yaml", 3, ["strategy.mode=sync"])}
fig, ax = plt.subplots()
simdist.report.bands.accuracy_bands(ax, results, target=0.95)
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simdist.bands import curve_band


def metric_curves(results: Sequence[Any], metric: str = "test_accuracy") -> list[tuple[Any, Any]]:
    """``(time_s, value)`` arrays of ``metric`` for each Result (one per seed)."""
    curves = []
    for result in results:
        rows = result.metrics[result.metrics["metric"] == metric]
        curves.append((rows["time_s"].to_numpy(float), rows["value"].to_numpy(float)))
    return curves


def accuracy_bands(
    ax: Axes,
    results_by_label: Mapping[str, Sequence[Any]],
    *,
    target: float | None = None,
    metric: str = "test_accuracy",
    time_scale: tuple[float, str] | None = None,
) -> dict[str, pd.DataFrame]:
    """Draw, per label, the mean of ``metric`` across its seeds and the min–max band.

    ``results_by_label`` maps a label (a strategy, a scenario) to its Results, one per
    seed (:func:`simdist.api.run_seeds`). Each seed's curve is read at the union of all
    evaluation times (:func:`simdist.bands.curve_band`: linear between evaluations, held
    after the run ends); the line and band start where every seed has evaluated once.
    ``target`` draws a dotted horizontal line. ``time_scale`` is ``(factor, unit)`` for
    the x axis (default: s, ms or µs from the longest run). Returns each label's band
    table (``time_s``, ``mean``, ``min``, ``max``, ``n``) for further use.
    """
    from simdist.report.figures import time_unit

    curves = {label: metric_curves(results, metric) for label, results in results_by_label.items()}
    end = max((float(t.max()) for cs in curves.values() for t, _ in cs if len(t)), default=0.0)
    factor, unit = time_scale if time_scale is not None else time_unit(end)
    bands = {}
    for label, label_curves in curves.items():
        band = curve_band(label_curves)
        bands[label] = band
        full = band[band["n"] == len(label_curves)]
        if full.empty:
            continue
        x = full["time_s"] * factor
        n = len(label_curves)
        (line,) = ax.plot(x, full["mean"], lw=1.6, label=f"{label} (mean of {n} seeds)")
        ax.fill_between(x, full["min"], full["max"], color=line.get_color(), alpha=0.2, lw=0)
    if target is not None:
        ax.axhline(target, color="0.4", ls=":", lw=1, label=f"target {target:g}")
    ax.set_xlabel(f"simulated time ({unit})")
    accuracy = metric == "test_accuracy"
    ax.set_ylabel("test accuracy (fraction correct)" if accuracy else metric.replace("_", " "))
    ax.grid(alpha=0.3)
    if any(not b.empty for b in bands.values()):
        ax.legend(loc="lower right", fontsize=8)
    else:
        message = f"no {metric} recorded (timing-only runs)"
        ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    return bands


def plot_accuracy_bands(
    results_by_label: Mapping[str, Sequence[Any]], target: float | None, title: str, path: Path
) -> None:
    """:func:`accuracy_bands` as a PNG (``simdist compare --seeds``'s ``accuracy_vs_time.png``)."""
    from simdist.report.figures import save_figure

    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    bands = accuracy_bands(ax, results_by_label, target=target)
    lows = [b["min"].min() for b in bands.values() if b["min"].notna().any()]
    if lows:
        floor = min([*lows, target if target is not None else 1.0])
        ax.set_ylim(max(0.0, (int((floor - 0.02) * 10)) / 10), 1.0)
    ax.set_title(f"{title} (line: mean over seeds; band: min–max)")
    save_figure(fig, Path(path))
