"""Where each device's time goes: ``timeline.png`` (a Gantt chart of the first steps) and
``time_split.png`` (each device's share of computing, communicating, waiting and idling).

Drawn from the run's ``events`` table only, like every plot (:mod:`simdist.report.plots`,
whose :func:`~simdist.report.plots.write_plots` writes both files); the timeline's tracks
and lanes are the ones of ``trace.json`` (:func:`simdist.report.tracks.timeline_spans`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from simdist.report.figures import no_data, save_figure, time_unit
from simdist.report.tracks import timeline_spans
from simdist.summary import (
    SPLIT_CATEGORIES,
    natural_key,
    split_category,
    time_split_by_device,
    training_devices,
)

if TYPE_CHECKING:
    from simdist.scenario.schema import Scenario

#: Colours of event kinds; unknown kinds get :data:`_SPARE_COLORS` in sorted order.
KIND_COLORS = {
    "compute": "#1f77b4",
    "straggle": "#6baed6",
    "comm": "#ff7f0e",
    "idle": "#bdbdbd",
    "input_wait": "#e377c2",
    "eval": "#2ca02c",
    "apply": "#9467bd",
    "checkpoint": "#8c564b",
    "failure": "#d62728",
    "restart": "#bcbd22",
    "restore": "#c49c94",
}
_SPARE_COLORS = ("#17becf", "#7f7f7f", "#aec7e8", "#98df8a", "#c5b0d5", "#dbdb8d")
#: Shades for the kinds of communication (pull, push, all-reduce, …) in the timeline.
_COMM_SHADES = ("#ff7f0e", "#ffbb78", "#d95f02", "#a63603", "#fdd0a2", "#e6550d")
_SPLIT_COLORS = {
    "compute": KIND_COLORS["compute"],
    "comm": KIND_COLORS["comm"],
    "waiting": "#737373",
    "other": KIND_COLORS["eval"],
    "idle": "#f0f0f0",
}
_SPLIT_LABELS = {
    "compute": "compute",
    "comm": "communication",
    "waiting": "waiting ({kinds} events)",
    "other": "other ({kinds} events)",
    "idle": "idle (nothing recorded)",
}


#: The tallest figure either plot draws (inches): a thousand devices make one row each.
MAX_HEIGHT_IN = 14.0
#: Inches one tick label needs (10-point text and a little space): with less room per row,
#: every k-th row is named.
LABEL_IN = 0.16
#: time_split.png writes each bar's percentages only on rows at least this tall (inches),
#: and outlines bars only on rows at least :data:`THIN_ROW_IN` tall.
TEXT_ROW_IN = 0.18
THIN_ROW_IN = 0.08


def _label_every(axis_in: float, rows: int) -> int:
    """Name every k-th of ``rows`` rows sharing ``axis_in`` inches, so names do not overlap."""
    return max(1, math.ceil(LABEL_IN * rows / max(axis_in, 1e-9)))


def _bars(bottom: np.ndarray, left: np.ndarray, width: np.ndarray) -> np.ndarray:
    """The corners of horizontal bars 0.8 high from ``bottom``, for a :class:`PolyCollection`
    (shape: bars × 4 × 2), computed as ``broken_barh`` and ``barh`` compute them."""
    x0, x1, y0, y1 = left, left + width, bottom, bottom + 0.8
    corners = [(x0, y0), (x0, y1), (x1, y1), (x1, y0)]
    return np.stack([np.stack(corner, axis=-1) for corner in corners], axis=1)


def _kind_color(kind: str, spare: dict[str, str]) -> str:
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    if kind not in spare:
        spare[kind] = _SPARE_COLORS[len(spare) % len(_SPARE_COLORS)]
    return spare[kind]


def _comm_label(detail: str, hosts: set[str]) -> str:
    """``pull ps0`` → ``pull``: what kind of transfer, without the task it went to."""
    words = [w for w in str(detail).split() if w not in hosts]
    return " ".join(words) if words else "transfer"


def plot_timeline(
    events: pd.DataFrame, scenario: Scenario | None, title: str, path: Path, steps: int = 3
) -> None:
    """Gantt chart of the first ``steps`` steps: one row per device / PS task (and lane).

    The window ends when the last event of step ``steps − 1`` ends (for
    asynchronous workers: each worker's first ``steps`` iterations).
    """
    first = events[(events["step"] >= 0) & (events["step"] < steps)]
    end_s = float(first["end_s"].max()) if len(first) else float(events["end_s"].max() or 0)
    window = events[events["start_s"] < end_s]
    tracks, spans = timeline_spans(window, scenario, links=False)
    height = min(MAX_HEIGHT_IN, 1.6 + 0.32 * max(1, len(tracks)))
    fig = Figure(figsize=(10, height), layout="constrained")
    ax = fig.subplots()
    if not tracks:
        no_data(ax, "no events recorded")
        save_figure(fig, path)
        return
    factor, unit = time_unit(end_s)
    hosts = set(events["host"].unique())
    spare: dict[str, str] = {}
    comm_colors: dict[str, str] = {}
    labels = []
    for kind, detail in zip(spans["kind"].tolist(), spans["detail"].tolist(), strict=True):
        if kind == "comm":
            label = f"comm: {_comm_label(detail, hosts)}"
            if label not in comm_colors:
                comm_colors[label] = _COMM_SHADES[len(comm_colors) % len(_COMM_SHADES)]
        else:
            label = kind
        labels.append(label)
    spans = spans.assign(label=labels)
    colors = {label: comm_colors.get(label) or _kind_color(label, spare) for label in set(labels)}
    rows = len(tracks)
    # One collection of rectangles per label, track after track: the rectangles, and the
    # order they are drawn in, of one ``broken_barh`` per label and track, without a
    # collection per track (a 256-device run has thousands).
    start = spans["start_s"].clip(upper=end_s).to_numpy() * factor
    width = spans["end_s"].clip(upper=end_s).to_numpy() * factor - start
    label_of, track_of = spans["label"].to_numpy(dtype=object), spans["track"].to_numpy()
    for label in sorted(colors):
        idx = np.flatnonzero(label_of == label)
        idx = idx[np.argsort(track_of[idx], kind="stable")]
        bottom = rows - 1 - track_of[idx] - 0.4
        ax.add_collection(
            PolyCollection(
                _bars(bottom, start[idx], width[idx]),
                facecolors=colors[label],
                edgecolors="white",
                linewidth=0.3,
            )
        )
    every = _label_every(height - 1.6, rows)
    names = [t.label for t in reversed(tracks)]
    named = range((rows - 1) % every, rows, every)  # the top track (the first) is named
    ax.set_yticks(named, [names[i] for i in named])
    ax.set_ylim(-0.6, rows - 0.4)
    ax.set_xlim(0, end_s * factor)
    order = sorted(colors, key=lambda lbl: (lbl.split(":")[0] != "compute", lbl))
    fig.legend(
        handles=[Patch(color=colors[lbl], label=lbl) for lbl in order],
        loc="outside lower center",
        ncol=min(5, len(order)),
        frameon=False,
    )
    ax.set_xlabel(f"simulated time ({unit})")
    lanes = " (#k: spans at the same time)" if any(t.lane for t in tracks) else ""
    ax.set_title(f"{title}: timeline of the first {steps} steps{lanes}")
    ax.grid(axis="x", alpha=0.3)
    save_figure(fig, path)


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
