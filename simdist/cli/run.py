"""``simdist run`` and ``simdist validate``: simulate a scenario and write its report
folder, or check it without running; the terminal summary of a run (and of a jobs: run)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from simdist.cli.common import (
    EXIT_DIVERGED,
    QuietOption,
    ScenarioArgument,
    SetOption,
    command,
    console,
    err_console,
    guarded,
    load_or_exit,
    preflighted,
    print_report_line,
    print_table,
    print_warnings,
    progress_bar,
)
from simdist.runtime.interrupts import Progress, interruptible
from simdist.units import format_number

if TYPE_CHECKING:
    from simdist.runtime.jobs import JobsResult


#: What ``run`` says before the first step, and after the last one.
PREPARING = "preparing (building, compiling JAX)"
FINISHING = "all steps simulated; finishing the numerics and writing the report"
WRITING = "all steps simulated; writing the report"


class PlainProgress:
    """``run``'s progress as plain lines on stderr, for a pipe or a log file: each phase
    once, and the step reached at every tenth of the steps."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.said_tenth = 0

    def say(self, what: str) -> None:
        err_console.print(f"{self.name}: {what}", highlight=False, soft_wrap=True)

    def step(self, step: int, total: int, doing: str) -> None:
        tenth = 10 * step // total if total else 10
        if tenth > self.said_tenth:
            self.said_tenth = tenth
            self.say(f"step {step:,} of {total:,}")
            if step >= total:
                self.say(doing)


def print_summary(summary: dict[str, Any], out_dir: Path | None) -> None:
    """The short terminal summary printed at the end of a run."""
    from simdist.units import format_duration

    table = Table(title=f"simdist · {summary['name']} · {summary['strategy']}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("simulated time", format_duration(summary["simulated_time_s"]))
    table.add_row("steps", str(summary["steps"]))
    table.add_row("examples/s (simulated)", format_number(summary["examples_per_s"], "{:,.1f}"))
    if summary["numerics"]:
        table.add_row("final train loss", format_number(summary["final_train_loss"]))
        table.add_row(
            "final test accuracy", format_number(summary["final_test_accuracy"], "{:.2%}")
        )
    else:
        table.add_row("numerics", "off (timing-only run: no loss or accuracy computed)")
    split = summary["time_split"]
    table.add_row(
        "time split",
        f"compute {split['compute']:.1%} · communication {split['comm']:.1%} · "
        f"idle {split['idle']:.1%}",
    )
    if summary.get("diverged"):
        table.add_row("[red]diverged[/]", f"loss not finite at step {summary['diverged_at_step']}")
    if out_dir is not None:
        table.add_row("report", str(out_dir))
    print_table(table)


@command()
def run(
    scenario: ScenarioArgument,
    out: Annotated[
        Path | None, typer.Option("--out", help="Report folder (default reports/<name>).")
    ] = None,
    set_: SetOption = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Override the scenario seed.")] = None,
    quiet: QuietOption = False,
) -> None:
    """Simulate SCENARIO and write its report folder.

    Exit status 0, 2 for bad input, 3 when the run diverged (the report is written),
    130 / 143 / 129 when SIGINT / SIGTERM / SIGHUP stopped it (no report).
    """
    from simdist.api import preflight, warnings_after
    from simdist.api import run as run_scenario
    from simdist.report.painter import painting

    loaded = load_or_exit(scenario, set_, seed)
    out_dir = out if out is not None else Path("reports") / loaded.name
    source = str(scenario)
    where = Progress()
    bar = progress_bar(quiet)
    # The painter is forked first: before JAX, the progress bar's thread and the watchdog.
    with painting(), interruptible(where, out_dir):
        checked = preflighted(lambda: preflight(loaded, out=out_dir, source=source))
        print_warnings(checked.warnings)
        where.total = checked.total_steps
        # A pipe or a log file gets no progress bar, so plain lines instead: what the bar
        # says, and the step reached every tenth of the run.
        lines = PlainProgress(loaded.name) if not quiet and not err_console.is_terminal else None
        with bar:
            # Until the first step ends, JAX compiles the step functions (seconds): say so,
            # rather than a step counter standing at 0.
            preparing = f"{loaded.name}: {PREPARING}"
            task = bar.add_task(preparing, total=None)
            if lines is not None:
                lines.say(PREPARING)
            finishing = FINISHING if loaded.numerics else WRITING

            def on_step(step: int, total: int) -> None:
                where.step_done(step, total)
                # After the last step the numerics may still be replayed (asynchronous
                # parameter servers) and the report is written: the bar says so.
                doing = "simulating" if step < total else finishing
                bar.update(task, completed=step, total=total, description=f"{loaded.name}: {doing}")
                if lines is not None:
                    lines.step(step, total, doing)

            def on_time(now_s: float) -> None:
                where.now_s = now_s

            result = guarded(
                lambda: run_scenario(
                    loaded, out=out_dir, on_step=on_step, on_time=on_time, source=source
                )
            )
    if loaded.jobs is not None:
        _finish_jobs(result, out_dir, source, quiet)
        return
    if quiet:
        print_report_line(out_dir)
    else:
        print_summary(result.summary, out_dir)
    print_warnings(warnings_after(result, source))
    if result.summary.get("diverged"):
        err_console.print(
            f"[bold red]diverged:[/] the loss was not finite at step "
            f"{result.summary['diverged_at_step']}; report written to {escape(str(out_dir))} "
            f"(exit status {EXIT_DIVERGED})",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_DIVERGED)


def _finish_jobs(result: JobsResult, out_dir: Path, source: str, quiet: bool) -> None:
    """The end of ``simdist run`` for a scenario with jobs: the interference table (not
    under --quiet), each job's warnings, and exit status 3 when a job diverged."""
    if quiet:
        print_report_line(out_dir)
    else:
        _print_interference(result, out_dir)
    _jobs_warnings(result, out_dir, source)


def _print_interference(result: JobsResult, out_dir: Path) -> None:
    """The table of a jobs: run: each job's speed alone and together."""
    from simdist.units import format_duration

    table = Table(title=f"simdist · {result.scenario.name} · {len(result.jobs)} jobs")
    for column in ("job", "strategy", "time together", "examples/s alone", "together", "slowdown"):
        table.add_column(column)
    for row in result.interference.itertuples(index=False):
        alone, together, slowdown = (
            None if v != v else v  # NaN: not measured
            for v in (row.examples_per_s_alone, row.examples_per_s_together, row.slowdown)
        )
        table.add_row(
            row.job,
            row.strategy,
            format_duration(row.time_together_s),
            format_number(alone, "{:,.1f}"),
            format_number(together, "{:,.1f}"),
            format_number(slowdown, "×{:.3f}"),
        )
    print_table(table)
    console.print(
        f"report: {escape(str(out_dir))} (one folder per job)", highlight=False, soft_wrap=True
    )


def _jobs_warnings(result: JobsResult, out_dir: Path, source: str) -> None:
    """Each job's warnings; exit status 3 when a job diverged."""
    from simdist.api import warnings_after

    diverged = []
    for i, (name, job) in enumerate(result.jobs.items()):
        print_warnings(warnings_after(job, f"{source}: jobs[{i}]"))
        if job.summary.get("diverged"):
            diverged.append(f"{name} at step {job.summary['diverged_at_step']}")
    if diverged:
        err_console.print(
            f"[bold red]diverged:[/] the loss was not finite in job {', '.join(diverged)}; "
            f"report written to {escape(str(out_dir))} (exit status {EXIT_DIVERGED})",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_DIVERGED)


@command()
def validate(
    scenario: ScenarioArgument,
    set_: SetOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Report folder run would write (default reports/<name>)."),
    ] = None,
) -> None:
    """Check SCENARIO (and overrides) without running it.

    Catches what run would hit before its first step: the scenario, its data files, a
    global batch larger than the training set, a model too large for the memory, an
    --out that cannot be written; warns about a run that would take hours.
    """
    from simdist.api import preflight

    loaded = load_or_exit(scenario, set_, None)
    out_dir = out if out is not None else Path("reports") / loaded.name
    checked = preflighted(lambda: preflight(loaded, out=out_dir, source=str(scenario), data=True))
    print_warnings(checked.warnings)
    if loaded.jobs is not None:
        jobs = "; ".join(
            f"{job.name}: {job.strategy.kind} on {len(job.hosts)} host(s), "
            f"{js.replicas} replica(s), global batch {js.global_batch}"
            for job, js in zip(loaded.jobs, loaded.job_scenarios, strict=True)
        )
        console.print(
            f"[green]ok[/] {scenario}: {loaded.name} — {len(loaded.jobs)} jobs ({jobs})",
            soft_wrap=True,
        )
        return
    console.print(
        f"[green]ok[/] {scenario}: {loaded.name} — {loaded.strategy.kind}, "
        f"{loaded.replicas} replica(s), global batch {loaded.global_batch}",
        soft_wrap=True,
    )
