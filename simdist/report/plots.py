"""PNG plots of a run, readable at a glance: titles, axis units, legends.

Every figure is drawn from the run's tidy tables only (metrics, events, the
extra tables), so the plots of a loaded report equal those of the live run.
PNGs carry no timestamp or software version, so identical runs write
identical files.  Time axes pick s / ms / µs (or min / h) from the run's
length, because simulated runs span microseconds to hours.  The timeline and the
per-device time split are drawn in :mod:`simdist.report.timeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, StrMethodFormatter

from simdist.report.figures import no_data, save_figure, time_unit
from simdist.report.memory import device_capacities, plot_memory
from simdist.report.table_figures import figure_jobs
from simdist.report.timeline import plot_time_split, plot_timeline

if TYPE_CHECKING:
    from simdist.runtime.engine import Result


def _accuracy_floor(values: pd.Series) -> float:
    """A lower y limit for accuracy: a little below the minimum, on a 0.1 grid, so curves differ."""
    return max(0.0, np.floor((float(values.min()) - 0.02) * 10) / 10) if len(values) else 0.0


def _metric(metrics: pd.DataFrame, name: str) -> pd.DataFrame:
    return metrics[metrics["metric"] == name]


def _smooth(values: pd.Series) -> tuple[pd.Series, int]:
    """A trailing moving average over ~1/50 of the points, and its window."""
    window = max(1, len(values) // 50)
    return values.rolling(window, min_periods=1).mean(), window


def _plot_loss_accuracy(metrics: pd.DataFrame, title: str, path: Path, x: str) -> None:
    """Loss (left axis) and test accuracy (right axis) against ``x``: ``time_s`` or ``step``."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    if x == "time_s":
        factor, unit = time_unit(float(metrics["time_s"].max()) if len(metrics) else 0.0)
        xlabel, against = f"simulated time ({unit})", "simulated time"
    else:
        factor, xlabel, against = 1.0, "step (applied updates)", "step"
    loss = _metric(metrics, "train_loss")
    if loss.empty:
        no_data(ax, "timing-only run (numerics: false): no loss or accuracy computed")
    else:
        smooth, window = _smooth(loss["value"])
        if window > 1:
            ax.plot(
                loss[x] * factor,
                loss["value"],
                color="tab:blue",
                lw=0.6,
                alpha=0.3,
                label="train loss (each step)",
            )
        label = f"train loss (mean of {window} steps)" if window > 1 else "train loss"
        ax.plot(loss[x] * factor, smooth, color="tab:blue", lw=1.3, label=label)
    test = _metric(metrics, "test_loss")
    if not test.empty:
        ax.plot(test[x] * factor, test["value"], "o-", color="tab:orange", ms=3, label="test loss")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title}: loss and accuracy vs {against}")
    handles, labels = ax.get_legend_handles_labels()
    acc = _metric(metrics, "test_accuracy")
    if not acc.empty:
        ax2 = ax.twinx()
        ax2.plot(
            acc[x] * factor,
            acc["value"],
            "s--",
            color="tab:green",
            ms=3,
            label="test accuracy (right axis)",
        )
        ax2.set_ylabel("test accuracy (fraction correct)")
        ax2.set_ylim(0, 1)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        ax.legend(handles, labels, loc="center right")
    save_figure(fig, path)


def plot_loss_vs_time(metrics: pd.DataFrame, title: str, path: Path) -> None:
    """Training loss, test loss and test accuracy against simulated time."""
    _plot_loss_accuracy(metrics, title, path, "time_s")


def plot_loss_vs_step(metrics: pd.DataFrame, title: str, path: Path) -> None:
    """Training loss, test loss and test accuracy against step (applied updates).

    Beside ``loss_vs_time.png`` it separates "learns slowly per step" (e.g.
    stale gradients) from "takes long per step" (e.g. communication).
    """
    _plot_loss_accuracy(metrics, title, path, "step")


def step_completions(metrics: pd.DataFrame) -> pd.DataFrame:
    """``time_s, step`` each time a step (an applied update) completed, in order.

    Read from the ``examples_per_s`` rows, which every strategy records once
    per completed step (``train_loss`` rows in their absence).
    """
    rows = _metric(metrics, "examples_per_s")
    if rows.empty:
        rows = _metric(metrics, "train_loss")
    return rows[["time_s", "step"]].drop_duplicates("step", keep="first").reset_index(drop=True)


def plot_throughput(
    metrics: pd.DataFrame, summary: Mapping[str, Any], title: str, path: Path
) -> None:
    """Training throughput (examples/s of simulated time) over the run.

    A moving rate over the last ~2 % of steps shows slow phases; the running
    average (examples so far / time so far) ends at the summary's figure.
    """
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    done = step_completions(metrics)
    steps = int(summary.get("steps") or 0)
    per_step = summary["examples"] / steps if steps else 0.0
    end_s = float(summary.get("simulated_time_s") or 0.0)
    factor, unit = time_unit(end_s)
    if len(done) < 2 or per_step <= 0:
        no_data(ax, "fewer than two steps: no throughput over time")
    else:
        t = done["time_s"].to_numpy(float)
        n = done["step"].to_numpy(float)
        k = max(1, len(done) // 50)
        dt = t[k:] - t[:-k]
        ok = dt > 0
        rate = (n[k:] - n[:-k])[ok] * per_step / dt[ok]
        ax.plot(
            t[k:][ok] * factor,
            rate,
            color="tab:blue",
            lw=1.6,
            zorder=3,
            label=f"moving rate (last {k} step{'s' if k > 1 else ''})",
        )
        ok = t > 0
        ax.plot(
            t[ok] * factor,
            n[ok] * per_step / t[ok],
            color="tab:orange",
            lw=1.2,
            ls="--",
            label="running average (examples so far / time so far)",
        )
        mean = summary.get("examples_per_s")
        if mean:
            ax.axhline(mean, color="0.3", ls=":", lw=1, label=f"whole run: {mean:,.0f}/s")
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.legend(loc="lower right")
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("training examples / s (simulated)")
    ax.set_title(f"{title}: throughput over time")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_staleness_hist(updates: pd.DataFrame, title: str, path: Path) -> Figure:
    """Histogram of the staleness of applied gradients (parameter_server's ``updates.csv``).

    Staleness = PS version at apply − version the gradient was computed from. When the run
    records it, the SSP measure (iterations the worker was ahead of the slowest) is a second
    panel with its own axis: it counts iterations, not parameter versions, and its values
    (up to 48 for a straggler's peers) would stretch the staleness axis. Returns the figure.
    """
    ssp = updates["ssp_staleness"].to_numpy(int) if "ssp_staleness" in updates else None
    fig = Figure(figsize=(11, 4) if ssp is not None else (7, 4), layout="constrained")
    axes = fig.subplots(1, 2 if ssp is not None else 1, squeeze=False)[0]
    values = updates["staleness"].to_numpy(float) if "staleness" in updates else np.array([])
    _count_bars(
        axes[0],
        values,
        "tab:blue",
        f"applied gradient shards (n = {values.size:,})",
        "staleness (parameter versions behind at apply)",
        "no gradient applied",
    )
    axes[0].set_title("staleness: versions applied in between")
    if ssp is not None:
        _count_bars(
            axes[1],
            ssp.astype(float),
            "tab:orange",
            "the same shards",
            "iterations ahead of the slowest worker (SSP's measure)",
            "no gradient applied",
        )
        axes[1].set_title("iteration gap: what a staleness bound limits")
    fig.suptitle(f"{title}: staleness of applied gradients")
    save_figure(fig, path)
    return fig


def _count_bars(
    ax: Any, values: np.ndarray, color: str, label: str, xlabel: str, empty: str
) -> None:
    """Bars of how many ``values`` take each whole number, and their mean."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("applied gradient shards (count)")
    if values.size == 0:
        no_data(ax, empty)
        return
    counts = np.bincount(values.astype(int).clip(0))
    x = np.arange(len(counts))
    ax.bar(x, counts, 0.8, color=color, label=label)
    ax.axvline(values.mean(), color="tab:red", ls="--", lw=1.2, label=f"mean {values.mean():.2f}")
    if len(x) <= 16:  # each value named; more would overlap in a panel 5 inches wide
        ax.set_xticks(x)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, counts.max() * 1.3)
    ax.legend(loc="upper right", fontsize=8)


def plot_stage_staleness(updates: pd.DataFrame, title: str, path: Path) -> None:
    """pipedream's weight staleness per stage (the ``stage_updates`` table).

    Left: each stage's mean and largest staleness over the run (updates of that stage
    between the weights a micro-batch's forward used and its update). Right: the staleness
    of each stage's first updates, as the pipeline fills: it climbs to its steady value
    (``S − s − 1`` on stage ``s``) and stays there, since pipedream never flushes.
    """
    fig = Figure(figsize=(10, 4), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(1, 1.4))
    if updates.empty or "staleness" not in updates:
        no_data(left, "no stage update recorded")
        save_figure(fig, path)
        return
    stages = sorted(int(s) for s in updates["stage"].unique())
    grouped = updates.groupby("stage")["staleness"]
    means = grouped.mean().reindex(stages).to_numpy(float)
    maxes = grouped.max().reindex(stages).to_numpy(float)
    counts = grouped.size().reindex(stages).to_numpy(int)
    x = np.arange(len(stages))
    left.bar(x, means, 0.6, color="tab:blue", label="mean over the run")
    left.plot(x, maxes, "v", color="tab:red", ms=8, ls="none", label="largest")
    for xi, mean, high, n in zip(x, means, maxes, counts, strict=True):
        left.text(
            xi, high + 0.08, f"{mean:.2f}\n({n:,} updates)", ha="center", va="bottom", fontsize=8
        )
    left.set_xticks(x, [f"stage {s}" for s in stages])
    left.set_ylim(0, max(1.0, float(maxes.max())) * 1.35)
    left.set_ylabel("staleness (versions of the stage's weights)")
    left.set_title("per stage")
    left.legend(loc="upper right", fontsize=8)
    first = 0
    for s in stages:
        rows = updates[updates["stage"] == s]
        first = max(first, min(len(rows), 4 * len(stages)))
    markers = "osD^v<>p*h"
    for i, s in enumerate(stages):
        values = updates[updates["stage"] == s]["staleness"].to_numpy(float)[:first]
        right.plot(
            np.arange(len(values)),
            values,
            drawstyle="steps-post",
            marker=markers[i % len(markers)],
            ms=4,
            lw=1.2,
            alpha=0.85,
            zorder=3 + len(stages) - i,
            label=f"stage {s}",
        )
    right.set_xlabel("the stage's update (0 = first)")
    right.set_ylabel("staleness")
    right.set_ylim(-0.2, max(1.0, float(maxes.max())) + 0.5)
    right.set_title(f"the first {first} updates of each stage")
    right.legend(loc="lower right", fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle(f"{title}: weight staleness per pipeline stage")
    save_figure(fig, path)


def plot_accuracy_overlay(
    runs: Mapping[str, pd.DataFrame], target: float | None, title: str, path: Path
) -> None:
    """Test accuracy against simulated time for several runs on one axis (``compare``)."""
    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    end = max((float(m["time_s"].max()) for m in runs.values() if len(m)), default=0.0)
    factor, unit = time_unit(end)
    drawn = []
    for label, metrics in runs.items():
        acc = _metric(metrics, "test_accuracy")
        if acc.empty:
            continue
        ax.plot(acc["time_s"] * factor, acc["value"], "o-", ms=3, lw=1.3, label=label)
        drawn.append(acc["value"])
    if target is not None:
        ax.axhline(target, color="0.4", ls=":", lw=1, label=f"target {target:g}")
    if not drawn:
        no_data(ax, "no run recorded test accuracy (timing-only runs)")
    floor = _accuracy_floor(pd.concat(drawn)) if drawn else 0.0
    if target is not None:
        floor = min(floor, _accuracy_floor(pd.Series([target])))
    ax.set_ylim(floor, 1.0)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("test accuracy (fraction correct)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    save_figure(fig, path)


def plot_jobs(
    result: Result, out_dir: Path, timeline_steps: int = 3
) -> list[tuple[str, Callable[[], None]]]:
    """Every plot of a run except ``loss_vs_time.png``, undrawn: ``(file name, draw)`` pairs.

    ``loss_vs_step.png`` only when the run computed its numerics (a timing-only run has
    no loss); ``staleness_hist.png`` is drawn only when the run has an ``updates``
    table with staleness (parameter_server); ``memory.png`` whenever the summary has
    ``memory_per_device`` (every strategy: :mod:`simdist.report.memory`), and
    ``pipeline_staleness.png`` when the run has a ``stage_updates`` table (pipedream).
    Separate jobs, so that :mod:`simdist.report.painter` can share them between two processes.
    """
    out = Path(out_dir)
    name = result.scenario.name
    sim_time_s = float(result.summary["simulated_time_s"])
    metrics, summary, events = result.metrics, result.summary, result.events
    jobs: list[tuple[str, Callable[[], None]]] = []
    if summary.get("numerics", True):  # a timing-only run has no loss to draw
        jobs.append(
            ("loss_vs_step.png", lambda: plot_loss_vs_step(metrics, name, out / "loss_vs_step.png"))
        )
    jobs.append(
        ("throughput.png", lambda: plot_throughput(metrics, summary, name, out / "throughput.png"))
    )
    updates = result.tables.get("updates")
    if updates is not None and "staleness" in updates:
        jobs.append(
            (
                "staleness_hist.png",
                lambda: plot_staleness_hist(updates, name, out / "staleness_hist.png"),
            )
        )
    stages = result.tables.get("stage_updates")
    if stages is not None and "staleness" in stages:
        jobs.append(
            (
                "pipeline_staleness.png",
                lambda: plot_stage_staleness(stages, name, out / "pipeline_staleness.png"),
            )
        )
    scenario = result.scenario
    if summary.get("memory_per_device"):
        capacities = device_capacities(scenario)
        jobs.append(
            ("memory.png", lambda: plot_memory(summary, name, out / "memory.png", capacities))
        )
    jobs += figure_jobs(summary, result.tables, name, out)  # a strategy's own tables
    jobs.append(
        (
            "timeline.png",
            lambda: plot_timeline(events, scenario, name, out / "timeline.png", timeline_steps),
        )
    )
    jobs.append(
        (
            "time_split.png",
            lambda: plot_time_split(events, sim_time_s, name, out / "time_split.png"),
        )
    )
    return jobs


def write_plots(result: Result, out_dir: Path, timeline_steps: int = 3) -> list[str]:
    """Draw every plot of :func:`plot_jobs`; returns the file names written, in order."""
    jobs = plot_jobs(result, out_dir, timeline_steps)
    for _, draw in jobs:
        draw()
    return [name for name, _ in jobs]


# Seeds' mean-and-band plots live in simdist.report.bands; the name is here too.
from simdist.report.bands import accuracy_bands  # noqa: E402, F401
