"""The ``simdist`` command line: run, validate, list, collectives.

Every user error (bad scenario, bad option) is printed as one message and
exits with status 2 — never a traceback, never a half-written report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simdist.errors import SimdistError

app = typer.Typer(
    name="simdist",
    help="Deterministic discrete-event simulator of distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario field: --set cluster.hosts=8 (repeatable)."),
]


def _fail(error: BaseException) -> None:
    err_console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except SimdistError as error:
        _fail(error)


def _load(scenario: Path, overrides: list[str] | None, seed: int | None) -> Any:
    from simdist.scenario import load_scenario

    return _guarded(lambda: load_scenario(scenario, overrides or (), seed=seed))


def _fmt(value: Any, fmt: str = "{:.4g}") -> str:
    return "—" if value is None else fmt.format(value)


def print_summary(summary: dict[str, Any], out_dir: Path | None) -> None:
    """The short terminal summary printed at the end of a run."""
    from simdist.units import format_duration

    table = Table(title=f"simdist · {summary['name']} · {summary['strategy']}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("simulated time", format_duration(summary["simulated_time_s"]))
    table.add_row("steps", str(summary["steps"]))
    table.add_row("examples/s (simulated)", _fmt(summary["examples_per_s"], "{:,.1f}"))
    if summary["numerics"]:
        table.add_row("final train loss", _fmt(summary["final_train_loss"]))
        table.add_row("final test accuracy", _fmt(summary["final_test_accuracy"], "{:.2%}"))
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
    console.print(table)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    out: Annotated[
        Path | None, typer.Option("--out", help="Report folder (default reports/<name>).")
    ] = None,
    set_: SetOption = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Override the scenario seed.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Simulate SCENARIO and write its report folder."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from simdist.engine import run as run_scenario
    from simdist.report import write_report

    loaded = _load(scenario, set_, seed)
    out_dir = out if out is not None else Path("reports") / loaded.name
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=quiet or not err_console.is_terminal,
    )
    with progress:
        task = progress.add_task(f"{loaded.name}: simulating", total=None)

        def on_step(step: int, total: int) -> None:
            progress.update(task, completed=step, total=total)

        result = _guarded(lambda: run_scenario(loaded, on_step=on_step))
        _guarded(lambda: write_report(result, out_dir))
    print_summary(result.summary, out_dir)


@app.command()
def validate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    set_: SetOption = None,
) -> None:
    """Check SCENARIO (and overrides) without running it."""
    loaded = _load(scenario, set_, None)
    console.print(
        f"[green]ok[/] {scenario}: {loaded.name} — {loaded.strategy.kind}, "
        f"{loaded.replicas} replica(s), global batch {loaded.global_batch}"
    )


@app.command("list")
def list_() -> None:
    """Show strategies, models, datasets, optimizers and device profiles."""
    from simdist.cluster import DEVICE_PROFILES
    from simdist.scenario import DATASETS, MODELS, OPTIMIZERS, SCHEDULES, STRATEGIES
    from simdist.strategies import STRATEGY_CLASSES

    table = Table(title="simdist building blocks", show_lines=False)
    table.add_column("kind", style="bold")
    table.add_column("names")
    implemented = [s for s in STRATEGIES if s in STRATEGY_CLASSES]
    table.add_row("strategies", ", ".join(implemented))
    planned = [s for s in STRATEGIES if s not in STRATEGY_CLASSES]
    if planned:
        table.add_row("strategies (schema only, not runnable yet)", ", ".join(planned))
    table.add_row("models", ", ".join(MODELS))
    table.add_row("datasets", ", ".join(DATASETS))
    table.add_row("optimizers", ", ".join(OPTIMIZERS))
    table.add_row("schedules", ", ".join(SCHEDULES))
    console.print(table)

    profiles = Table(title="device profiles")
    for column in ("profile", "kind", "peak FLOP/s", "efficiency", "source"):
        profiles.add_column(column)
    for p in DEVICE_PROFILES.values():
        profiles.add_row(p.name, p.kind, f"{p.peak_flops:.3g}", f"{p.efficiency:g}", p.source)
    console.print(profiles)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted: no report written")
        sys.exit(130)


if __name__ == "__main__":
    main()
