"""The ``simdist`` command line: run, validate, list, collectives, sweep, compare.

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
from simdist.units import UnitError, format_number

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


def _progress_bar(quiet: bool) -> Any:
    """A rich progress bar on stderr, off with --quiet or when stderr is not a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=quiet or not err_console.is_terminal,
    )


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
    from simdist.api import run as run_scenario

    loaded = _load(scenario, set_, seed)
    out_dir = out if out is not None else Path("reports") / loaded.name
    progress = _progress_bar(quiet)
    with progress:
        task = progress.add_task(f"{loaded.name}: simulating", total=None)

        def on_step(step: int, total: int) -> None:
            progress.update(task, completed=step, total=total)

        result = _guarded(lambda: run_scenario(loaded, out=out_dir, on_step=on_step))
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
    from simdist.catalog import DATASETS, MODELS, OPTIMIZERS, SCHEDULES
    from simdist.profiles import DEVICE_PROFILES
    from simdist.strategies import STRATEGIES

    table = Table(title="simdist building blocks", show_lines=False)
    table.add_column("kind", style="bold")
    table.add_column("names")
    table.add_row("strategies", ", ".join(STRATEGIES))
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


def _expand(text: str, parse: Callable[[str], float], option: str, example: str) -> list[float]:
    """Values of a comma list whose items may be ranges ``a..b``: a, 2a, 4a, … up to b.

    Ranges double, as nccl-tests' ``-b a -e b -f 2`` sweeps do: ``2..16`` is 2, 4, 8, 16
    and ``3..16`` is 3, 6, 12; the end is included only when the doubling lands on it.
    """
    values: list[float] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise SimdistError(f"{option}: empty entry in {text!r}; expected e.g. {example}")
        first, dots, last = item.partition("..")
        if not dots:
            values.append(parse(item))
            continue
        low, high = parse(first), parse(last)
        if not 0 < low <= high:
            raise SimdistError(
                f"{option}: range {item!r} must run from a positive value up to a larger one, "
                f"e.g. {example}"
            )
        while low <= high:
            values.append(low)
            low *= 2
    return values


def _participants(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise SimdistError(
            f"--n: got {text!r}; expected positive whole numbers of participants, "
            "e.g. --n 8, --n 2,4,8 or --n 2..16"
        )
    return n


def _quantity(parse: Callable[[object], float], option: str) -> Callable[[str], float]:
    def read(text: str) -> float:
        try:
            return parse(text)
        except UnitError as error:
            raise SimdistError(f"{option}: {error}") from None

    return read


@app.command()
def collectives(
    algo: Annotated[
        str,
        typer.Option(
            help="all, or a comma list of: ring, tree, halving_doubling, hierarchical, torus2d."
        ),
    ] = "all",
    n: Annotated[
        str, typer.Option("--n", help="Participants: 8, a list 2,4,8 or a doubling range 2..16.")
    ] = "8",
    size: Annotated[
        str, typer.Option(help="Buffer each participant reduces: 1GB, a list, or 1MB..1GB.")
    ] = "1GB",
    bandwidth: Annotated[
        str | None, typer.Option(help="Link bandwidth (default: the scenario network, 10Gbit/s).")
    ] = None,
    latency: Annotated[
        str | None, typer.Option(help="Link latency (default: the scenario network, 50us).")
    ] = None,
    devices_per_host: Annotated[
        int | None, typer.Option(help="Devices per host, for hierarchical (must divide n).")
    ] = None,
    intra_bandwidth: Annotated[
        str | None,
        typer.Option(help="Intra-host bandwidth, for hierarchical (default: 300GB/s)."),
    ] = None,
    intra_latency: Annotated[
        str | None, typer.Option(help="Intra-host latency, for hierarchical (default: 2us).")
    ] = None,
) -> None:
    """Print all-reduce time, algbw and busbw per algorithm (busbw as nccl-tests reports it)."""
    from simdist.collectives import ALGORITHMS, collectives_table
    from simdist.scenario import IntraHostLinkSpec, NetworkLinkSpec
    from simdist.units import (
        format_bandwidth,
        format_duration,
        format_size,
        parse_bandwidth,
        parse_duration,
        parse_size,
    )

    def table_rows() -> tuple[list[dict[str, Any]], str]:
        algos = list(ALGORITHMS) if algo.strip() == "all" else [a.strip() for a in algo.split(",")]
        for name in algos:
            if name not in ALGORITHMS:
                raise SimdistError(
                    f"--algo: got {name!r}; expected all or a comma list of {', '.join(ALGORITHMS)}"
                )
        ns = [int(v) for v in _expand(n, _participants, "--n", "--n 2..16")]
        sizes = _expand(size, _quantity(parse_size, "--size"), "--size", "--size 1MB..1GB")
        network, intra = NetworkLinkSpec(), IntraHostLinkSpec()

        def link(text: str | None, parse: Callable[[object], float], option: str, default: float):
            return default if text is None else _quantity(parse, option)(text)

        bw = link(bandwidth, parse_bandwidth, "--bandwidth", network.bandwidth_Bps)
        lat = link(latency, parse_duration, "--latency", network.latency_s)
        intra_bw = link(intra_bandwidth, parse_bandwidth, "--intra-bandwidth", intra.bandwidth_Bps)
        intra_lat = link(intra_latency, parse_duration, "--intra-latency", intra.latency_s)
        for option, value in (("--bandwidth", bw), ("--intra-bandwidth", intra_bw)):
            if not value > 0:
                raise SimdistError(f"{option}: expected a bandwidth above 0, e.g. 100GB/s")
        if devices_per_host is not None and devices_per_host < 1:
            raise SimdistError(f"--devices-per-host: got {devices_per_host}; expected >= 1")
        rows = collectives_table(
            algos,
            ns,
            sizes,
            bw,
            lat,
            devices_per_host,
            intra_bandwidth_Bps=intra_bw,
            intra_latency_s=intra_lat,
        )
        title = f"all-reduce · link {format_bandwidth(bw)}, latency {format_duration(lat)}"
        if devices_per_host is not None and "hierarchical" in algos:
            title += f" · intra-host {format_bandwidth(intra_bw)}, {format_duration(intra_lat)}"
        return rows, title

    rows, title = _guarded(table_rows)
    table = Table(title=title, caption="busbw = algbw × 2(n−1)/n (nccl-tests, PERFORMANCE.md)")
    for column in ("size", "n", "algorithm", "time", "algbw", "busbw", "note"):
        table.add_column(
            column,
            justify="right" if column in ("n", "time") else "left",
            no_wrap=column != "note",
        )
    for row in rows:
        timed = row["time_s"] is not None
        table.add_row(
            format_size(row["nbytes"]),
            str(row["n"]),
            row["algo"],
            format_duration(row["time_s"]) if timed else "—",
            format_bandwidth(row["algbw_Bps"]) if timed else "—",
            format_bandwidth(row["busbw_Bps"]) if timed else "—",
            row["note"],
        )
    console.print(table)


@app.command()
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
    scheduler: Annotated[
        str | None,
        typer.Option(help="Address of an existing Dask scheduler, e.g. tcp://host:8786."),
    ] = None,
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
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run every point of a grid over a scenario as Dask tasks; merge into sweep.csv.

    Finished points are stored and not recomputed when the same command runs
    again; a failing point is recorded with its error and the others go on
    (exit status 1 when any failed).
    """
    from simdist.sweep import load_sweep, prepare, run_sweep

    spec = _guarded(
        lambda: load_sweep(
            file, grid or (), set_ or (), metric=metric, processes=processes, scheduler=scheduler
        )
    )
    _guarded(lambda: prepare(spec))
    out_dir = out if out is not None else Path("reports") / spec.name
    progress = _progress_bar(quiet)
    with progress:
        task = progress.add_task(f"{spec.name}: points", total=len(spec.points()))

        def on_point(point: str, status: str, done: int, total: int) -> None:
            progress.update(task, completed=done, description=f"{spec.name}: {point} {status}")

        try:
            result = _guarded(lambda: run_sweep(spec, out_dir, on_point=on_point))
        except KeyboardInterrupt:
            progress.stop()
            err_console.print(
                f"interrupted: finished points are stored in {out_dir / 'points'}; "
                "run the same command again to resume"
            )
            raise typer.Exit(130) from None

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
    console.print(table)
    console.print(
        f"{result.ran} run, {result.reused} reused from an earlier run, {result.failed} failed · "
        f"{out_dir / 'sweep.csv'} · {result.plot}",
        highlight=False,
    )
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


@app.command()
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
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
) -> None:
    """Run or load several scenarios and write one comparison report (compare.csv, .md, plot)."""
    import math

    from simdist.api import compare as compare_runs
    from simdist.units import format_duration

    def on_run(name: str) -> None:
        if not quiet:
            err_console.print(f"simulating {name} …", highlight=False)

    out_dir, rows = _guarded(
        lambda: compare_runs(inputs, out=out, target=target, overrides=set_ or (), on_run=on_run)
    )
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
    console.print(table)
    console.print(f"report: {out_dir}", highlight=False)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted: no report written")
        sys.exit(130)


if __name__ == "__main__":
    main()
