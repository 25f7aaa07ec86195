"""The goodput report folder: goodput.md, summary.json, the tables and two figures.

* ``goodput_interval.png`` — goodput against the checkpoint interval (mean and min–max band
  over the seeds), with Young's √(2δM) marked, Daly's higher-order optimum beside it, the
  optimum read off the simulation, and the first-order goodput curve;
* ``goodput_size.png`` — goodput against the job's GPUs (1k to 128k), stop-and-restart and
  elastic, at the scenario's interval and at Young's optimum for each size.

The numbers come from :func:`simdist.goodput.run.summarize`; this module only draws and
writes them (and imports nothing of simdist.goodput but its closed forms).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from simdist.report.figures import save_figure
from simdist.report.tables import AtomicFolder, write_csv, write_json
from simdist.units import format_duration, format_size

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["draw_interval", "draw_size", "goodput_markdown", "write_goodput"]


def draw_interval(fig: Figure, name: str, s: dict[str, Any], bands: pd.DataFrame) -> None:
    """Goodput against the checkpoint interval (``bands``: the sweep's per-interval figures
    over seeds), Young's and Daly's optima marked; ``s`` is the study's summary."""
    import numpy as np

    from simdist.goodput.young_daly import first_order_goodput

    ax = fig.add_subplot(1, 1, 1)
    minutes = bands["interval_s"] / 60.0
    ax.fill_between(minutes, bands["goodput_min"], bands["goodput_max"], alpha=0.25,
                    label="simulated, min–max over seeds")  # fmt: skip
    ax.plot(minutes, bands["goodput_mean"], "o-", label="simulated, mean")
    grid = np.geomspace(float(bands["interval_s"].min()), float(bands["interval_s"].max()), 200)
    first = [first_order_goodput(t, s["delta_s"], s["mtbf_s"], s["restart_s"]) for t in grid]
    ax.plot(grid / 60.0, first, "k:", label="first order: 1 − δ/τ − (τ+δ)/2M − R/M")
    ax.axvline(s["young_interval_s"] / 60.0, color="C3", ls="--",
               label=f"Young √(2δM) = {format_duration(s['young_interval_s'])}")  # fmt: skip
    ax.axvline(s["daly_interval_s"] / 60.0, color="C4", ls="-.",
               label=f"Daly 2006 = {format_duration(s['daly_interval_s'])}")  # fmt: skip
    best = s["simulated_optimum_interval_s"]
    ax.axvline(best / 60.0, color="C2", ls="-", lw=0.8,
               label=f"simulated optimum = {format_duration(best)}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval τ (minutes of training between checkpoints)")
    ax.set_ylabel("goodput (useful training time ÷ wall time)")
    ax.set_title(
        f"{name}: {s['gpus']:,} GPUs, M = {format_duration(s['mtbf_s'])}, "
        f"δ = {format_duration(s['delta_s'])}, R = {format_duration(s['restart_s'])}"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower center")


def draw_size(fig: Figure, name: str, s: dict[str, Any], bands: pd.DataFrame) -> None:
    """Goodput against the job's GPUs (``bands``: per size, recovery and interval),
    stop-and-restart and elastic."""
    ax = fig.add_subplot(1, 1, 1)
    styles = {("restart", "plan"): ("C0", "-"), ("restart", "young"): ("C0", "--"),
              ("elastic", "plan"): ("C1", "-"), ("elastic", "young"): ("C1", "--")}  # fmt: skip
    for (recovery, interval), (color, ls) in styles.items():
        part = bands[(bands["recovery"] == recovery) & (bands["interval"] == interval)]
        if part.empty:
            continue
        label = f"{recovery}, {'scenario' if interval == 'plan' else 'Young'} interval"
        ax.fill_between(part["gpus"], part["goodput_min"], part["goodput_max"], color=color,
                        alpha=0.15)  # fmt: skip
        ax.plot(part["gpus"], part["goodput_mean"], marker="o", color=color, ls=ls, label=label)
    ax.axvline(s["gpus"], color="grey", lw=0.8, ls=":", label="this job")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs in the job (data-parallel copies added; step and bytes per GPU held)")
    ax.set_ylabel("goodput (useful training time ÷ wall time)")
    ax.set_title(f"{name}: goodput as the job grows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _plot(draw: Any, name: str, s: dict[str, Any], bands: pd.DataFrame, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 5.5))
    draw(fig, name, s, bands)
    save_figure(fig, path)


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def goodput_markdown(name: str, s: dict[str, Any], interruptions: pd.DataFrame) -> str:
    """goodput.md: the job, where the wall clock went, the interruptions by cause, the
    interval and recovery comparisons."""
    wall = s["horizon_s"]
    lines = [
        f"# {name}: goodput over {format_duration(wall)} ({wall / 86400:g} days)",
        "",
        f"{s['gpus']:,} GPUs on {s['hosts']:,} hosts ({s['switches']:,} switches), "
        f"{s['replicas']:,} data-parallel copies; step {format_duration(s['step_s'])}; "
        f"a checkpoint every {s['every_steps']:,} steps ({format_duration(s['interval_s'])}) of "
        f"{format_size(s['checkpoint_nbytes_per_device'])} per device, {s['checkpoint_mode']}: "
        f"training stops {format_duration(s['checkpoint_blocking_s'])}"
        + (
            f", the write goes on {format_duration(s['checkpoint_background_s'])}"
            if s["checkpoint_background_s"]
            else ""
        )
        + f"; recovery: {s['recovery']}; {s['seeds']} seeds.",
        "",
        "| figure | mean | min – max | 95% CI of the mean |",
        "| --- | --- | --- | --- |",
    ]
    for column, label in (("goodput", "goodput"), ("ettr", "effective training time ratio"),
                          ("interruptions", "interruptions")):  # fmt: skip
        fmt = _pct if column != "interruptions" else (lambda v: f"{v:.1f}")
        lines.append(
            f"| {label} | {fmt(s[f'{column}_mean'])} | {fmt(s[f'{column}_min'])} – "
            f"{fmt(s[f'{column}_max'])} | ± {fmt(s[f'{column}_ci95'])} |"
        )
    lines += ["", "Where the wall clock went (mean over seeds):", ""]
    for column, label in (("useful_s", "useful training"), ("checkpoint_s", "checkpoints"),
                          ("restart_s", "restarts (restart + reload, reconfiguring)"),
                          ("lost_s", "recomputed work (lost since the last checkpoint)"),
                          ("degraded_s", "fewer copies (elastic)")):  # fmt: skip
        lines.append(f"- {label}: {format_duration(s[f'{column}_mean'])} "
                     f"({_pct(s[f'{column}_mean'] / wall)})")  # fmt: skip
    lines += [
        "",
        f"Young's optimum √(2δM) = {format_duration(s['young_interval_s'])} "
        f"(M = {format_duration(s['mtbf_s'])}, δ = {format_duration(s['delta_s'])}); "
        f"Daly's {format_duration(s['daly_interval_s'])}; simulated "
        f"{format_duration(s['simulated_optimum_interval_s'])} at goodput "
        f"{_pct(s['simulated_optimum_goodput'])} (first order at Young's: "
        f"{_pct(s['first_order_goodput'])}).",
        "",
        "Recovery compared (same failures): "
        + ", ".join(
            f"{name} {_pct(s[f'goodput_{name}_mean'])}"
            for name in ("restart", "elastic")
            if f"goodput_{name}_mean" in s
        )
        + ".",
        "",
        "## Interruptions by cause",
        "",
        "| cause | component | per component-day | expected | simulated mean (min – max) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in interruptions.itertuples(index=False):
        lines.append(
            f"| {row.cause} | {row.component} | {row.per_component_day:.3g} | "
            f"{row.expected:.1f} | {row.mean:.1f} ({row.min} – {row.max}) |"
        )
    lines += ["", "![goodput against interval](goodput_interval.png)", "",
              "![goodput against size](goodput_size.png)", ""]  # fmt: skip
    return "\n".join(lines)


def write_goodput(
    name: str, summary: dict[str, Any], tables: dict[str, pd.DataFrame], out_dir: Path
) -> Path:
    """Write goodput.md, summary.json, the tables as CSV and both figures, atomically."""
    with AtomicFolder(Path(out_dir)) as tmp:
        write_json(summary, tmp / "summary.json")
        for table, frame in tables.items():
            write_csv(frame, tmp / f"{table}.csv")
        _plot(draw_interval, name, summary, tables["interval_bands"], tmp / "goodput_interval.png")
        _plot(draw_size, name, summary, tables["size_bands"], tmp / "goodput_size.png")
        (tmp / "goodput.md").write_text(goodput_markdown(name, summary, tables["interruptions"]))
    return Path(out_dir)
