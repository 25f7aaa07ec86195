"""The trade-off figure and tradeoff.md: time to target = updates ÷ update throughput.

Three rows (time to target, update throughput, updates needed) against one axis of the
grid (worker count, or the straggler severity when it has more values), one column of
panels per value of the other: with the default grid, 4, 8 and 16 workers on x and a
panel without and one with stragglers. Each strategy is one colour: its mean over the
seeds that reached the target, a min–max bar over them (points of one x set a little
apart, so no bar covers another and no translucent band mixes colours), and on the time
row ``k/N``, the seeds of N that reached the target, at every point. A strategy that no
seed took to the target is a × at the top of its panels, "k/N: did not reach" on the time
row. :func:`tradeoff_layout` returns what is drawn, so that it is checked without pixels.
tradeoff.md lists every cell and, per cell, the fastest strategy and whose min–max band
overlaps it (:func:`separation_lines`), or that a strategy did not reach the target. The
numbers come from :func:`simdist.studies.tradeoff.tradeoff_summary` and
:func:`simdist.bands.band_separations`; this module only draws and writes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from simdist.report.tables import AtomicFolder, write_csv

#: (column, row label, scale) of the figure's rows; time = updates ÷ (updates / s). Gradients
#: needed (updates × gradients per update) are in tradeoff.md's table, not drawn.
ROWS = (
    ("time_to_target_s", "time to target (ms)", 1e3),
    ("updates_per_s", "update throughput (updates / s)", 1.0),
    ("updates_to_target", "updates needed", 1.0),
)
#: The figure's size for the default grid (two panel columns); see :func:`figure_size`.
FIGSIZE = (10.5, 9.5)
#: Where a strategy's points sit beside the others' at one x (log2 units between neighbours),
#: so that their min–max bars do not cover each other.
DODGE = 0.1
#: Height (axes fraction) of the mark of a strategy that no seed took to the target.
UNREACHED_Y = 0.95


@dataclass(frozen=True)
class TradeoffLayout:
    """What the trade-off figure draws, so that it can be checked without pixels.

    ``x``: the column on the x axis (``workers`` or ``severity``: the one with more
    values); ``panel_by``: the other, one column of panels per value (``panels``, with
    their ``titles``). ``points``: one row per (figure row, panel, strategy, x value):
    ``row`` (index into :data:`ROWS`), ``panel`` (index into ``panels``), ``strategy``,
    ``color``, ``x``, ``x_drawn`` (dodged), ``mean``, ``low``, ``high`` (scaled),
    ``reached``, ``seeds``, ``label`` (``k/N`` on the time row, "" elsewhere) and ``kind``:
    ``point`` (drawn), ``unreached`` (no seed reached the target: a × at the top of the
    panel) or ``unplaced`` (zero: a log axis cannot place it; the panel says so).
    ``legend``: (label, colour) of each strategy: every colour drawn.
    """

    x: str
    panel_by: str
    panels: list[Any]
    titles: list[str]
    points: pd.DataFrame
    legend: list[tuple[str, str]]


def _axis_names(x: str) -> tuple[str, Callable[[Any], str]]:
    """The x label of ``x``, and how a panel of the other column is titled."""
    if x == "workers":
        return "workers", lambda v: f"slowdown ×{v:g}" + (" (no stragglers)" if v == 1 else "")
    return "straggler slowdown (×, per straggling step)", lambda v: f"{v} workers"


def tradeoff_layout(summary: pd.DataFrame, strategies: Sequence[str]) -> TradeoffLayout:
    """The panels, points and marks of the trade-off figure of a :func:`tradeoff_summary`."""
    counts = {c: summary[c].nunique() for c in ("workers", "severity")}
    x = "workers" if counts["workers"] >= counts["severity"] else "severity"
    panel_by = "severity" if x == "workers" else "workers"
    panels = sorted(set(summary[panel_by]))
    _, title = _axis_names(x)
    colors = {s: f"C{i % 10}" for i, s in enumerate(strategies)}
    rows = []
    for row, (column, _, scale) in enumerate(ROWS):
        for p, value in enumerate(panels):
            table = summary[summary[panel_by] == value]
            for i, strategy in enumerate(strategies):
                part = table[table["strategy"] == strategy].sort_values(x)
                shift = 2.0 ** (DODGE * (i - (len(strategies) - 1) / 2))
                for r in part.itertuples(index=False):
                    reached, seeds = int(r.time_to_target_s_n), int(r.seeds)
                    mean = float(getattr(r, f"{column}_mean")) * scale
                    kind = (
                        "unreached"
                        if reached == 0
                        else "point"
                        if mean == mean and 0 < mean < math.inf
                        else "unplaced"
                    )
                    rows.append(
                        {
                            "row": row,
                            "panel": p,
                            "strategy": strategy,
                            "color": colors[strategy],
                            "x": getattr(r, x),
                            "x_drawn": getattr(r, x) * shift,
                            "mean": mean,
                            "low": float(getattr(r, f"{column}_min")) * scale,
                            "high": float(getattr(r, f"{column}_max")) * scale,
                            "reached": reached,
                            "seeds": seeds,
                            "label": f"{reached}/{seeds}" if row == 0 else "",
                            "kind": kind,
                        }
                    )
    points = pd.DataFrame(
        rows,
        columns=["row", "panel", "strategy", "color", "x", "x_drawn", "mean", "low", "high",
                 "reached", "seeds", "label", "kind"],
    )  # fmt: skip
    legend = [(s, colors[s]) for s in strategies]
    return TradeoffLayout(x, panel_by, panels, [title(v) for v in panels], points, legend)


def figure_size(summary: pd.DataFrame) -> tuple[float, float]:
    """Inches for the figure: 4.8 wide per panel column (at least two), 9.5 high."""
    layout_columns = min(summary["workers"].nunique(), summary["severity"].nunique())
    return (max(FIGSIZE[0], 1.2 + 4.8 * layout_columns), FIGSIZE[1])


def draw_tradeoff(
    fig: Figure, summary: pd.DataFrame, target: float, strategies: Sequence[str]
) -> TradeoffLayout:
    """Draw :func:`tradeoff_layout`'s panels on ``fig``: a row per figure of :data:`ROWS`, a
    column per value of the axis not on x. Each strategy is one colour: its mean over the
    seeds that reached the target, a bar from their min to their max, and on the time row
    how many seeds of how many reached it; a strategy no seed took there is a × at the top
    of every row's panel. Returns the layout drawn."""
    layout = tradeoff_layout(summary, strategies)
    axes = fig.subplots(len(ROWS), len(layout.panels), sharex=True, squeeze=False)
    xlabel, _ = _axis_names(layout.x)
    ticks = sorted(set(summary[layout.x]))
    points = layout.points
    for row, (_, ylabel, _) in enumerate(ROWS):
        for p in range(len(layout.panels)):
            ax = axes[row][p]
            here = points[(points["row"] == row) & (points["panel"] == p)]
            _draw_panel(ax, here, strategies)
            if p == 0:
                ax.set_ylabel(ylabel, fontsize=9)
            if row == 0:
                ax.set_title(layout.titles[p], fontsize=10)
            if row == len(ROWS) - 1:
                _x_axis(ax, layout.x, xlabel, ticks)
    handles = [Line2D([], [], color=c, marker="o", ms=4, label=s) for s, c in layout.legend]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(6, len(handles)),
               frameon=False, fontsize=9)  # fmt: skip
    fig.suptitle(
        f"time to {target:g} test accuracy = updates needed ÷ update throughput\n"
        "point: mean over the seeds that reached the target (crossing interpolated between "
        "evaluations); bar: their min–max;\nk/N: seeds of N that reached it; × at the top: "
        "no seed reached it (did not reach)",
        fontsize=10,
    )
    return layout


def _draw_panel(ax: Any, points: pd.DataFrame, strategies: Sequence[str]) -> None:
    """One panel: per strategy a line through its means, min–max bars, k/N labels, and ×
    marks at the top for the x values no seed reached."""
    drawn = points[points["kind"] == "point"]
    for strategy in strategies:
        mine = drawn[drawn["strategy"] == strategy]
        if mine.empty:
            continue
        color = mine["color"].iloc[0]
        ax.plot(mine["x_drawn"], mine["mean"], marker="o", ms=4, lw=1.5, color=color, zorder=3)
        ax.vlines(mine["x_drawn"], mine["low"], mine["high"], color=color, lw=1.2, alpha=0.8)
        for r in mine.itertuples(index=False):
            if r.label:  # above its bar, upright, so that neighbours' labels stay apart
                ax.annotate(r.label, (r.x_drawn, max(r.high, r.mean)), xytext=(0, 2),
                            textcoords="offset points", fontsize=7, color=color,
                            rotation=90, ha="center", va="bottom")  # fmt: skip
    missing = points[points["kind"] == "unreached"]
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for r in missing.itertuples(index=False):
        ax.plot([r.x_drawn], [UNREACHED_Y], marker="x", ms=7, mew=1.8, color=r.color,
                transform=top, ls="none", clip_on=False)  # fmt: skip
        if r.label:
            ax.annotate(f"{r.label}: did not reach", (r.x_drawn, UNREACHED_Y),
                        xycoords=top, xytext=(5, -1), textcoords="offset points",
                        fontsize=7, color=r.color, va="center")  # fmt: skip
    extent = [v for v in (*drawn["mean"], *drawn["low"], *drawn["high"]) if 0 < v < math.inf]
    _log_axis(ax, extent, int((points["kind"] == "unplaced").sum()))


def _x_axis(ax: Any, x: str, label: str, ticks: list[Any]) -> None:
    """Label the x axis with a tick at every value, on a log-2 scale (worker counts and
    slowdowns double); a little room either side for the dodged points."""
    if min(ticks) > 0:
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(ticks) / 2**0.35, max(ticks) * 2**0.5)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(label)
    ax.set_xticks(ticks)
    ax.set_xticks([], minor=True)


def _log_axis(ax: Any, values: Sequence[float], unplaced: int) -> None:
    """Log y axis over ``values`` (the panel's means and bars) with 1-2-5 ticks written out
    in full, and a light grid.

    A log axis cannot place a zero: such points are left out and the panel says how many;
    a panel with nothing else keeps a linear axis and says why it is empty (matplotlib
    refuses a log axis without data).
    """
    if unplaced:
        said = f"{unplaced} zero value{'s' if unplaced > 1 else ''}: not drawn on a log scale"
        ax.text(0.02, 0.03, said, transform=ax.transAxes, ha="left", va="bottom", fontsize=7,
                color="0.35")  # fmt: skip
    if not values:
        ax.text(0.5, 0.5, "no value to draw", transform=ax.transAxes, ha="center",
                va="center", fontsize=8, color="0.35")  # fmt: skip
        ax.set_yticks([])
        return
    ax.set_yscale("log")
    low, high = min(values), max(values)
    ax.set_ylim(low / 1.6, high * 2.2)  # room above for the marks of unreached cells
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.6g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3, which="both")


def plot_tradeoff(
    summary: pd.DataFrame, target: float, strategies: Sequence[str], path: Path
) -> None:
    """:func:`draw_tradeoff` as a PNG."""
    from simdist.report.figures import save_figure

    fig = Figure(figsize=figure_size(summary), layout="constrained")
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
            if r.reached == 0:
                lines.append(f"{r.strategy}: did not reach the target with any of {r.seeds} seeds")
                continue
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
        return f"did not reach the target with any of {row.seeds} seeds"
    if row.reached < row.seeds:
        return (
            f"reached by {row.reached} of {row.seeds} (mean {fmt(row.mean_s)}; did not reach "
            f"with {row.seeds - row.reached}), band from {fmt(row.low_s)} on"
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
