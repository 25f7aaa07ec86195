"""The trade-off figure: time to target = updates needed ÷ update throughput, per strategy.

Three rows (time to target, update throughput, updates needed) against two axes (worker
count at the largest straggler severity; straggler severity at the largest worker
count). Each strategy is its mean over seeds with a min–max band; a point that not every
seed reached is labelled ``k/N``. The numbers come from
:func:`simdist.tradeoff.tradeoff_summary`; this module only draws and writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from simdist.report.tables import AtomicFolder, write_csv

#: (column, row label) of the figure's rows; time = updates ÷ (updates / s).
ROWS = (
    ("time_to_target_s", "time to target (ms)", 1e3),
    ("updates_per_s", "update throughput (updates / s)", 1.0),
    ("updates_to_target", "updates needed", 1.0),
)


def draw_tradeoff(
    fig: Figure, summary: pd.DataFrame, target: float, strategies: Sequence[str]
) -> None:
    """Draw the 3 × 2 grid of panels on ``fig`` from a :func:`tradeoff_summary` table."""
    fixed_severity, fixed_workers = summary["severity"].max(), summary["workers"].max()
    panels = (
        ("workers", "workers", summary[summary["severity"] == fixed_severity],
         f"straggler slowdown ×{fixed_severity:g}"),
        ("severity", "straggler slowdown (×, per straggling step)",
         summary[summary["workers"] == fixed_workers], f"{fixed_workers} workers"),
    )  # fmt: skip
    axes = fig.subplots(len(ROWS), len(panels), sharex="col", squeeze=False)
    colors = {s: f"C{i}" for i, s in enumerate(strategies)}
    for col, (x, xlabel, table, fixed) in enumerate(panels):
        for row, (column, ylabel, scale) in enumerate(ROWS):
            ax = axes[row][col]
            for strategy in strategies:
                part = table[table["strategy"] == strategy].sort_values(x)
                if part.empty:
                    continue
                mean = part[f"{column}_mean"] * scale
                color = colors[strategy]
                ax.plot(part[x], mean, "o-", ms=3.5, lw=1.4, color=color, label=strategy)
                low, high = part[f"{column}_min"] * scale, part[f"{column}_max"] * scale
                ax.fill_between(part[x], low, high, color=color, alpha=0.18, lw=0)
                if row == 0:
                    _mark_unreached(ax, part, x, mean, color)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.6g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.grid(alpha=0.3, which="both")
            if col == 0:
                ax.set_ylabel(ylabel, fontsize=9)
            if row == 0:
                ax.set_title(f"against {x} ({fixed})", fontsize=10)
            if row == len(ROWS) - 1:
                ax.set_xlabel(xlabel)
                ax.set_xticks(sorted(set(table[x])))
                ax.set_xticks([], minor=True)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(strategies), frameon=False)
    fig.suptitle(
        f"time to {target:g} test accuracy = updates needed ÷ update throughput\n"
        "(line: mean over seeds; band: min–max; k/N: seeds that reached the target)",
        fontsize=10,
    )


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

    fig = Figure(figsize=(10, 9), layout="constrained")
    draw_tradeoff(fig, summary, target, strategies)
    save_figure(fig, Path(path))


def tradeoff_markdown(summary: pd.DataFrame, target: float, plot: str) -> str:
    """tradeoff.md: the table (mean and min–max over seeds) and the figure."""
    from simdist.bands import reached_text
    from simdist.report.compare import band_text
    from simdist.units import format_duration

    lines = [
        f"# simdist trade-off: time to {target:g} test accuracy",
        "",
        "Time to target = updates needed ÷ update throughput. Each cell: mean over the "
        "seeds that reached the target (min–max).",
        "",
        "| strategy | workers | slowdown | time to target | reached | updates needed "
        "| updates / s | examples / update |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for row in summary.itertuples(index=False):
        lines.append(
            f"| {row.strategy} | {row.workers} | ×{row.severity:g} "
            f"| {band_text(row, 'time_to_target_s', format_duration, interval=False)} "
            f"| {reached_text(int(row.time_to_target_s_n), int(row.seeds))} "
            f"| {band_text(row, 'updates_to_target', '{:,.0f}'.format, interval=False)} "
            f"| {band_text(row, 'updates_per_s', '{:,.0f}'.format, interval=False)} "
            f"| {row.examples_per_update_mean:g} |"
        )
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
        (tmp / "tradeoff.md").write_text(tradeoff_markdown(summary, target, "tradeoff.png"))
    return Path(out_dir)
