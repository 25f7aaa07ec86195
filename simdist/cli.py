"""The ``simdist`` command line: run, validate, list, profile, collectives, sweep, compare.

Every user error (bad scenario, bad option) is printed as one message and
exits with status 2 — never a traceback, never a half-written report.

Exit status: 0 done, 2 bad input (nothing written), 3 the run diverged (its report is
written), 128 + the signal for a run stopped by SIGINT (130), SIGTERM (143) or SIGHUP
(129), which writes no report and leaves no temporary folder.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simdist.errors import SimdistError
from simdist.interrupts import Progress, interruptible
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


EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3


def _fail(error: BaseException) -> None:
    # escape: a message quoting a value such as [a] must not be read as rich markup
    err_console.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _out_of_memory(error: BaseException) -> bool:
    """A MemoryError (numpy's too), or XLA failing to allocate (RESOURCE_EXHAUSTED)."""
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and "RESOURCE_EXHAUSTED" in str(error)
    )


def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except SimdistError as error:
        _fail(error)
    except (MemoryError, RuntimeError) as error:
        if not _out_of_memory(error):
            raise
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        _fail(
            SimdistError(
                f"out of memory ({detail[:200]}); the scenario's model, data set or cluster "
                "is too large for this machine: make it smaller"
            )
        )


def _warn(lines: Any) -> None:
    for line in lines:
        err_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


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
    """Simulate SCENARIO and write its report folder.

    Exit status 0, 2 for bad input, 3 when the run diverged (the report is written),
    130 / 143 / 129 when SIGINT / SIGTERM / SIGHUP stopped it (no report).
    """
    from simdist.api import preflight, warnings_after
    from simdist.api import run as run_scenario

    loaded = _load(scenario, set_, seed)
    out_dir = out if out is not None else Path("reports") / loaded.name
    source = str(scenario)
    where = Progress()
    bar = _progress_bar(quiet)
    with interruptible(where, out_dir):
        checked = _guarded(lambda: preflight(loaded, out=out_dir, source=source))
        _warn(checked.warnings)
        where.total = checked.total_steps
        with bar:
            task = bar.add_task(f"{loaded.name}: simulating", total=None)

            def on_step(step: int, total: int) -> None:
                where.step_done(step, total)
                bar.update(task, completed=step, total=total)

            def on_time(now_s: float) -> None:
                where.now_s = now_s

            result = _guarded(
                lambda: run_scenario(
                    loaded, out=out_dir, on_step=on_step, on_time=on_time, source=source
                )
            )
    print_summary(result.summary, out_dir)
    _warn(warnings_after(result, source))
    if result.summary.get("diverged"):
        err_console.print(
            f"[bold red]diverged:[/] the loss was not finite at step "
            f"{result.summary['diverged_at_step']}; report written to {escape(str(out_dir))} "
            f"(exit status {EXIT_DIVERGED})",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_DIVERGED)


@app.command()
def validate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
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

    loaded = _load(scenario, set_, None)
    out_dir = out if out is not None else Path("reports") / loaded.name
    checked = _guarded(lambda: preflight(loaded, out=out_dir, source=str(scenario), data=True))
    _warn(checked.warnings)
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

    profiles = Table(title="device profiles (peak × measured efficiency; * the default)")
    for column in ("profile", "kind", "precisions: TFLOP/s × efficiency", "memory", "launch"):
        profiles.add_column(column)
    for p in DEVICE_PROFILES.values():
        peaks = ", ".join(
            f"{k.precision}{'*' if k.precision == p.precision else ''} "
            f"{k.flops / 1e12:.4g} × {k.efficiency:.3g}"
            for k in p.peaks
        )
        memory = (
            f"{p.memory_nbytes / 1e9:.3g} GB, "
            f"{p.memory_bandwidth_Bps / 1e9:.4g} GB/s × {p.memory_efficiency:.3g}"
        )
        profiles.add_row(p.name, p.kind, peaks, memory, f"{p.launch_s * 1e6:g} us")
    console.print(profiles)
    console.print("sources: simdist/profiles.py and README.md, Device profiles")
    console.print(_models_table())


def _models_table() -> Table:
    """Each model's input, parameter count and forward GFLOPs per example (profiled once at
    batch 1, then read from the disk cache)."""
    from simdist.catalog import FULLSIZE_MODELS, MODELS
    from simdist.layers import format_shape
    from simdist.numerics.profile import cache_dir, profile_model

    table = Table(
        title="models",
        caption=f"XLA cost analysis, batch 1 (zoo: digits-sized input); cached in {cache_dir()}",
    )
    for column in ("model", "kind", "input", "layers", "parameters", "GFLOPs / example"):
        table.add_column(column, justify="left" if column in ("model", "kind") else "right")
    with err_console.status("profiling models (once: cached afterwards) …"):
        for name in MODELS:
            p = _guarded(lambda name=name: profile_model(name, 1))
            table.add_row(
                name,
                "full-size" if name in FULLSIZE_MODELS else "zoo",
                format_shape(p.input_shape),
                str(len(p.layers)),
                f"{p.param_count:,}",
                f"{p.forward_flops / 1e9:.4g}",
            )
    return table


@app.command("profile")
def profile_(
    model: Annotated[
        str, typer.Argument(help="A model name (see simdist list), or a layers.csv / ASTRA file.")
    ],
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per batch.")] = 32,
    input_shape: Annotated[
        str | None,
        typer.Option(help="One example: 224x224x3 (images) or 128 (tokens); default the model's."),
    ] = None,
    n_outputs: Annotated[
        int | None, typer.Option(min=1, help="Classifier outputs (default 1000; zoo: 10).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the table to this file.")] = None,
    format_: Annotated[
        str, typer.Option("--format", help="File format of --out: csv (layers.csv) or astra.")
    ] = "csv",
    device: Annotated[
        str, typer.Option(help="Device whose roofline times an ASTRA-sim file gets.")
    ] = "v100",
    precision: Annotated[
        str | None, typer.Option(help="Precision for those times (default: the device's).")
    ] = None,
) -> None:
    """Print a model's per-layer FLOPs, bytes and gradient sizes; write layers.csv or ASTRA-sim."""
    from simdist.layers import parse_shape, read_profile, write_astra, write_layers_csv

    def load() -> Any:
        if format_ not in ("csv", "astra"):
            raise SimdistError(f"--format: got {format_!r}; expected csv or astra")
        if Path(model).is_file():
            return read_profile(model)
        from simdist.numerics.profile import profile_model

        shape = None if input_shape is None else parse_shape(input_shape)
        with err_console.status(f"profiling {model} at batch {batch_size} …"):
            return profile_model(model, batch_size, shape, n_outputs)

    profile = _guarded(load)
    console.print(_profile_table(profile))
    if out is None:
        return
    if format_ == "csv":
        _guarded(lambda: write_layers_csv(profile, out))
    else:

        def astra() -> None:
            from simdist.profiles import DEVICE_PROFILES
            from simdist.roofline import layer_times

            if device not in DEVICE_PROFILES:
                raise SimdistError(
                    f"--device: got {device!r}; expected one of {', '.join(DEVICE_PROFILES)}"
                )
            spec = DEVICE_PROFILES[device]
            times = layer_times(profile, spec, precision or spec.precision)
            write_astra(profile, out, times)

        _guarded(astra)
    console.print(f"wrote {out}", highlight=False)


def _profile_table(profile: Any) -> Table:
    """The per-layer table of a :class:`~simdist.layers.ModelProfile`, with a total row."""
    from simdist.layers import format_shape

    shape = format_shape(profile.input_shape) or "?"
    batch = profile.batch_size or "?"
    table = Table(
        title=f"{profile.model} · {len(profile.layers)} layers · batch {batch} · input {shape}",
        caption=f"{profile.source}; whole batch; backward = input + weight gradient; "
        "MB = 1e6 bytes; grad = the layer's parameters",
    )
    timed = profile.has_times
    # A profile of times only (an ASTRA-sim file) has no FLOPs or bytes to show.
    costed = any(x.forward_flops or x.backward_flops for x in profile.layers)
    columns = ["layer"]
    columns += ["fwd GFLOP", "bwd GFLOP", "fwd MB", "bwd MB", "out MB"] if costed else []
    columns += ["grad MB"] + (["fwd ms", "bwd ms"] if timed else [])
    for column in columns:
        table.add_column(column, justify="left" if column == "layer" else "right")

    def number(value: float) -> str:
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"

    def row(name: str, layers: Any) -> list[str]:
        def total(attr: str, scale: float) -> str:
            return number(sum(getattr(x, attr) for x in layers) / scale)

        cells = [name]
        if costed:
            cells += [total("forward_flops", 1e9), total("backward_flops", 1e9)]
            cells += [total(a, 1e6) for a in ("forward_bytes", "backward_bytes", "output_nbytes")]
        cells.append(total("param_nbytes", 1e6))
        if timed:
            cells += [total("forward_s", 1e-3), total("backward_s", 1e-3)]
        return cells

    for layer in profile.layers:
        table.add_row(*row(layer.name, [layer]))
    table.add_section()
    table.add_row(*row("total", profile.layers), style="bold")
    return table


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


@app.command()
def cache(
    action: Annotated[
        str,
        typer.Argument(help="'info': where the caches are and their size; 'clear': empty them."),
    ] = "info",
) -> None:
    """The per-user caches: compiled XLA programs (SIMDIST_COMPILATION_CACHE=0 turns that one
    off), model profiles and sizes. 'simdist cache clear' deletes them all."""
    from simdist import compile_cache

    folder = compile_cache.cache_dir()
    names = ("xla", "profiles", "models")
    if action == "clear":
        freed = 0
        for name in names:
            freed += compile_cache.clear(folder / name)
        console.print(f"cleared {folder} ({freed / 1e6:.1f} MB)", highlight=False)
        return
    if action != "info":
        err_console.print(f"[red]error:[/] unknown action {action!r}; use 'info' or 'clear'")
        raise typer.Exit(2)
    state = "on" if compile_cache.enabled() else f"off ({compile_cache.ENABLE_ENV}=0)"
    console.print(f"compilation cache: {state}", highlight=False)
    for name in names:
        path = folder / name
        size = compile_cache.folder_nbytes(path)
        console.print(f"{path}: {size / 1e6:.1f} MB", highlight=False)


def _fast_exit(code: Any) -> None:
    """End the process at once once JAX is loaded, skipping the interpreter's teardown.

    Tearing down JAX, XLA, pandas and matplotlib at exit took about 0.5 s of a 3.5 s run
    (issue 15). By the time the command returns, every file is written and closed (report
    folders are renamed into place; JAX writes compiled programs as it compiles), so only
    the output streams and logging need flushing. Not with Dask loaded (a sweep's worker
    processes are shut down by their own handlers) or with ``SIMDIST_FAST_EXIT=0``.
    """
    if "jax" not in sys.modules or "distributed" in sys.modules:
        return
    if os.environ.get("SIMDIST_FAST_EXIT", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    import logging

    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message") prints the message and exits 1
        print(code, file=sys.stderr, flush=True)
        status = 1
    os._exit(status)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted: no report written")
        sys.exit(130)
    except SystemExit as exc:
        _fast_exit(exc.code)
        raise


if __name__ == "__main__":
    main()
