"""``simdist goodput``: days to months of training at the level of failures, checkpoints
and restarts, from a scenario's ``goodput:`` section (:mod:`simdist.goodput`).

A command of its own rather than part of ``simdist run``: a run simulates steps and writes
their report; a goodput study first runs a few of those steps to time them, then thousands
of horizons (seeds × intervals × cluster sizes), and writes other files. Mixing the two
would make every ``simdist run`` of a scenario with the section pay for the study.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from simdist.cli.common import (
    QuietOption,
    ScenarioArgument,
    SetOption,
    command,
    err_console,
    guarded,
    print_report_line,
    print_table,
)

if TYPE_CHECKING:
    from simdist.goodput.run import Goodput


@command()
def goodput(
    scenario: ScenarioArgument,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Report folder (default reports/goodput_<name>)."),
    ] = None,
    set_: SetOption = None,
    quiet: QuietOption = False,
) -> None:
    """Goodput over a long horizon: time the step on the scenario (engine), then simulate
    days to months of failures, checkpoints and restarts over seeds; goodput against the
    checkpoint interval (Young/Daly marked) and against cluster size; restart vs elastic.
    """
    from simdist.goodput.run import goodput as study_goodput
    from simdist.scenario import load_scenario

    resolved = guarded(lambda: load_scenario(scenario, set_ or ()))
    folder = out if out is not None else Path("reports") / f"goodput_{resolved.name}"

    def say(what: str) -> None:
        if not quiet:
            err_console.print(f"{resolved.name}: {what}", highlight=False, soft_wrap=True)

    found = guarded(lambda: study_goodput(resolved, out=folder, source=str(scenario), on_phase=say))
    if quiet:
        print_report_line(found.out_dir)
        return
    _print_summary(found)
    print_report_line(found.out_dir)


def _print_summary(found: Goodput) -> None:
    from simdist.units import format_duration

    s = found.summary
    table = Table(title=f"simdist goodput · {found.name} · {s['horizon_s'] / 86400:g} days",
                  show_header=False)  # fmt: skip
    table.add_column(style="bold")
    table.add_column()
    table.add_row("job", f"{s['gpus']:,} GPUs, {s['replicas']:,} data-parallel copies")
    table.add_row("step (engine)", format_duration(s["step_s"]))
    table.add_row(
        "checkpoint",
        f"every {s['every_steps']:,} steps ({format_duration(s['interval_s'])}), "
        f"{s['checkpoint_mode']}, blocks {format_duration(s['checkpoint_blocking_s'])}",
    )
    table.add_row(
        "goodput",
        f"{s['goodput_mean']:.2%} ({s['goodput_min']:.2%} – {s['goodput_max']:.2%}) "
        f"over {s['seeds']} seeds",
    )
    table.add_row("effective training time", f"{s['ettr_mean']:.2%}")
    table.add_row(
        "interruptions",
        f"{s['interruptions_mean']:.1f} ({s['interruptions_min']:.0f} – "
        f"{s['interruptions_max']:.0f}); M = {format_duration(s['mtbf_s'])}",
    )
    table.add_row(
        "optimum interval",
        f"Young {format_duration(s['young_interval_s'])}, Daly "
        f"{format_duration(s['daly_interval_s'])}, simulated "
        f"{format_duration(s['simulated_optimum_interval_s'])}",
    )
    table.add_row(
        "restart vs elastic",
        f"{s['goodput_restart_mean']:.2%} vs {s['goodput_elastic_mean']:.2%}",
    )
    print_table(table)
