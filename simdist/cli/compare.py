"""``simdist compare`` and ``simdist tradeoff``: several runs side by side (optionally over
seeds), and time to a target accuracy for sync, backups, SSP and async; their shared
--seeds / --processes / --quiet options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from simdist.cli.common import (
    SchedulerOption,
    SetOption,
    command,
    console,
    err_console,
    guarded,
    print_report_line,
    print_table,
)
from simdist.errors import SimdistError
from simdist.units import format_number

if TYPE_CHECKING:
    import pandas as pd

    from simdist.studies.tradeoff import Tradeoff


def _seeds_option(text: str | None) -> Any:
    """``--seeds 3`` (seeds 0, 1, 2) or ``--seeds 0,4,7`` (those seeds); None when not given."""
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise SimdistError(
            f"--seeds: got {text!r}; expected a count, e.g. --seeds 3, or seeds, e.g. 0,4,7"
        )
    values = [int(part) for part in parts]
    return values if "," in text else values[0]


SeedsOption = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="Run each scenario for N seeds (0..N-1), or for the listed seeds (0,4,7); "
        "report mean, min-max and 95% interval.",
    ),
]
ProcessesOption = Annotated[
    int | None,
    typer.Option(min=1, help="Worker processes when the runs go to Dask (default: cores)."),
]
#: --quiet of compare and tradeoff, which print a line per run rather than a progress bar.
QuietMessagesOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress messages and no table: only errors, warnings and "
        "the line naming the report folder.",
    ),
]


def _announcer(quiet: bool, runs: int | None = None) -> Callable[[str], None]:
    """The callback that prints ``simulating <label> …`` on stderr as each run starts
    (nothing under --quiet). Labels of :func:`simdist.studies.runs.run_many` already say which
    run of how many; given ``runs`` (the scenarios of a compare without seeds, which are
    run one by one by name only), the count is added here."""
    started = 0

    def announce(label: str) -> None:
        nonlocal started
        started += 1
        if quiet:
            return
        counted = f"{label} (run {started} of {runs})" if runs else label
        err_console.print(f"simulating {counted} …", highlight=False, soft_wrap=True)

    return announce


@command()
def compare(
    inputs: Annotated[
        list[Path], typer.Argument(help="Scenario YAML files (run now) and/or report folders.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Comparison folder (default reports/compare_<names>)."),
    ] = None,
    target: Annotated[
        float, typer.Option("--target", help="Test accuracy for 'time to target', in (0, 1].")
    ] = 0.9,
    set_: SetOption = None,
    seeds: SeedsOption = None,
    processes: ProcessesOption = None,
    scheduler: SchedulerOption = None,
    quiet: QuietMessagesOption = False,
) -> None:
    """Run or load several scenarios and write one comparison report (compare.csv, .md, plot).

    With --seeds, every scenario runs once per seed (as Dask tasks when there are many)
    and each figure is reported as mean (min-max) and the t-based 95% interval of the
    mean; time to target says how many seeds reached it.
    """
    import math

    from simdist.api import compare as compare_runs
    from simdist.units import format_duration

    chosen = guarded(lambda: _seeds_option(seeds))
    scenarios = sum(1 for path in inputs if path.suffix in (".yaml", ".yml"))
    on_run = _announcer(quiet, scenarios if chosen is None else None)
    out_dir, rows = guarded(
        lambda: compare_runs(
            inputs,
            out=out,
            target=target,
            overrides=set_ or (),
            on_run=on_run,
            seeds=chosen,
            processes=processes,
            scheduler=scheduler,
        )
    )
    if quiet:
        print_report_line(out_dir)
        return
    if chosen is not None:
        _print_seeds_table(rows, target)
        print_report_line(out_dir)
        return
    table = Table(title=f"simdist compare · target accuracy {target:g}")
    for column in ("run", "strategy", "time to target", "final accuracy", "examples/s", "comm"):
        table.add_column(column, justify="left" if column in ("run", "strategy") else "right")
    for row in rows.itertuples(index=False):
        reached, accuracy = row.time_to_target_s, row.final_test_accuracy
        table.add_row(
            str(row.run),
            str(row.strategy),
            "—" if math.isnan(reached) else format_duration(reached),
            format_number(None if math.isnan(accuracy) else accuracy, "{:.2%}"),
            format_number(row.examples_per_s, "{:,.0f}"),
            format_number(row.comm_share, "{:.1%}"),
        )
    print_table(table)
    print_report_line(out_dir)


def _print_seeds_table(rows: pd.DataFrame, target: float) -> None:
    """The terminal table of ``compare --seeds``: mean (min–max) per figure."""
    from simdist.bands import reached_text
    from simdist.report.compare import band_text
    from simdist.units import format_duration

    table = Table(title=f"simdist compare · target accuracy {target:g} · mean (min–max) over seeds")
    for column in ("run", "seeds", "time to target", "reached", "final accuracy", "examples/s"):
        table.add_column(column, justify="left" if column in ("run", "reached") else "right")
    for row in rows.itertuples(index=False):
        table.add_row(
            str(row.run),
            str(row.seeds),
            band_text(row, "time_to_target_s", format_duration, interval=False),
            reached_text(int(row.time_to_target_s_n), int(row.seeds)),
            band_text(row, "final_test_accuracy", lambda v: f"{v:.1%}", interval=False),
            band_text(row, "examples_per_s", lambda v: f"{v:,.0f}", interval=False),
        )
    print_table(table)


def _numbers(text: str | None, option: str, kind: Callable[[str], Any]) -> list[Any] | None:
    """``--workers 4,8,16`` → [4, 8, 16]; None when the option is not given."""
    if text is None:
        return None
    try:
        return [kind(part.strip()) for part in text.split(",")]
    except ValueError:
        raise SimdistError(f"{option}: got {text!r}; expected numbers, e.g. 4,8,16") from None


@command()
def tradeoff(
    scenario: Annotated[
        Path, typer.Argument(help="A parameter_server scenario (default scenarios/ps_4w2s.yaml).")
    ] = Path("scenarios/ps_4w2s.yaml"),
    workers: Annotated[
        str | None,
        typer.Option(help="Worker counts, e.g. 4,8,16 (the default); each with every severity."),
    ] = None,
    severity: Annotated[
        str | None,
        typer.Option(
            help="Straggler slowdown factors, e.g. 1,4 (the default; 1: none); each with "
            "every worker count."
        ),
    ] = None,
    probability: Annotated[
        float | None, typer.Option(help="Chance a worker straggles at a step (default 0.1).")
    ] = None,
    seeds: SeedsOption = None,
    target: Annotated[float, typer.Option(help="Test accuracy to reach, in (0, 1].")] = 0.9,
    staleness_bound: Annotated[
        int | None, typer.Option(help="SSP's bound on the iteration gap (default 2).")
    ] = None,
    sync_steps: Annotated[
        int | None, typer.Option(min=1, help="Steps of the synchronous runs (default 80).")
    ] = None,
    async_steps: Annotated[
        int | None, typer.Option(min=1, help="Updates of the asynchronous runs (default 700).")
    ] = None,
    compression: Annotated[
        str | None,
        typer.Option(
            help="Add compressed all-reduce variants (multi_worker_mirrored on the same "
            "hosts), e.g. fp16,powersgd:2,topk:0.01,topk:0.01:noef (default: none)."
        ),
    ] = None,
    local_sgd: Annotated[
        str | None,
        typer.Option(
            help="Add local SGD variants (local_sgd on the same hosts) syncing every H "
            "steps, e.g. 4,16 (default: none)."
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("reports/tradeoff"),
    set_: SetOption = None,
    processes: ProcessesOption = None,
    scheduler: SchedulerOption = None,
    quiet: QuietMessagesOption = False,
) -> None:
    """Time to a target accuracy = updates needed / update throughput, for sync, sync +
    backups, SSP and async, at every (workers, severity) pair, across seeds (default 3):
    tradeoff.png, tradeoff.md, tradeoff.csv, per_seed.csv.

    Runs the full grid: cells (worker counts x severities) x 4 strategies x seeds; the
    defaults make 3 x 2 x 4 x 3 = 72 runs. Time to target is interpolated linearly
    between the last evaluation below the target and the first at or above it. Work is
    counted in updates and in worker gradients (N - b per synchronous update with b
    backups, 1 per asynchronous one). Per cell it names the fastest strategy and says
    whose min-max band over seeds overlaps it (cannot be told apart).
    """
    from simdist.api import tradeoff as run_tradeoff

    on_run = _announcer(quiet)
    found = guarded(
        lambda: run_tradeoff(
            scenario,
            workers=_numbers(workers, "--workers", int),
            severities=_numbers(severity, "--severity", float),
            probability=probability,
            seeds=3 if seeds is None else _seeds_option(seeds),
            target=target,
            staleness_bound=staleness_bound,
            sync_steps=sync_steps,
            async_steps=async_steps,
            compression=tuple(compression.split(",")) if compression else (),
            local_sgd=_numbers(local_sgd, "--local-sgd", int) or (),
            overrides=set_ or (),
            out=out,
            processes=processes,
            scheduler=scheduler,
            on_run=on_run,
        )
    )
    if quiet:
        print_report_line(found.out_dir)
    else:
        _print_tradeoff(found, target)


def _print_tradeoff(found: Tradeoff, target: float) -> None:
    """The terminal output of ``tradeoff``: every cell's figures, then per cell the fastest
    strategy and whose band of time to target overlaps it."""
    from simdist.bands import reached_text
    from simdist.report.compare import band_text
    from simdist.report.tradeoff import separation_lines
    from simdist.units import format_duration

    title = f"simdist tradeoff · time to {target:g} (interpolated) · mean (min–max) over seeds"
    table = Table(title=title)
    columns = ("strategy", "workers", "slowdown", "time to target", "reached", "updates",
               "gradients")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("strategy", "reached") else "right")
    for row in found.summary.itertuples(index=False):
        table.add_row(
            str(row.strategy),
            str(row.workers),
            f"×{row.severity:g}",
            band_text(row, "time_to_target_s", format_duration, interval=False),
            reached_text(int(row.time_to_target_s_n), int(row.seeds)),
            band_text(row, "updates_to_target", "{:,.1f}".format, interval=False),
            band_text(row, "gradients_to_target", "{:,.0f}".format, interval=False),
        )
    print_table(table)
    for heading, items in separation_lines(found.separations()):
        console.print(heading, highlight=False, soft_wrap=True)
        for item in items:
            console.print(f"  · {item}", highlight=False, soft_wrap=True)
    console.print(
        f"report: {found.out_dir} · {found.out_dir / 'tradeoff.png'}",
        highlight=False,
        soft_wrap=True,
    )
