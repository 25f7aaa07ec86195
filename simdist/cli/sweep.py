"""``simdist sweep``: every point of a grid over a scenario as Dask tasks, merged into
sweep.csv, resumable."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from simdist.cli.common import (
    QuietOption,
    SchedulerOption,
    SetOption,
    command,
    console,
    err_console,
    guarded,
    print_report_line,
    print_table,
    progress_bar,
)

if TYPE_CHECKING:
    from simdist.sweep.grid import Sweep
    from simdist.sweep.runner import SweepResult


@command()
def sweep(
    file: Annotated[Path, typer.Argument(help="A sweep YAML file, or a scenario YAML file.")],
    grid: Annotated[
        list[str] | None,
        typer.Option(
            "--grid",
            help="A grid axis: path=v1,v2,... or path=a..b (whole numbers); repeatable.",
        ),
    ] = None,
    set_: SetOption = None,
    scheduler: SchedulerOption = None,
    processes: Annotated[
        int | None,
        typer.Option(min=1, help="Worker processes of the local Dask cluster (default: cores)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Sweep folder (default reports/<sweep>).")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(help="Summary figure to plot over the grid (default final_test_accuracy)."),
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Run every point of a grid over a scenario as Dask tasks; merge into sweep.csv.

    Finished points are stored and not recomputed when the same command runs
    again; a failing point is recorded with its error and the others go on
    (exit status 1 when any failed).
    """
    from simdist.sweep import load_sweep, prepare, run_sweep

    spec = guarded(
        lambda: load_sweep(
            file, grid or (), set_ or (), metric=metric, processes=processes, scheduler=scheduler
        )
    )
    guarded(lambda: prepare(spec))
    out_dir = out if out is not None else Path("reports") / spec.name
    progress = progress_bar(quiet)
    with progress:
        task = progress.add_task(f"{spec.name}: points", total=len(spec.points()))

        # A pipe gets no progress bar, so one line per finished point instead.
        lines = not quiet and not err_console.is_terminal

        def on_point(point: str, status: str, done: int, total: int) -> None:
            progress.update(task, completed=done, description=f"{spec.name}: {point} {status}")
            if lines:
                err_console.print(
                    f"{spec.name}: point {done} of {total}: {point} {status}",
                    highlight=False,
                    soft_wrap=True,
                )

        try:
            result = guarded(lambda: run_sweep(spec, out_dir, on_point=on_point))
        except KeyboardInterrupt:
            progress.stop()
            err_console.print(
                f"interrupted: finished points are stored in {out_dir / 'points'}; "
                "run the same command again to resume"
            )
            raise typer.Exit(130) from None

    if quiet:
        print_report_line(out_dir / "sweep.csv")
    else:
        _print_points(spec, result, out_dir)
    _notes(spec, result)


def _print_points(spec: Sweep, result: SweepResult, out_dir: Path) -> None:
    """The table of a sweep's first 20 points and the line counting what ran."""
    table = Table(title=f"simdist sweep · {spec.name} · {len(result.table)} points")
    for column in ("point", "status", spec.metric):
        table.add_column(column)
    for _, row in result.table.head(20).iterrows():
        value = row.get(spec.metric)
        if isinstance(value, int | float) and value == value:
            shown = f"{value:.4g}"
        else:
            shown = "—" if value is None or value != value else str(value)
        status = row["status"] if row["status"] == "ok" else f"[red]{row['status']}[/]"
        table.add_row(str(row["point"]), status, shown if row["status"] == "ok" else "")
    if len(result.table) > 20:
        table.add_row("…", "", "")
    print_table(table)
    console.print(
        f"{result.ran} run, {result.reused} reused from an earlier run, {result.failed} failed · "
        f"{out_dir / 'sweep.csv'} · {result.plot}",
        highlight=False,
        soft_wrap=True,
    )


def _notes(spec: Sweep, result: SweepResult) -> None:
    """A metric that is not a column, the first failed points; exit status 1 on a failure."""
    if spec.metric not in result.table.columns:
        err_console.print(
            f"[yellow]note:[/] --metric {spec.metric!r} is not a column of sweep.csv, so the "
            "plot is empty; columns include final_test_accuracy, examples_per_s, staleness.mean",
            highlight=False,
            soft_wrap=True,
        )
    for point, error in list(result.errors.items())[:5]:
        err_console.print(f"[red]failed[/] {point}: {error}", highlight=False, soft_wrap=True)
    if result.failed:
        raise typer.Exit(1)
