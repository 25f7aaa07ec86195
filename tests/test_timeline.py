"""timeline.png: one row per device, overlapping spans inside it, a legend of event kinds that
fits the figure. Checked on the data the figure draws (:func:`timeline_layout`) and on the
drawn legend's extent, not on pixels."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

import simdist
from simdist.report.timeline import (
    BAR_HEIGHT,
    KIND_COLORS,
    KIND_LABELS,
    draw_timeline,
    kind_colors,
    timeline_layout,
)
from simdist.report.tracks import timeline_spans
from simdist.runtime.recorder import EVENT_COLUMNS
from simdist.scenario.load import resolve_scenario

#: Short runs of the shipped scenarios whose timelines showed a device twice (``#2`` rows):
#: gpipe sends activations while the next micro-batch computes, resnet50 all-reduces
#: gradient buckets during the backward pass.
RUNS = {
    "pipeline_gpipe": ("scenarios/pipeline_gpipe.yaml", ["workload.steps=3", "numerics=false"]),
    "resnet50_8gpu_nvlink": ("scenarios/resnet50_8gpu_nvlink.yaml", ["workload.steps=3"]),
}
DEVICES = {
    "pipeline_gpipe": [f"worker0/gpu{i}" for i in range(4)],
    "resnet50_8gpu_nvlink": [f"worker0/gpu{i}" for i in range(8)],
}
KINDS = {  # "apply": the optimizer step after the gradients are reduced
    "pipeline_gpipe": ["compute", "backward", "comm", "apply"],
    "resnet50_8gpu_nvlink": ["compute", "backward", "comm", "idle", "apply"],
}


@pytest.fixture(scope="module")
def runs():
    """Each of :data:`RUNS` once: name → (events, scenario)."""
    out = {}
    for name, (path, overrides) in RUNS.items():
        scenario = resolve_scenario(path, overrides)
        out[name] = (simdist.run(scenario).events, scenario)
    return out


def _events(rows):
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS))


def _row_bounds(layout):
    """Each bar's row's bar extent: [centre − 0.4, centre + 0.4]."""
    centre = len(layout.rows) - 1 - layout.bars["row"].to_numpy()
    return centre - BAR_HEIGHT / 2, centre + BAR_HEIGHT / 2


@pytest.mark.parametrize("name", list(RUNS))
def test_each_device_is_one_row_and_each_kind_one_legend_entry(runs, name):
    events, scenario = runs[name]
    layout = timeline_layout(events, scenario)
    assert [t.label for t in layout.rows] == DEVICES[name]
    assert [t.lane for t in layout.rows] == [0] * len(DEVICES[name])
    assert [kind for kind, _, _ in layout.legend] == KINDS[name]
    # communication overlaps compute on these runs: it is drawn as the lower band
    assert layout.comm_band
    labels = [label for _, label, _ in layout.legend]
    assert labels[:3] == ["compute: forward", "compute: backward", "communication (lower band)"]
    # forward and backward in two colours: a pipeline's schedule can be read
    assert layout.legend[0][2] != layout.legend[1][2]
    # every span of the window is drawn, on its own device's row
    window = events[events["start_s"] < layout.end_s]
    assert len(layout.bars) == len(window)
    drawn = layout.bars.groupby("row").size()
    assert drawn.to_dict() == {
        DEVICES[name].index(d): n for d, n in window.groupby("device").size().items()
    }


@pytest.mark.parametrize("name", list(RUNS))
def test_bars_stay_in_their_row_and_overlapping_spans_do_not_cover_each_other(runs, name):
    """trace.json still needs lanes (``#2`` threads) for these runs; the figure puts them
    side by side inside the one row instead."""
    events, scenario = runs[name]
    tracks, _ = timeline_spans(events, scenario)
    assert "worker0/gpu0 #2" in [t.label for t in tracks]

    layout = timeline_layout(events, scenario)
    bars = layout.bars
    low, high = _row_bounds(layout)
    bottom, top = bars["bottom"].to_numpy(), (bars["bottom"] + bars["height"]).to_numpy()
    assert (bottom >= low - 1e-12).all()
    assert (top <= high + 1e-12).all()
    for _, row in bars.groupby("row"):
        s, e = row["start_s"].to_numpy(), row["end_s"].to_numpy()
        b, t = row["bottom"].to_numpy(), (row["bottom"] + row["height"]).to_numpy()
        in_time = (s[:, None] < e[None, :] - 1e-12) & (s[None, :] < e[:, None] - 1e-12)
        in_height = (b[:, None] < t[None, :] - 1e-12) & (b[None, :] < t[:, None] - 1e-12)
        np.fill_diagonal(in_time, False)
        assert not (in_time & in_height).any()
    comm = (bars["kind"] == "comm").to_numpy()
    # compute above, communication in the lower 30% of each row (0.24 of its 0.8)
    assert (top[comm] <= low[comm] + 0.24 + 1e-12).all()
    assert (bottom[~comm] >= low[~comm] + 0.24 - 1e-12).all()


@pytest.mark.parametrize("name", list(RUNS))
def test_legend_lies_inside_the_figure(runs, name):
    """resnet50's legend of per-bucket labels ran off both edges of the figure."""
    events, scenario = runs[name]
    fig = draw_timeline(events, scenario, name)
    FigureCanvasAgg(fig).draw()
    (legend,) = fig.legends
    box, canvas = legend.get_window_extent(), fig.bbox
    assert canvas.x0 <= box.x0 < box.x1 <= canvas.x1
    assert canvas.y0 <= box.y0 < box.y1 <= canvas.y1
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == [label for _, label, _ in timeline_layout(events, scenario).legend]


def test_overlaps_share_a_row_in_sub_lanes_and_communication_runs_under_compute():
    """Hand-made: w0 computes [0, 2] while sending [1, 3]; w1 computes [0, 1] then sends
    [1, 2]; ps0 serves [0, 2] and [1, 3] at once, then [4, 5] alone."""
    events = _events(
        [
            (0.0, 2.0, "w0", "w0/gpu0", "compute", 0, 0, "", ""),
            (1.0, 3.0, "w0", "w0/gpu0", "comm", 8, 0, "push ps0", ""),
            (0.0, 1.0, "w1", "w1/gpu0", "compute", 0, 0, "", ""),
            (1.0, 2.0, "w1", "w1/gpu0", "comm", 8, 0, "push ps0", ""),
            (0.0, 2.0, "ps0", "ps0", "comm", 8, 0, "pull", ""),
            (1.0, 3.0, "ps0", "ps0", "comm", 8, 0, "pull", ""),
            (4.0, 5.0, "ps0", "ps0", "comm", 8, 0, "push", ""),
        ]
    )
    layout = timeline_layout(events, None, steps=1)
    assert [t.label for t in layout.rows] == ["ps0", "w0/gpu0", "w1/gpu0"]
    assert layout.end_s == 5.0
    assert layout.comm_band
    # rows are centred at 2 (ps0), 1 (w0), 0 (w1); bars 0.8 high, communication 0.24 of it
    expected = [
        (1, 0.84, 0.56),  # w0 compute: the upper band
        (1, 0.6, 0.24),  # w0 comm: the lower band
        (2, -0.16, 0.56),  # w1 too, though its own spans do not overlap
        (2, -0.4, 0.24),
        (0, 2.0, 0.4),  # ps0: two transfers at once, two sub-lanes of the full bar
        (0, 1.6, 0.4),
        (0, 1.6, 0.8),  # and one alone fills it
    ]
    bars = layout.bars
    assert bars["row"].tolist() == [row for row, _, _ in expected]
    assert bars["bottom"].tolist() == pytest.approx([b for _, b, _ in expected])
    assert bars["height"].tolist() == pytest.approx([h for _, _, h in expected])


def test_without_overlap_communication_fills_the_row():
    """mirrored-like: compute, then the all-reduce, never at once: full-height bars."""
    rows = []
    for d, step in itertools.product(range(2), range(3)):
        rows.append((float(step), step + 0.6, "w0", f"w0/gpu{d}", "compute", 0, step, "", ""))
        rows.append((step + 0.6, step + 1.0, "w0", f"w0/gpu{d}", "comm", 8, step, "ring", ""))
    layout = timeline_layout(_events(rows), None)
    assert not layout.comm_band
    assert [t.label for t in layout.rows] == ["w0/gpu0", "w0/gpu1"]
    assert layout.bars["height"].tolist() == [0.8] * 12
    assert [label for _, label, _ in layout.legend] == ["compute", "communication"]


def test_many_kinds_keep_one_entry_each_and_the_legend_inside_the_figure():
    """Every known kind and two unknown ones, each on its own device and twice: the legend
    wraps into rows rather than running off the figure."""
    kinds = [*KIND_LABELS, "zeta", "alpha"]
    rows = []
    for i, kind in enumerate(kinds):
        for step in range(2):
            rows.append((float(step), step + 0.5, f"w{i}", f"w{i}/gpu0", kind, 0, step, "", ""))
    events = _events(rows)
    layout = timeline_layout(events, None, steps=2)
    assert [k for k, _, _ in layout.legend] == [*KIND_LABELS, "alpha", "zeta"]
    colors = kind_colors(set(kinds))
    assert colors["compute"] == KIND_COLORS["compute"]
    assert (colors["alpha"], colors["zeta"]) == ("#17becf", "#f7b6d2")  # spares, sorted order
    fig = draw_timeline(events, None, "a run with a long name " * 3, steps=2)
    FigureCanvasAgg(fig).draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert fig.bbox.x0 <= box.x0 < box.x1 <= fig.bbox.x1
    assert fig.bbox.y0 <= box.y0 < box.y1 <= fig.bbox.y1
    assert len(legend.get_texts()) == len(kinds)
    lines = {round(text.get_window_extent().y0) for text in legend.get_texts()}
    assert len(lines) > 1  # wrapped onto more than one line


def test_a_window_without_communication_runs_to_the_first_synchronisation():
    """Local SGD (diloco) syncs every H steps: its first 3 steps are compute only, while its
    time split is mostly communication. The window runs to the end of the first sync."""
    rows = []
    for step in range(10):
        rows.append((step * 0.1, step * 0.1 + 0.1, "w0", "w0/gpu0", "compute", 0, step, "", ""))
    rows.append((1.0, 6.0, "w0", "w0/gpu0", "comm", 8, 4, "all-reduce parameter deltas", ""))
    for step in range(10, 13):
        rows.append((step * 0.1 + 5, step * 0.1 + 5.1, "w0", "w0/gpu0", "compute", 0, step, "", ""))
    layout = timeline_layout(_events(rows), None, steps=3)
    assert (layout.steps, layout.end_s, layout.to_first_comm) == (5, 6.0, True)
    assert [k for k, _, _ in layout.legend] == ["compute", "comm"]
    fig = draw_timeline(_events(rows), None, "diloco", steps=3)
    assert fig.axes[0].get_title() == (
        "diloco: timeline of the first 5 steps (to the first synchronisation)"
    )
    early = timeline_layout(_events(rows), None, steps=6)  # the sync is inside: as asked
    assert (early.steps, early.to_first_comm) == (6, False)


def test_backward_spans_are_told_from_forward_and_waiting_is_one_grey_in_both_figures(
    monkeypatch, tmp_path
):
    import matplotlib.axes

    from simdist.report.timeline import plot_time_split

    rows = [
        (0.0, 1.0, "w0", "w0/gpu0", "compute", 0, 0, "F0", ""),
        (1.0, 2.0, "w0", "w0/gpu0", "compute", 0, 0, "B0", ""),
        (0.0, 1.0, "w0", "w0/gpu1", "compute", 0, 0, "forward", ""),
        (1.0, 1.5, "w0", "w0/gpu1", "compute", 0, 0, "backward conv1", ""),
        (1.5, 2.0, "w0", "w0/gpu1", "idle", 0, 0, "barrier", ""),
        (2.0, 2.5, "w0", "w0/gpu1", "compute", 0, 0, "Bogus", ""),  # not a backward
    ]
    layout = timeline_layout(_events(rows), None, steps=1)
    assert layout.bars["kind"].tolist() == [
        "compute",
        "backward",
        "compute",
        "backward",
        "idle",
        "compute",
    ]
    colors = {k: c for k, _, c in layout.legend}
    assert colors["idle"] == KIND_COLORS["idle"] == "#737373"
    drawn = {}
    real_barh = matplotlib.axes.Axes.barh

    def spy(self, y, width, *args, **kwargs):
        drawn[kwargs["label"].split(" ")[0]] = kwargs["color"]
        return real_barh(self, y, width, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "barh", spy)
    plot_time_split(_events(rows), 3.0, "split", tmp_path / "split.png")
    assert drawn["waiting"] == colors["idle"]  # the same grey means waiting in both
    assert drawn["idle"] == "#ffffff"  # time without events: white, as in the timeline
