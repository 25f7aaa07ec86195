"""Figures a run asks for in its summary: line plots of its own extra tables.

A strategy that records a table of its own (``recorder.row``; written as ``<table>.csv``)
can have it drawn without the report knowing the strategy: its ``summary()`` lists
figures under :data:`FIGURES_KEY`, each ``{"file", "title", "caption", "panels"}``, and each
panel ``{"table", "x", "y", "ylabel"}`` with ``y`` a list of columns (one line each), or a
column with ``"series"`` naming the column whose values make one line each (e.g. the
tokens of each expert). :func:`figure_jobs` turns them into the report's plot jobs;
report.md captions them from the same entries (:func:`captions`).

Likewise :data:`NUMBERS_KEY` lists ``[label, summary key, format]`` rows that report.md adds
to its key numbers (:func:`key_number_rows`; the key may be a dotted path, the format
``size`` or ``duration``), and :data:`NOTES_KEY` says what each of the
run's own tables holds (``{"moe_steps.csv": "..."}``) for report.md's list of files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: summary.json's list of the figures a run asks for.
FIGURES_KEY = "table_figures"
#: summary.json's list of the key numbers a run adds to report.md.
NUMBERS_KEY = "key_numbers"
#: summary.json's notes on the run's own tables, by file name.
NOTES_KEY = "table_notes"


def figure_jobs(
    summary: Mapping[str, Any], tables: Mapping[str, Any], name: str, out: Path
) -> list[tuple[str, Callable[[], None]]]:
    """``(file name, draw)`` for each figure of ``summary`` whose tables the run has."""
    jobs = []
    for spec in summary.get(FIGURES_KEY) or []:
        if all(panel["table"] in tables for panel in spec["panels"]):
            path = out / spec["file"]
            jobs.append(
                (spec["file"], lambda s=spec, p=path: plot_table_figure(s, tables, name, p))
            )
    return jobs


def plot_table_figure(
    spec: Mapping[str, Any], tables: Mapping[str, Any], name: str, path: Path
) -> None:
    """One figure: its panels side by side, each a line per column or per series."""
    from matplotlib.figure import Figure

    from simdist.report.figures import save_figure

    panels = spec["panels"]
    fig = Figure(figsize=(4.5 * len(panels) + 1, 4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        frame = tables[panel["table"]]
        x = panel["x"]
        if "series" in panel:
            wide = frame.pivot_table(index=x, columns=panel["series"], values=panel["y"])
            for column in wide.columns:
                ax.plot(wide.index, wide[column], lw=1, label=f"{panel['series']} {column}")
        else:
            for column in panel["y"]:
                ax.plot(frame[x], frame[column], lw=1.2, label=column)
        ax.set_xlabel(x)
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    fig.suptitle(f"{name}: {spec['title']}")
    save_figure(fig, path)


def captions(summary: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """report.md's heading and caption of each figure of ``summary``, by file name."""
    return {s["file"]: (s["title"], s.get("caption", "")) for s in summary.get(FIGURES_KEY) or []}


def key_number_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows of :data:`NUMBERS_KEY`, each value formatted as it says: a
    ``str.format`` pattern, or ``size`` (bytes) or ``duration`` (seconds) written as
    :mod:`simdist.units` writes them; the key a summary key, or a dotted path into one
    (``context.kv_block_nbytes``)."""
    from simdist.units import format_duration, format_size

    forms: dict[str, Callable[[Any], str]] = {"size": format_size, "duration": format_duration}
    rows = []
    for label, key, form in summary.get(NUMBERS_KEY) or []:
        value: Any = summary
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        shown = forms[form](value) if form in forms else form.format(value)
        rows.append((label, "n/a" if value is None else shown))
    return rows


def table_notes(summary: Mapping[str, Any]) -> dict[str, str]:
    """What each of the run's own tables holds, by file name (:data:`NOTES_KEY`)."""
    return dict(summary.get(NOTES_KEY) or {})
