"""The trade-off figure and tradeoff.md: time to target = updates ÷ update throughput.

Four rows (time to target, update throughput, updates needed, gradients needed) against
two axes, both drawn from the full grid of cells: worker count (solid, with its min–max
band over seeds: the largest straggler severity; thinner dashed or dotted lines: the
other severities) and straggler severity (solid: the largest worker count; thinner: the
other counts). Each
line is a strategy's mean over seeds; a point that not every seed reached is labelled
``k/N``. tradeoff.md lists every cell and, per cell, the fastest strategy and whose
min–max band overlaps it (:func:`separation_lines`). The numbers come from
:func:`simdist.tradeoff.tradeoff_summary` and :func:`simdist.bands.band_separations`;
this module only draws and writes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from simdist.report.tables import AtomicFolder, write_csv

#: (column, row label, scale) of the figure's rows; time = updates ÷ (updates / s).
ROWS = (
    ("time_to_target_s", "time to target (ms)", 1e3),
    ("updates_per_s", "update throughput (updates / s)", 1.0),
    ("updates_to_target", "updates needed", 1.0),
    ("gradients_to_target", "gradients needed", 1.0),
)
FIGSIZE = (10.5, 11.5)
#: Line styles of a panel's slices: the first (solid, banded) is the largest value of the
#: other axis; the rest follow in decreasing order.
STYLES = ("-", "--", ":", "-.")
STYLE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


def _slices(summary: pd.DataFrame, other: str) -> list[tuple[Any, str]]:
    """(value of the other axis, line style) per slice of a panel, the largest first."""
    values = sorted(set(summary[other]), reverse=True)
    return [(value, STYLES[i % len(STYLES)]) for i, value in enumerate(values)]


def _panels(summary: pd.DataFrame) -> list[tuple[str, str, str, Callable[[Any], str]]]:
    """(x column, x label, slicing column, slice label) of the figure's two columns."""
    return [
        ("workers", "workers", "severity", lambda v: f"×{v:g}"),
        ("severity", "straggler slowdown (×, per straggling step)", "workers",
         lambda v: f"{v} workers"),
    ]  # fmt: skip


def draw_tradeoff(
    fig: Figure, summary: pd.DataFrame, target: float, strategies: Sequence[str]
) -> None:
    """Draw the 4 × 2 grid of panels on ``fig`` from a :func:`tradeoff_summary` table."""
    panels = _panels(summary)
    axes = fig.subplots(len(ROWS), len(panels), sharex="col", squeeze=False)
    colors = {s: f"C{i}" for i, s in enumerate(strategies)}
    for col, (x, xlabel, other, name) in enumerate(panels):
        slices = _slices(summary, other)
        for row, (column, ylabel, scale) in enumerate(ROWS):
            ax = axes[row][col]
            for rank, (value, style) in enumerate(slices):
                table = summary[summary[other] == value]
                for strategy in strategies:
                    part = table[table["strategy"] == strategy].sort_values(x)
                    if not part.empty:
                        _line(ax, part, x, column, scale, colors[strategy], style, rank == 0)
            plotted = summary.loc[summary["strategy"].isin(strategies), f"{column}_mean"]
            _log_axis(ax, list(plotted * scale))
            if col == 0:
                ax.set_ylabel(ylabel, fontsize=9)
            if row == 0:
                ax.set_title(_title(x, slices, name), fontsize=9)
            if row == len(ROWS) - 1:
                _x_axis(ax, x, xlabel, sorted(set(summary[x])))
    handles = [Line2D([], [], color=colors[s], marker="o", ms=3.5, label=s) for s in strategies]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(strategies), frameon=False)
    fig.suptitle(
        f"time to {target:g} test accuracy = updates needed ÷ update throughput, every cell "
        "of the grid\n(line: mean over seeds; crossing interpolated between evaluations; "
        "k/N: seeds that reached the target)",
        fontsize=10,
    )


def _title(x: str, slices: list[tuple[Any, str]], name: Callable[[Any], str]) -> str:
    """A panel column's title: its x axis and which line style is which slice."""
    rest = ", ".join(f"{STYLE_NAMES[style]} {name(value)}" for value, style in slices[1:])
    main = f"against {x}\nsolid, with min–max band over seeds: {name(slices[0][0])}"
    return f"{main}\n{rest}" if rest else main


def _x_axis(ax: Any, x: str, label: str, ticks: list[Any]) -> None:
    """Label the x axis, with a tick at every value; worker counts on a log-2 scale."""
    if x == "workers" and min(ticks) > 0:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(label)
    ax.set_xticks(ticks)
    ax.set_xticks([], minor=True)


def _line(
    ax: Any, part: pd.DataFrame, x: str, column: str, scale: float, color: str, style: str,
    main: bool,
) -> None:  # fmt: skip
    """One strategy in one slice: its mean, and for the main slice its min–max band."""
    mean = part[f"{column}_mean"] * scale
    ax.plot(part[x], mean, marker="o" if main else ".", ls=style, ms=3.5,
            lw=1.5 if main else 1.0, alpha=1.0 if main else 0.75, color=color)  # fmt: skip
    if main:
        low, high = part[f"{column}_min"] * scale, part[f"{column}_max"] * scale
        ax.fill_between(part[x], low, high, color=color, alpha=0.18, lw=0)
    if column == "time_to_target_s":
        _mark_unreached(ax, part, x, mean, color)


def _log_axis(ax: Any, values: Sequence[float]) -> None:
    """Log y axis with 1-2-5 ticks written out in full, and a light grid.

    A log axis cannot place a zero or a missing value (a target no seed reached): such
    points are left out and the panel says how many; a panel with nothing else keeps a
    linear axis and says why it is empty (matplotlib refuses a log axis without data).
    """
    drawable = sum(1 for v in values if v == v and 0 < v < math.inf)
    unplaced = len(values) - drawable
    if unplaced:
        said = (
            "nothing to draw on a log scale:\nevery value is zero or missing"
            if not drawable
            else f"{unplaced} of {len(values)} values zero or missing: not drawn"
        )
        ax.text(0.5 if not drawable else 0.02, 0.5 if not drawable else 0.03, said,
                transform=ax.transAxes, ha="center" if not drawable else "left",
                va="center" if not drawable else "bottom", fontsize=7, color="0.35")  # fmt: skip
    if not drawable:
        ax.set_yticks([])
        return
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.6g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3, which="both")


def _mark_unreached(ax: Any, part: pd.DataFrame, x: str, mean: pd.Series, color: str) -> None:
    for value, y, reached, seeds in zip(
        part[x], mean, part["time_to_target_s_n"], part["seeds"], strict=True
    ):
        if reached < seeds and y == y:
            ax.annotate(f"{reached}/{seeds}", (value, y), fontsize=7, color=color,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip


def plot_tradeoff(
    summary: pd.DataFrame, target: float, strategies: Sequence[str], path: Path
) -> None:
    """:func:`draw_tradeoff` as a PNG."""
    from simdist.report.figures import save_figure

    fig = Figure(figsize=FIGSIZE, layout="constrained")
    draw_tradeoff(fig, summary, target, strategies)
    save_figure(fig, Path(path))


def separation_lines(bands: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """:func:`band_separations` in words: per cell, a heading naming the fastest strategy
    and one line per other strategy saying whether the bands can be told apart."""
    from simdist.units import format_duration as fmt

    out = []
    for (workers, severity), cell in bands.groupby(["workers", "severity"], sort=False):
        place = f"{workers} workers, slowdown ×{severity:g}" + (
            " (no stragglers)" if severity == 1 else ""
        )
        fastest = cell["fastest"].iloc[0]
        if fastest is None or fastest != fastest:
            lines = [f"{r.strategy}: {_band_text(r, fmt)}" for r in cell.itertuples()]
            out.append((f"{place}: no strategy reached the target with every seed", lines))
            continue
        best = cell[cell["strategy"] == fastest].iloc[0]
        heading = f"{place}: fastest {fastest}, {_band_text(best, fmt)}"
        lines = []
        for r in cell[cell["strategy"] != fastest].itertuples():
            verdict = (
                f"bands overlap: cannot be told apart with {r.seeds} seeds"
                if r.overlaps
                else "slower with every seed: the bands do not overlap"
            )
            lines.append(f"{r.strategy}: {_band_text(r, fmt)}; {verdict}")
        out.append((heading, lines))
    return out


def _band_text(row: Any, fmt: Callable[[float], str]) -> str:
    """``41.2 ms (38.0–44.1 ms)``, or how many seeds reached and where the band starts."""
    if row.reached == 0:
        return f"not reached by any of {row.seeds} seeds (band from {fmt(row.low_s)} on)"
    if row.reached < row.seeds:
        return (
            f"reached by {row.reached} of {row.seeds} (mean {fmt(row.mean_s)}), "
            f"band from {fmt(row.low_s)} on"
        )
    return f"{fmt(row.mean_s)} ({fmt(row.low_s)}–{fmt(row.high_s)})"


def tradeoff_markdown(
    summary: pd.DataFrame, per_seed: pd.DataFrame, target: float, plot: str
) -> str:
    """tradeoff.md: every cell's figures (mean and min–max over seeds), which strategy is
    fastest in each cell and whose band overlaps it, and the figure."""
    from simdist.bands import band_separations, reached_text
    from simdist.report.compare import band_text
    from simdist.units import format_duration

    cells = len(summary[["workers", "severity"]].drop_duplicates())
    strategies, seeds = summary["strategy"].nunique(), per_seed["seed"].nunique()
    lines = [
        f"# simdist trade-off: time to {target:g} test accuracy",
        "",
        f"The full grid: {cells} (workers, slowdown) cells × {strategies} strategies × "
        f"{seeds} seeds = {len(per_seed)} runs. Time to target = updates needed ÷ update "
        "throughput; both are **interpolated** linearly between the last evaluation below "
        "the target and the first at or above it (in simulated time and in updates), so "
        "evaluating every 2 steps or every 10 updates does not bias them. A synchronous "
        "update applies N − b worker gradients (b backup workers), an asynchronous or SSP "
        "update one: gradients needed = updates needed × gradients / update. Each cell: "
        "mean over the seeds that reached the target (min–max).",
        "",
        "| strategy | workers | slowdown | time to target | reached | updates needed "
        "| gradients / update | gradients needed | updates / s | gradients / s "
        "| examples / update |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in summary.itertuples(index=False):
        lines.append(
            f"| {row.strategy} | {row.workers} | ×{row.severity:g} "
            f"| {band_text(row, 'time_to_target_s', format_duration, interval=False)} "
            f"| {reached_text(int(row.time_to_target_s_n), int(row.seeds))} "
            f"| {band_text(row, 'updates_to_target', '{:,.1f}'.format, interval=False)} "
            f"| {row.gradients_per_update_mean:g} "
            f"| {band_text(row, 'gradients_to_target', '{:,.0f}'.format, interval=False)} "
            f"| {band_text(row, 'updates_per_s', '{:,.0f}'.format, interval=False)} "
            f"| {band_text(row, 'gradients_per_s', '{:,.0f}'.format, interval=False)} "
            f"| {row.examples_per_update_mean:g} |"
        )
    lines += [
        "",
        "## Fastest per cell, and whether the seeds can tell it apart",
        "",
        "Fastest: the lowest mean time to target among the strategies that every seed took "
        "to the target. Each other strategy's min–max band of time to target over seeds is "
        "compared with the fastest's; where they overlap, that many seeds cannot tell the "
        "two apart. A seed that never reached the target counts as anywhere after its run's "
        "end.",
        "",
    ]
    for heading, items in separation_lines(band_separations(per_seed)):
        lines.append(f"- **{heading}**")
        lines += [f"  - {item}" for item in items]
    lines += ["", f"![trade-off]({plot})", ""]
    return "\n".join(lines)


def write_tradeoff(
    summary: pd.DataFrame,
    per_seed: pd.DataFrame,
    out_dir: Path,
    target: float,
    strategies: Sequence[str],
) -> Path:
    """Write tradeoff.csv, per_seed.csv, tradeoff.md and tradeoff.png atomically."""
    with AtomicFolder(Path(out_dir)) as tmp:
        write_csv(summary, tmp / "tradeoff.csv")
        write_csv(per_seed, tmp / "per_seed.csv")
        plot_tradeoff(summary, target, strategies, tmp / "tradeoff.png")
        markdown = tradeoff_markdown(summary, per_seed, target, "tradeoff.png")
        (tmp / "tradeoff.md").write_text(markdown)
    return Path(out_dir)
