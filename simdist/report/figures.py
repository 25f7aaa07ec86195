"""What every report figure shares: how it is saved, its time axis' unit, an empty axes' note.

Used by each module that draws (plots, timeline, links, bands, jobs, tradeoff). It imports
no matplotlib itself (the figures passed in bring it), so importing it stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def save_figure(fig: Figure, path: Path) -> None:
    """Write ``fig`` as a PNG, laid out tightly unless it has a layout engine of its own.

    No timestamp in the PNG metadata, so identical runs write identical files.
    """
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})


def time_unit(span_s: float) -> tuple[float, str]:
    """``(factor, unit)`` so that ``seconds * factor`` reads well over ``span_s`` seconds:
    simulated runs span microseconds to hours."""
    if span_s >= 2 * 3600:
        return 1 / 3600, "h"
    if span_s >= 120:
        return 1 / 60, "min"
    if span_s >= 1:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def no_data(ax: Axes, message: str) -> None:
    """Say in the middle of ``ax`` why it is empty."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
