"""``simdist compare``'s figures, table and folder: several runs side by side.

Running or loading the runs is :func:`simdist.api.compare`'s job; this
module only computes each run's figures and writes them.  The comparison
folder holds ``compare.csv`` (one row per run), ``compare.md``
(the same table, formatted, with the plot) and ``accuracy_vs_time.png`` (test
accuracy of every run against simulated time).  It is written atomically,
like a run's report.

With seeds (``simdist compare --seeds 3``), every scenario runs once per seed:
``per_seed.csv`` has one row per run (:func:`seed_table`), ``compare.csv`` one row per
scenario with each figure's mean, min, max, t-based 95% interval and count
(:func:`seeds_summary`, :func:`simdist.bands.aggregate`), and the plot draws each
scenario's mean and min–max band (:mod:`simdist.report.bands`).

The per-run figures (:func:`run_figures`) are also the key numbers of each
run's ``report.md``, so a comparison row and a report always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from simdist.report.tables import AtomicFolder, write_csv
from simdist.summary import time_split_by_device, training_devices
from simdist.units import MISSING, format_duration, format_number

if TYPE_CHECKING:
    from simdist.runtime.engine import Result

DEFAULT_TARGET = 0.9

#: Columns of compare.csv, in order.
COMPARE_COLUMNS = (
    "run",
    "strategy",
    "source",
    "steps",
    "simulated_time_s",
    "time_to_target_s",
    "step_to_target",
    "final_test_accuracy",
    "examples_per_s",
    "comm_share",
    "staleness_mean",
    "seed",
    "diverged",
    "collapsed",
)


def time_to_target(metrics: pd.DataFrame, target: float) -> tuple[float, int] | None:
    """Simulated time and step of the first evaluation with test accuracy ≥ ``target``.

    None when no evaluation reached it (or none was made: timing-only runs).
    """
    acc = metrics[(metrics["metric"] == "test_accuracy") & (metrics["value"] >= target)]
    if acc.empty:
        return None
    return float(acc["time_s"].iloc[0]), int(acc["step"].iloc[0])


def device_shares(result: Result) -> dict[str, float]:
    """Mean share of simulated time the training devices spend in each time-split category.

    Overlapping events count once (:func:`~simdist.summary.time_split_by_device`),
    so the shares add up to 1 even when a worker pulls from several
    parameter servers at once.  Falls back to ``summary["time_split"]``
    when no device computed.
    """
    sim_time_s = float(result.summary["simulated_time_s"])
    devices = training_devices(result.events)
    if not devices or sim_time_s <= 0:
        split = dict(result.summary.get("time_split") or {})
        return {k: float(split.get(k, 0.0)) for k in ("compute", "comm", "waiting", "idle")}
    split = time_split_by_device(result.events, sim_time_s, devices).mean() / sim_time_s
    return {k: float(v) for k, v in split.items()}


def run_figures(result: Result, target: float = DEFAULT_TARGET) -> dict[str, Any]:
    """The headline figures of one run, as compared across runs.

    ``comm_share`` is the mean share of the training devices' time spent
    communicating (overlaps counted once); ``staleness_mean`` is None for
    runs without staleness: synchronous strategies, parameter servers in
    ``mode: sync`` among them (every gradient they apply is fresh, by construction).
    """
    summary = result.summary
    reached = time_to_target(result.metrics, target)
    staleness = summary.get("staleness") if summary.get("mode") != "sync" else None
    return {
        "run": summary.get("name", result.scenario.name),
        "strategy": summary.get("strategy", result.scenario.strategy.kind),
        "steps": summary.get("steps"),
        "simulated_time_s": summary.get("simulated_time_s"),
        "time_to_target_s": None if reached is None else reached[0],
        "step_to_target": None if reached is None else reached[1],
        "final_test_accuracy": summary.get("final_test_accuracy"),
        "examples_per_s": summary.get("examples_per_s"),
        "comm_share": device_shares(result)["comm"],
        "staleness_mean": staleness.get("mean") if isinstance(staleness, dict) else None,
        "seed": summary.get("seed", result.scenario.seed),
        "diverged": bool(summary.get("diverged", False)),
        "collapsed": bool(summary.get("collapsed", False)),
    }


def compare_table(
    results: Sequence[Any], target: float = DEFAULT_TARGET, sources: Sequence[str] = ()
) -> pd.DataFrame:
    """One row of :func:`run_figures` per run, columns :data:`COMPARE_COLUMNS`.

    Duplicate run names get `` (2)``, `` (3)`` … so each row is labelled uniquely.
    """
    rows = []
    seen: dict[str, int] = {}
    for i, result in enumerate(results):
        row = run_figures(result, target)
        seen[row["run"]] = seen.get(row["run"], 0) + 1
        if seen[row["run"]] > 1:
            row["run"] = f"{row['run']} ({seen[row['run']]})"
        row["source"] = sources[i] if i < len(sources) else ""
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    return _typed(frame)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    for column in ("steps", "step_to_target", "seed"):
        frame[column] = frame[column].astype("Int64")
    for column in ("time_to_target_s", "final_test_accuracy", "examples_per_s", "staleness_mean"):
        frame[column] = frame[column].astype("float64")
    for column in ("diverged", "collapsed"):
        frame[column] = frame[column].astype(bool)
    return frame


# ---------------------------------------------------------------- across seeds

#: The per-seed figures compare.csv summarises with seeds, in order.
SEED_FIGURES = (
    "time_to_target_s",
    "step_to_target",
    "final_test_accuracy",
    "examples_per_s",
    "comm_share",
    "staleness_mean",
    "simulated_time_s",
)
#: What identifies a scenario in the tables with seeds.
SEED_KEYS = ("run", "strategy", "source")


def seed_table(
    results_by_label: Mapping[str, Sequence[Any]],
    target: float = DEFAULT_TARGET,
    sources: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One row of :func:`run_figures` per run, labelled by its scenario and its seed.

    ``results_by_label`` maps a label to its Results, one per seed
    (:func:`simdist.api.run_seeds`); ``run`` is the label (not deduplicated: the seeds
    of a scenario share it), ``seed`` the run's seed. Columns :data:`COMPARE_COLUMNS`.
    """
    rows = []
    for label, results in results_by_label.items():
        for result in results:
            row = run_figures(result, target)
            row["run"] = label
            row["source"] = (sources or {}).get(label, "")
            rows.append(row)
    return _typed(pd.DataFrame(rows, columns=list(COMPARE_COLUMNS)))


def seeds_summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """compare.csv with seeds: per scenario, :func:`simdist.bands.aggregate` of the figures.

    Columns: ``run``, ``strategy``, ``source``, ``seeds``, then for each of
    :data:`SEED_FIGURES` ``X_mean``, ``X_min``, ``X_max``, ``X_ci95`` (half-width of the
    t-based 95% interval of the mean) and ``X_n`` (seeds with a value: for time to target,
    the seeds that reached it), then ``diverged_count`` and ``collapsed_count``.
    """
    from simdist.bands import aggregate

    columns = [*SEED_KEYS, "seed", *SEED_FIGURES, "diverged", "collapsed"]
    frame = per_seed[columns].copy()
    for column in SEED_FIGURES:
        frame[column] = frame[column].astype("float64")
    return aggregate(frame, SEED_KEYS)


def band_text(row: Any, column: str, fmt: Callable[[float], str], interval: bool = True) -> str:
    """``mean (min–max) ±ci95`` of ``column`` in a :func:`seeds_summary` row, formatted by ``fmt``.

    ``fmt`` turns one number into text. One seed: the value alone; the same value for
    every seed (as formatted): ``value (every seed)``; no value: ``—``.
    """
    n = int(getattr(row, f"{column}_n"))
    if n == 0:
        return MISSING
    mean = float(getattr(row, f"{column}_mean"))
    if n == 1:
        return fmt(mean)
    low, high = float(getattr(row, f"{column}_min")), float(getattr(row, f"{column}_max"))
    if fmt(low) == fmt(high):
        return f"{fmt(mean)} (every seed)"
    text = f"{fmt(mean)} ({fmt(low)}–{fmt(high)})"
    ci = float(getattr(row, f"{column}_ci95"))
    return f"{text} ±{fmt(ci)}" if interval and ci == ci else text


def _percent(value: float) -> str:
    return f"{value:.1%}"


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _staleness(value: float) -> str:
    return f"{value:.2f}"


def seeds_markdown(summary: pd.DataFrame, target: float, plot: str | None) -> str:
    """compare.md with seeds: each figure as mean (min–max) ±95% interval, "reached by k of N"."""
    from simdist.bands import reached_text

    lines = [
        f"# simdist comparison across seeds: {', '.join(summary['run'])}",
        "",
        f"Target test accuracy: **{target:g}**. Each cell: mean over the seeds (min–max) "
        "±half-width of the 95% confidence interval of the mean (Student's t, n−1 degrees "
        "of freedom).",
        "",
        f"| run | strategy | seeds | time to {target:g} | reached | final test accuracy "
        "| examples/s | communication | mean staleness | collapsed / diverged |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in summary.itertuples(index=False):
        lines.append(
            f"| {row.run} | {row.strategy} | {row.seeds} "
            f"| {band_text(row, 'time_to_target_s', format_duration)} "
            f"| {reached_text(int(row.time_to_target_s_n), int(row.seeds))} "
            f"| {band_text(row, 'final_test_accuracy', _percent)} "
            f"| {band_text(row, 'examples_per_s', _rate)} "
            f"| {band_text(row, 'comm_share', _percent)} "
            f"| {band_text(row, 'staleness_mean', _staleness)} "
            f"| {row.collapsed_count} / {row.diverged_count} |"
        )
    lines += [
        "",
        "Time to target is averaged over the seeds that reached it. — : no seed reached it, "
        "or not measured (timing-only runs have no accuracy; synchronous runs have no "
        "staleness). *Communication* is the mean share of the training devices' time spent "
        "communicating (parallel transfers counted once); *mean staleness* the mean, over "
        "applied gradients, of the parameter version at apply minus the version computed "
        "from. *Collapsed*: finite, but the final accuracy is within 5 points of chance or "
        "the loss ended above its start.",
        "",
    ]
    if plot:
        lines += [f"![test accuracy vs simulated time, mean and min–max over seeds]({plot})", ""]
    sources = [s for s in summary["source"] if s]
    if sources:
        lines += ["Sources: " + ", ".join(f"`{s}`" for s in sources), ""]
    return "\n".join(lines)


def write_compare_seeds(
    results_by_label: Mapping[str, Sequence[Any]],
    out_dir: Path,
    target: float = DEFAULT_TARGET,
    sources: Mapping[str, str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write the comparison folder with seeds atomically; return (summary, per-seed table)."""
    from simdist.report.bands import plot_accuracy_bands

    per_seed = seed_table(results_by_label, target, sources)
    summary = seeds_summary(per_seed)
    with AtomicFolder(Path(out_dir)) as tmp:
        write_csv(summary, tmp / "compare.csv")
        write_csv(per_seed, tmp / "per_seed.csv")
        title = "test accuracy vs simulated time"
        plot_accuracy_bands(results_by_label, target, title, tmp / "accuracy_vs_time.png")
        (tmp / "compare.md").write_text(seeds_markdown(summary, target, "accuracy_vs_time.png"))
    return summary, per_seed


def compare_markdown(table: pd.DataFrame, target: float, plot: str | None) -> str:
    """compare.md: the table, formatted for people, the overlay plot and what the columns mean."""
    # Missing cells (NaN, or <NA> in the integer columns) become None, which reads as "—".
    cells = table.astype(object).where(table.notna(), None)

    def duration(value: Any) -> str:
        return MISSING if value is None else format_duration(float(value))

    lines = [
        f"# simdist comparison: {', '.join(table['run'])}",
        "",
        f"Target test accuracy: **{target:g}**.",
        "",
        f"| run | strategy | steps | simulated time | time to {target:g} | step to {target:g} "
        "| final test accuracy | examples/s | communication | mean staleness |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in cells.itertuples(index=False):
        lines.append(
            f"| {row.run} | {row.strategy} | {format_number(row.steps, '{:d}')} "
            f"| {duration(row.simulated_time_s)} | {duration(row.time_to_target_s)} "
            f"| {format_number(row.step_to_target, '{:d}')} "
            f"| {format_number(row.final_test_accuracy, '{:.2%}')} "
            f"| {format_number(row.examples_per_s, '{:,.0f}')} "
            f"| {format_number(row.comm_share, '{:.1%}')} "
            f"| {format_number(row.staleness_mean, '{:.2f}')} |"
        )
    lines += [
        "",
        "— : never reached, or not measured (timing-only runs have no accuracy; "
        "synchronous runs have no staleness).",
        "",
    ]
    if plot:
        lines += [f"![test accuracy vs simulated time]({plot})", ""]
    lines += [
        "Columns: *time to target* is the simulated time of the first evaluation at or above "
        "the target; *examples/s* is training examples per second of simulated time; "
        "*communication* is the mean share of the training devices' time spent communicating "
        "(parallel transfers counted once); *mean staleness* is the mean, over applied "
        "gradients, of the parameter version at apply minus the version computed from.",
        "",
        "Sources: " + ", ".join(f"`{s}`" for s in table["source"] if s),
        "",
    ]
    return "\n".join(lines)


def write_compare(
    results: Sequence[Any],
    out_dir: Path,
    target: float = DEFAULT_TARGET,
    sources: Sequence[str] = (),
) -> pd.DataFrame:
    """Write the comparison folder atomically; return the table written to compare.csv."""
    from simdist.report.plots import plot_accuracy_overlay

    table = compare_table(results, target, sources)
    with AtomicFolder(Path(out_dir)) as tmp:
        write_csv(table, tmp / "compare.csv")
        runs = {label: r.metrics for label, r in zip(table["run"], results, strict=True)}
        plot_accuracy_overlay(
            runs, target, "test accuracy vs simulated time", tmp / "accuracy_vs_time.png"
        )
        (tmp / "compare.md").write_text(compare_markdown(table, target, "accuracy_vs_time.png"))
    return table
