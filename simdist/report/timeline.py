"""Where each device's time goes: ``timeline.png`` (a Gantt chart of the first steps) and
``time_split.png`` (each device's share of computing, communicating, waiting and idling).

Drawn from the run's ``events`` table only, like every plot (:mod:`simdist.report.plots`,
whose :func:`~simdist.report.plots.write_plots` writes both files). The timeline draws one
row per device or parameter-server task (:func:`simdist.report.tracks.device_tracks`):
spans that overlap on one device (a transfer beside the compute it overlaps, a worker
pulling from two parameter servers at once) share that row, side by side in thinner
sub-lanes, and where communication overlaps compute it runs as a thin band under it.
:func:`timeline_layout` returns what is drawn, so that it can be checked without pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from simdist.report.figures import no_data, save_figure, time_unit
from simdist.report.tracks import OVERLAP_TOL_S, Track, assign_lanes, device_tracks
from simdist.summary import (
    SPLIT_CATEGORIES,
    natural_key,
    split_category,
    time_split_by_device,
    training_devices,
)

if TYPE_CHECKING:
    from matplotlib.legend import Legend

    from simdist.scenario.schema import Scenario

#: Colours of event kinds; unknown kinds get :data:`_SPARE_COLORS` in sorted order.
KIND_COLORS = {
    "compute": "#1f77b4",
    "backward": "#08306b",
    "straggle": "#6baed6",
    "comm": "#ff7f0e",
    "idle": "#737373",
    "input_wait": "#e377c2",
    "eval": "#2ca02c",
    "apply": "#9467bd",
    "checkpoint": "#8c564b",
    "failure": "#d62728",
    "restart": "#bcbd22",
    "restore": "#c49c94",
}
_SPARE_COLORS = ("#17becf", "#f7b6d2", "#aec7e8", "#98df8a", "#c5b0d5", "#dbdb8d")
#: The timeline legend's name of each event kind, in legend order; other kinds follow
#: under their own name, in sorted order. ``idle`` rows are recorded waits (barriers,
#: staleness bounds, waiting for variables), not time without events: dark grey here and in
#: time_split.png, where time without events is white, as it is here. ``backward`` is not
#: an event kind: it is a ``compute`` span of a backward pass (:data:`BACKWARD_DETAIL`),
#: drawn darker so that a pipeline's forwards and backwards can be told apart.
KIND_LABELS = {
    "compute": "compute",
    "backward": "compute: backward",
    "straggle": "straggle (slow excess)",
    "comm": "communication",
    "idle": "waiting (barrier, bound, variables)",
    "input_wait": "input wait",
    "eval": "eval",
    "apply": "apply",
    "checkpoint": "checkpoint",
    "failure": "failure",
    "restart": "restart",
    "restore": "restore",
}
_SPLIT_COLORS = {
    "compute": KIND_COLORS["compute"],
    "comm": KIND_COLORS["comm"],
    "waiting": KIND_COLORS["idle"],
    "other": KIND_COLORS["eval"],
    "idle": "#ffffff",
}
_SPLIT_LABELS = {
    "compute": "compute",
    "comm": "communication",
    "waiting": "waiting ({kinds} events)",
    "other": "other ({kinds} events)",
    "idle": "idle (nothing recorded: white, as in the timeline)",
}
#: A ``compute`` span's detail that marks a backward pass: a pipeline's micro-batch ``B3``,
#: a layer's ``backward conv1``.
BACKWARD_DETAIL = r"^(?:B\d+|backward)\b"


#: The tallest figure either plot draws (inches): a thousand devices make one row each.
MAX_HEIGHT_IN = 14.0
#: Inches one tick label needs (10-point text and a little space): with less room per row,
#: every k-th row is named.
LABEL_IN = 0.16
#: time_split.png writes each bar's percentages only on rows at least this tall (inches),
#: and outlines bars only on rows at least :data:`THIN_ROW_IN` tall.
TEXT_ROW_IN = 0.18
THIN_ROW_IN = 0.08
#: Height of a timeline row's bars, rows being one unit apart (data coordinates).
BAR_HEIGHT = 0.8
#: Share of :data:`BAR_HEIGHT` that communication takes on a row that also holds other
#: spans (compute, waits): a band under them, so both stay visible where they overlap.
COMM_SHARE = 0.3
#: Bars of consecutive spans (a step's layers) are told apart by a white outline;
#: transfers, often far shorter than a pixel, are outlined in their own colour instead,
#: so that each still shows as a hairline (on rows at least :data:`THIN_ROW_IN` tall: on
#: thinner ones that outline would fill the gap between rows).
_EDGE = {"edgecolors": "white", "linewidth": 0.3}
_COMM_EDGE = {"edgecolors": "face", "linewidth": 0.5}


def _label_every(axis_in: float, rows: int) -> int:
    """Name every k-th of ``rows`` rows sharing ``axis_in`` inches, so names do not overlap."""
    return max(1, math.ceil(LABEL_IN * rows / max(axis_in, 1e-9)))


def _bars(
    bottom: np.ndarray, left: np.ndarray, width: np.ndarray, height: float | np.ndarray = BAR_HEIGHT
) -> np.ndarray:
    """The corners of horizontal bars ``height`` high from ``bottom``, for a
    :class:`PolyCollection` (shape: bars × 4 × 2), computed as ``broken_barh`` and ``barh``
    compute them."""
    x0, x1, y0, y1 = left, left + width, bottom, bottom + height
    corners = [(x0, y0), (x0, y1), (x1, y1), (x1, y0)]
    return np.stack([np.stack(corner, axis=-1) for corner in corners], axis=1)


def kind_colors(kinds: set[str]) -> dict[str, str]:
    """Each of ``kinds`` → its colour, in legend order (:data:`KIND_LABELS`, then the rest
    sorted); kinds without a colour of their own take :data:`_SPARE_COLORS` in that order."""
    order = [k for k in KIND_LABELS if k in kinds] + sorted(kinds - set(KIND_LABELS))
    spare = [k for k in order if k not in KIND_COLORS]
    colors = {k: _SPARE_COLORS[i % len(_SPARE_COLORS)] for i, k in enumerate(spare)}
    return {k: KIND_COLORS.get(k) or colors[k] for k in order}


@dataclass(frozen=True)
class TimelineLayout:
    """What ``timeline.png`` draws, in data coordinates.

    ``rows``: one track per device or parameter-server task, top row first (row ``i`` is
    centred at ``y = len(rows) - 1 - i``). ``bars``: one per span, columns ``kind, row,
    start_s, end_s`` (clipped to the window) and ``bottom, height`` (its sub-lane inside
    its row's bar height). ``legend``: (kind, label, colour) of each kind drawn, in
    legend order, once each. The window is ``[0, end_s]``. ``comm_band``: communication
    runs in a band under the other spans of its row (it overlaps them somewhere).
    ``to_first_comm``: the first ``steps`` asked for held no communication, so the window
    runs to the end of the first step that does (local SGD's synchronisation every H steps).
    A bar's ``kind`` is its event's, except compute spans of a backward pass: ``backward``.
    """

    rows: list[Track]
    bars: pd.DataFrame
    legend: list[tuple[str, str, str]]
    end_s: float
    steps: int
    comm_band: bool
    to_first_comm: bool = False


def _clusters(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each interval's cluster: intervals joined by overlaps, transitively, share one.

    A cluster starts where an interval starts after every earlier one has ended (within
    :data:`OVERLAP_TOL_S`, as :func:`assign_lanes` frees a lane), so the first-fit lanes of
    a cluster's intervals count from 0.
    """
    order = np.lexsort((ends, starts))
    reach = np.maximum.accumulate(ends[order])
    new = np.r_[True, starts[order][1:] >= reach[:-1] - OVERLAP_TOL_S]
    cluster = np.empty(len(starts), dtype=np.int64)
    cluster[order] = np.cumsum(new) - 1
    return cluster


def _stack(
    starts: np.ndarray, ends: np.ndarray, top: float, band: float
) -> tuple[np.ndarray, np.ndarray]:
    """Bottoms and heights of spans in a band ``band`` high below ``top``: a span alone
    fills the band; spans that overlap cut it into as many sub-lanes as they need
    (:func:`assign_lanes`, the first at the top)."""
    if not len(starts):
        return np.zeros(0), np.zeros(0)
    lanes = np.asarray(assign_lanes(starts.tolist(), ends.tolist()), dtype=np.int64)
    cluster = _clusters(starts, ends)
    count = np.zeros(int(cluster.max()) + 1, dtype=np.int64)
    np.maximum.at(count, cluster, lanes + 1)
    height = band / count[cluster]
    return top - (lanes + 1) * height, height


def _comm_overlaps(tracks: list[tuple[Track, np.ndarray]], spans: pd.DataFrame) -> bool:
    """Whether communication overlaps some other span (compute, a wait) on one row."""
    starts, ends = spans["start_s"].to_numpy(float), spans["end_s"].to_numpy(float)
    is_comm = (spans["kind"] == "comm").to_numpy()
    for _, idx in tracks:
        cluster = _clusters(starts[idx], ends[idx])
        comm = np.zeros(len(idx) and int(cluster.max()) + 1, dtype=bool)
        rest = comm.copy()
        comm[cluster[is_comm[idx]]] = True
        rest[cluster[~is_comm[idx]]] = True
        if (comm & rest).any():
            return True
    return False


def timeline_layout(
    events: pd.DataFrame, scenario: Scenario | None = None, steps: int = 3
) -> TimelineLayout:
    """The rows, bars and legend of the first ``steps`` steps' timeline.

    The window ends when the last event of step ``steps − 1`` ends (for asynchronous
    workers: each worker's first ``steps`` iterations). Each device is one row. Where
    communication overlaps other spans on some row (gradients all-reduced during the
    backward pass, activations sent during the next micro-batch), every row holding both
    draws communication in its lower :data:`COMM_SHARE` of the bar height and the rest
    above (:attr:`TimelineLayout.comm_band`); otherwise both fill the bar height. Spans
    of one band that overlap each other share it in sub-lanes. When the first ``steps``
    steps hold no communication and a later step does (local SGD syncs every H steps), the
    window runs to the end of that step, so that the figure shows what the time split counts.
    """
    numbered = events["step"] >= 0
    comm_steps = events.loc[numbered & (events["kind"] == "comm"), "step"]
    to_first_comm = bool(len(comm_steps)) and int(comm_steps.min()) >= steps
    if to_first_comm:
        steps = int(comm_steps.min()) + 1
    first = events[numbered & (events["step"] < steps)]
    end_s = float(first["end_s"].max()) if len(first) else float(events["end_s"].max() or 0)
    window = events[events["start_s"] < end_s]
    spans, tracks = device_tracks(window, scenario, links=False)
    starts = spans["start_s"].to_numpy(dtype=float)
    ends = spans["end_s"].to_numpy(dtype=float)
    is_comm = (spans["kind"] == "comm").to_numpy()
    comm_band = _comm_overlaps(tracks, spans)
    row = np.zeros(len(spans), dtype=np.int64)
    bottom, height = np.zeros(len(spans)), np.zeros(len(spans))
    for i, (_, idx) in enumerate(tracks):
        row[idx] = i
        top = len(tracks) - 1 - i + BAR_HEIGHT / 2
        comm, rest = idx[is_comm[idx]], idx[~is_comm[idx]]
        if not (comm_band and len(comm) and len(rest)):
            bottom[idx], height[idx] = _stack(starts[idx], ends[idx], top, BAR_HEIGHT)
            continue
        band = BAR_HEIGHT * COMM_SHARE
        bottom[rest], height[rest] = _stack(starts[rest], ends[rest], top, BAR_HEIGHT - band)
        top -= BAR_HEIGHT - band
        bottom[comm], height[comm] = _stack(starts[comm], ends[comm], top, band)
    kinds = spans["kind"].to_numpy(dtype=object)
    backward = (spans["kind"] == "compute") & spans["detail"].fillna("").astype(str).str.match(
        BACKWARD_DETAIL
    )
    kinds[backward.to_numpy()] = "backward"
    bars = pd.DataFrame(
        {
            "kind": kinds,
            "row": row,
            "start_s": np.minimum(starts, end_s),
            "end_s": np.minimum(ends, end_s),
            "bottom": bottom,
            "height": height,
        }
    )
    labels = KIND_LABELS | ({"comm": "communication (lower band)"} if comm_band else {})
    if backward.any():
        labels["compute"] = "compute: forward"
    legend = [(k, labels.get(k, k), c) for k, c in kind_colors(set(bars["kind"])).items()]
    return TimelineLayout(
        [t for t, _ in tracks], bars, legend, end_s, steps, comm_band, to_first_comm
    )


def _fit_legend(fig: Figure, handles: list[Patch]) -> Legend:
    """A legend under the axes in as many columns as fit the figure's width (at least one)."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    for ncol in range(len(handles), 0, -1):
        legend = fig.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False)
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return legend
        legend.remove()
    raise ValueError("a legend needs at least one entry")


def draw_timeline(
    events: pd.DataFrame, scenario: Scenario | None, title: str, steps: int = 3
) -> Figure:
    """The figure of :func:`timeline_layout`: a Gantt chart, one row per device, a legend of
    the event kinds under it."""
    layout = timeline_layout(events, scenario, steps)
    rows = len(layout.rows)
    height_in = min(MAX_HEIGHT_IN, 1.6 + 0.32 * max(1, rows))
    hairlines = (height_in - 1.6) / max(1, rows) >= THIN_ROW_IN
    fig = Figure(figsize=(10, height_in), layout="constrained")
    ax = fig.subplots()
    if not rows:
        no_data(ax, "no events recorded")
        return fig
    factor, unit = time_unit(layout.end_s)
    bars = layout.bars
    start = bars["start_s"].to_numpy() * factor
    width = bars["end_s"].to_numpy() * factor - start
    kind_of, row_of = bars["kind"].to_numpy(dtype=object), bars["row"].to_numpy()
    bottom, height = bars["bottom"].to_numpy(), bars["height"].to_numpy()
    # One collection of rectangles per kind, row after row, rather than one per kind and
    # row (a 256-device run has thousands of rows).
    for kind, _, color in layout.legend:
        idx = np.flatnonzero(kind_of == kind)
        idx = idx[np.argsort(row_of[idx], kind="stable")]
        ax.add_collection(
            PolyCollection(
                _bars(bottom[idx], start[idx], width[idx], height[idx]),
                facecolors=color,
                **(_COMM_EDGE if kind == "comm" and hairlines else _EDGE),
            )
        )
    every = _label_every(height_in - 1.6, rows)
    names = [t.label for t in reversed(layout.rows)]
    named = range((rows - 1) % every, rows, every)  # the top row (the first) is named
    ax.set_yticks(named, [names[i] for i in named])
    ax.set_ylim(-0.6, rows - 0.4)
    ax.set_xlim(0, layout.end_s * factor)
    _fit_legend(fig, [Patch(color=c, label=label) for _, label, c in layout.legend])
    ax.set_xlabel(f"simulated time ({unit})")
    reach = " (to the first synchronisation)" if layout.to_first_comm else ""
    ax.set_title(f"{title}: timeline of the first {layout.steps} steps{reach}")
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_timeline(
    events: pd.DataFrame, scenario: Scenario | None, title: str, path: Path, steps: int = 3
) -> None:
    """Write :func:`draw_timeline`'s figure of the first ``steps`` steps to ``path``."""
    save_figure(draw_timeline(events, scenario, title, steps), path)


def plot_time_split(
    events: pd.DataFrame, sim_time_s: float, title: str, path: Path
) -> pd.DataFrame:
    """Stacked bars: the share of simulated time each device computes, communicates, waits, idles.

    Overlapping events count once, in the priority compute > communication >
    waiting > other (see :func:`simdist.summary.time_split_by_device`).
    Training devices come first, then parameter-server tasks.  Returns the
    shares drawn (fractions of ``sim_time_s``).
    """
    trained = training_devices(events)
    others = sorted(set(events["device"].unique()) - set(trained), key=natural_key)
    kinds = events["kind"].unique()
    split = time_split_by_device(events, sim_time_s, trained + others)
    shares = split / sim_time_s if sim_time_s > 0 else split * 0.0
    other_kinds = sorted(k for k in kinds if split_category(k) == "other")
    waiting_kinds = sorted(k for k in kinds if split_category(k) == "waiting")
    rows = max(1, len(shares))
    height = min(MAX_HEIGHT_IN, 2.0 + 0.4 * rows)
    row_in = (height - 2.0) / rows  # about the height of one device's bar
    every = _label_every(height - 2.0, len(shares))
    fig = Figure(figsize=(8, height), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(shares))[::-1]
    left = np.zeros(len(shares))
    for category in SPLIT_CATEGORIES:
        values = shares[category].to_numpy() * 100
        if category not in ("compute", "comm") and not (values > 0.05).any():
            continue
        kinds = waiting_kinds if category == "waiting" else other_kinds
        label = _SPLIT_LABELS[category].format(kinds=", ".join(kinds) or "—")
        style = {
            "color": _SPLIT_COLORS[category],
            "edgecolor": "0.6",
            "linewidth": 0.4 if row_in >= THIN_ROW_IN else 0.0,
            "label": label,
        }
        if every == 1:
            ax.barh(y, values, left=left, **style)
        else:  # too many rows to name each: one artist per category, not one per bar
            ax.add_collection(PolyCollection(_bars(y - 0.4, left, values), **style))
        for yi, li, vi in zip(y, left, values, strict=True):
            if vi >= 8 and row_in >= TEXT_ROW_IN:
                ax.text(
                    li + vi / 2,
                    yi,
                    f"{vi:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if category in ("compute", "waiting") else "black",
                )
        left += values
    ax.set_yticks(y[::every], list(shares.index)[::every])
    if every > 1:
        ax.set_ylim(-0.6, len(shares) - 0.4)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of simulated time (%)")
    ax.set_title(f"{title}: where each device's time goes")
    fig.legend(loc="outside lower center", ncol=3, frameon=False, fontsize=8)
    save_figure(fig, path)
    return shares
