"""What every ``simdist`` command shares: the typer ``app`` the command modules register
on, the two consoles, the options and arguments several commands declare (``--set``,
``--quiet``, ``--scheduler``, the scenario path), the exit statuses, and the helpers that
turn a user error into one message and exit status 2 (never a traceback)."""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup

from simdist.errors import DeviceFallbackWarning, SimdistError

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

    from simdist.scenario.schema import Scenario

T = TypeVar("T")


def _named_values(params: list[Any], ctx: Any) -> list[Any]:
    """``params`` with each value named for ``--help``: an argument by its name in capitals
    and no type label, an option's value in capitals (``PATH``, ``INTEGER``) instead of
    typer's ``<path>``, and a flag (``--quiet``, ``--help``) with no value at all (typer
    printed ``<bool>``)."""
    for param in params:
        if param.metavar is not None:
            continue
        if isinstance(param, TyperArgument):  # typer adds the "..." of a list itself
            param.metavar = (param.name or "").upper()
            # The name column already says what the argument is; no <str> / <path> beside it.
            param.display_type_rich = _no_type_label
        elif getattr(param, "is_flag", False):
            param.metavar = ""
        else:
            param.metavar = _value_name(param.display_type(ctx))
    return params


class CleanHelpGroup(TyperGroup):
    """``simdist --help``: its ``--help`` flag without typer's ``<bool>``."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _named_values(super().get_params(ctx), ctx)


app = typer.Typer(
    name="simdist",
    cls=CleanHelpGroup,
    help="Deterministic discrete-event simulator of distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

#: Width of a table printed to a pipe or file: wide enough that no cell is cut short.
PIPED_WIDTH = 10_000


class CleanHelpCommand(TyperCommand):
    """A command whose ``--help`` reads as prose: each paragraph of the docstring is one
    flowing paragraph (typer keeps the docstring's line breaks, so sentences broke
    mid-phrase), values are named as :func:`_named_values` says, and the usage line names
    an argument plainly (``run [OPTIONS] SCENARIO``; typer wrote ``{SCENARIO}``)."""

    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        if help:
            paragraphs = inspect.cleandoc(help).split("\n\n")
            help = "\n\n".join(" ".join(p.split("\n")) for p in paragraphs)
        super().__init__(*args, help=help, **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _named_values(super().get_params(ctx), ctx)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        # typer 0.29 braces a required argument ({SCENARIO}); click's usage convention
        # writes it bare and brackets only what is optional.
        return [
            re.sub(r"^\{(.*)\}(\.\.\.)?$", r"\1\2", piece)
            for piece in super().collect_usage_pieces(ctx)
        ]


def _no_type_label(ctx: Any = None) -> None:
    """An argument's type column in ``--help``: empty."""
    return None


def _value_name(typer_label: str) -> str:
    """``<path>`` → PATH, ``<list[str]>`` → TEXT, ``<int range>`` → INTEGER: the value
    names click used before typer's bracketed type labels."""
    inner = typer_label.strip("<>").removeprefix("list[").rstrip("]").split()[0]
    return {"str": "TEXT", "int": "INTEGER"}.get(inner, inner.upper())


def command(name: str | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """``app.command``, with help rendered by :class:`CleanHelpCommand`."""
    return app.command(name, cls=CleanHelpCommand)


# Declared once, so that every command spells a shared option and its help alike.
ScenarioArgument = Annotated[Path, typer.Argument(help="Scenario YAML file.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario field: --set cluster.hosts=8 (repeatable)."),
]
#: --quiet of the commands that show :func:`progress_bar`.
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress and no summary table: only errors, warnings and "
        "the line naming the report folder.",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(help="Address of an existing Dask scheduler, e.g. tcp://host:8786."),
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


def guarded(fn: Callable[[], T]) -> T:
    """``fn()``, with a user error (a :class:`SimdistError`, or running out of memory)
    printed as one message and exit status 2 instead of a traceback."""
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


def preflighted(fn: Callable[[], T]) -> T:
    """``guarded(fn)`` for a call of :func:`~simdist.runtime.preflight.preflight`: the Python
    warning of a fallback to emulated CPU devices is held back, since preflight also returns it
    among its warnings, which the command prints once as a ``warning:`` line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeviceFallbackWarning)
        return guarded(fn)


def print_warnings(lines: Iterable[str]) -> None:
    """Each line as a yellow ``warning:`` on stderr."""
    for line in lines:
        err_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


def load_or_exit(scenario: Path, overrides: list[str] | None, seed: int | None) -> Scenario:
    """The scenario file with ``--set`` overrides and ``--seed``; exit 2 if it is bad."""
    from simdist.scenario import load_scenario

    return guarded(lambda: load_scenario(scenario, overrides or (), seed=seed))


def print_table(table: Table) -> None:
    """``table`` on stdout: fitted to the terminal, or whole when stdout is a pipe or a
    file, where a line may be as long as it needs: no cell cut short with "…" or folded,
    and the title and caption each on one line (rich folds them to the table's width)."""
    if console.is_terminal:
        console.print(table)
        return
    # Console.print caps a width= at the console's own, so a wide console instead
    wide = Console(file=console.file, width=PIPED_WIDTH, no_color=console.no_color)
    title, caption = table.title, table.caption
    table.title = table.caption = None
    try:
        for line, place in ((title, "title"), (table, "table"), (caption, "caption")):
            if line is not None and line != "":
                wide.print(line, highlight=False, soft_wrap=place != "table")
    finally:
        table.title, table.caption = title, caption


def print_report_line(where: object) -> None:
    """The one line every command that writes a report prints last, also under --quiet."""
    console.print(f"report: {escape(str(where))}", highlight=False, soft_wrap=True)


def progress_bar(quiet: bool) -> Progress:
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
