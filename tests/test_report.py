"""The report folder people read: trace.json, plots, report.md (sync and parameter_server runs)."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict

import pandas as pd
import pytest
from helpers import tiny
from hypothesis import given
from hypothesis import strategies as st

import simdist
from simdist.report.plots import write_plots
from simdist.report.trace import build_trace
from simdist.report.trace_text import dumps_trace
from simdist.report.tracks import assign_lanes
from simdist.runtime.recorder import EVENT_COLUMNS
from simdist.summary import split_category, time_split_by_device

NET = {"bandwidth": "1GB/s", "latency": "10us"}
SCENARIOS = {
    "mirrored": tiny(**{"strategy.kind": "mirrored", "cluster.devices_per_host": 2}),
    "ps": tiny(
        **{
            "name": "tiny_ps",
            "strategy": {"kind": "parameter_server"},
            "cluster.hosts": 3,
            "cluster.ps": 2,
            "cluster.links.network": NET,
            "workload.steps": 24,
        }
    ),
}
SYNC_PLOTS = {"loss_vs_time.png", "loss_vs_step.png", "throughput.png", "timeline.png"}
SYNC_PLOTS |= {"time_split.png", "memory.png"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Each scenario run once, its report written; name → (Result, folder)."""
    out = {}
    for name, data in SCENARIOS.items():
        folder = tmp_path_factory.mktemp(name) / "report"
        out[name] = (simdist.run(data, out=folder), folder)
    return out


def _spans(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_trace_spans_lie_in_the_run_do_not_overlap_and_add_up(reports, name):
    result, folder = reports[name]
    trace = json.loads((folder / "trace.json").read_text())
    end_us = result.summary["simulated_time_s"] * 1e6
    spans = _spans(trace)
    assert spans
    for span in spans:
        assert span["ts"] >= 0 and span["dur"] > 0
        assert span["ts"] + span["dur"] <= end_us * (1 + 1e-12) + 1e-6

    by_track = defaultdict(list)
    for span in spans:
        by_track[span["pid"], span["tid"]].append(span)
    for track in by_track.values():
        track.sort(key=lambda s: s["ts"])
        for a, b in itertools.pairwise(track):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6, (a, b)

    totals = defaultdict(float)
    for span in spans:
        if span["cat"] != "link":
            totals[span["cat"]] += span["dur"] / 1e6
    events = pd.read_csv(folder / "events.csv", keep_default_na=False)
    expected = (events["end_s"] - events["start_s"]).groupby(events["kind"]).sum()
    assert set(totals) == set(expected.index)
    for kind, seconds in expected.items():
        assert totals[kind] == pytest.approx(seconds, rel=1e-9)

    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert set(events["device"]) <= {n.removesuffix(" (parameter server)") for n in names}
    assert any(n.endswith(("/intra", "/nic", "/nic/tx", "/nic/rx")) for n in names)


def test_parameter_server_trace_has_server_tracks_and_staleness_counters(reports):
    result, folder = reports["ps"]
    trace = json.loads((folder / "trace.json").read_text())
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert {"ps0 (parameter server)", "ps1 (parameter server)"} <= processes
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    # full-duplex NICs (the default): each side of the servers' NICs has its track
    assert {"ps0/nic/tx", "ps0/nic/rx", "ps1/nic/tx", "ps1/nic/rx"} <= threads
    assert not any(t.endswith("/intra") for t in threads)
    staleness = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "staleness"]
    assert len(staleness) == len(result.tables["updates"])
    details = {s["args"].get("detail", "") for s in _spans(trace)}
    assert any(d.startswith("pull") for d in details) and any(d.startswith("push") for d in details)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_reloaded_report_gives_the_same_trace_and_plots_bytes(reports, name, tmp_path):
    _, folder = reports[name]
    loaded = simdist.load_report(folder)
    trace = build_trace(
        loaded.events,
        scenario=loaded.scenario,
        metrics=loaded.metrics,
        tables=loaded.tables,
        summary=loaded.summary,
    )
    assert dumps_trace(trace) == (folder / "trace.json").read_text()
    written = write_plots(loaded, tmp_path)
    expected = SYNC_PLOTS - {"loss_vs_time.png"}
    assert set(written) == (expected | {"staleness_hist.png"} if name == "ps" else expected)
    for png in written:
        data = (tmp_path / png).read_bytes()
        assert data.startswith(b"\x89PNG") and b"Software" not in data
        assert data == (folder / png).read_bytes(), png


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_report_md_shows_key_numbers_and_links_existing_plots(reports, name):
    result, folder = reports[name]
    text = (folder / "report.md").read_text()
    summary = result.summary
    assert text.startswith(f"# {summary['name']} — {summary['strategy']}")
    assert f"{summary['final_test_accuracy']:.2%}" in text
    assert f"{summary['examples_per_s']:,.0f}" in text
    assert f"| steps (applied updates) | {summary['steps']} |" in text
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text))
    pngs = {p.name for p in folder.glob("*.png")}
    assert linked == pngs
    assert SYNC_PLOTS <= pngs
    assert ("staleness_hist.png" in pngs) == (name == "ps")
    if name == "ps":
        assert "staleness (mean / p50 / p95 / max)" in text
    assert "[`trace.json`](trace.json)" in text


def test_lanes_keep_overlapping_spans_apart():
    assert assign_lanes([0, 1, 2, 5], [3, 2, 4, 6]) == [0, 1, 1, 0]
    assert assign_lanes([0, 1], [1, 2]) == [0, 0]


def _first_fit_lanes(starts, ends):
    """The definition: in order of (start, end), the lowest lane whose last span has ended."""
    lane_end, lanes = [], [0] * len(starts)
    for i in sorted(range(len(starts)), key=lambda i: (starts[i], ends[i])):
        free = [k for k, end in enumerate(lane_end) if end <= starts[i] + 1e-12]
        lanes[i] = free[0] if free else len(lane_end)
        lane_end[lanes[i] : lanes[i] + 1] = [ends[i]]
    return lanes


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), max_size=60))
def test_lanes_are_the_lowest_free_lane_in_start_order(spans):
    """Reused lanes come back lowest first, whatever order they were freed in."""
    starts = [s / 4 for s, _ in spans]
    ends = [(s + d) / 4 for s, d in spans]
    assert assign_lanes(starts, ends) == _first_fit_lanes(starts, ends)


def test_time_split_counts_overlaps_once_and_sorts_future_kinds():
    events = pd.DataFrame(
        [
            (0.0, 2.0, "h", "d", "comm", 8, 0, "pull a", "h/nic"),
            (1.0, 3.0, "h", "d", "comm", 8, 0, "pull b", "h/intra;h/nic"),
            (2.5, 4.0, "h", "d", "compute", 0, 0, "", ""),
            (4.0, 5.0, "h", "d", "input_wait", 0, 1, "", ""),
            (5.0, 5.5, "h", "d", "checkpoint", 0, 1, "", ""),
            (5.5, 6.0, "h", "d", "failure", 0, 1, "", ""),
        ],
        columns=list(EVENT_COLUMNS),
    )
    split = time_split_by_device(events, 8.0).loc["d"]
    assert split.to_dict() == {
        "compute": 1.5,
        "comm": 2.5,
        "waiting": 1.0,
        "other": 1.0,
        "idle": 2.0,
    }
    assert [split_category(k) for k in ("straggle", "idle", "input_wait", "apply")] == [
        "compute",
        "waiting",
        "waiting",
        "other",
    ]
    trace = build_trace(events)
    assert {s["cat"] for s in _spans(trace)} >= {"input_wait", "checkpoint", "failure"}
    threads = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    # link tracks are the links the rows name: h/nic carries both (overlapping) pulls
    assert threads == ["d", "d #2", "h/intra", "h/nic", "h/nic #2"]


def test_trace_text_has_one_event_per_line_whatever_the_events_hold():
    events = [
        {"name": "a", "ph": "X", "args": {"detail": 'say "},{"name":" here'}},
        {"name": "b", "args": {"nested": [{"name": 1}, {"name": 2}]}},  # '},{"name":' inside
        {"ph": "M", "name": "c"},  # "name" not first
        {"name": "d", "ts": 1.5},
    ]
    text = dumps_trace({"displayTimeUnit": "ns", "traceEvents": events})
    lines = text.splitlines()
    assert lines[0] == '{"displayTimeUnit":"ns","traceEvents":['
    assert [json.loads(line.rstrip(",")) for line in lines[1:-1]] == events
    assert lines[-1] == "]}"
    # The common case (every event starts with "name", nothing nested) gives the same layout.
    plain = [e for e in events if e["name"] in ("a", "d")]
    lines = dumps_trace({"traceEvents": plain}).splitlines()
    assert [json.loads(line.rstrip(",")) for line in lines[1:-1]] == plain


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"step": 2.5, "detail": "pull ps0 — ü"},  # a float step, a string to escape
        {"nbytes": True, "detail": None},  # types the encoder writes its own way
    ],
)
def test_trace_json_written_without_dicts_is_what_the_encoder_writes(odd):
    """write_trace formats spans and counters directly; the text is the JSON encoder's of
    build_trace's dicts, also for values that send it back through the encoder."""
    from simdist.report.trace_text import SPAN_FIELDS, counter_lines, span_lines

    row = {"name": "comm: pull", "cat": "comm", "ts": 1.5e-06, "dur": 250.0, "pid": 1}
    row |= {"tid": 2, "step": 3, "nbytes": 4096, "detail": "pull ps0"} | odd
    spans = tuple([row[field], row[field]] for field in SPAN_FIELDS)
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    expected = []
    for n, c, t, d, p, i, s, b, e in zip(*spans, strict=True):
        args = {"step": s, **({"bytes": b} if b else {}), **({"detail": e} if e else {})}
        event = {"name": n, "cat": c, "ph": "X", "ts": t, "dur": d, "pid": p, "tid": i}
        expected.append(encode({**event, "args": args}))
    assert span_lines(spans) == expected
    counters = [("staleness", 12.0, 3, "staleness", 2.0), ("w0/nic/tx", 0.0, 1, "utilisation", 1)]
    assert counter_lines(counters) == [
        encode({"name": n, "ph": "C", "ts": t, "pid": p, "args": {k: v}})
        for n, t, p, k, v in counters
    ]
    with pytest.raises(ValueError):  # a value the encoder refuses is refused here too
        span_lines(
            tuple(
                [*column[:-1], math.nan] if f == "ts" else column
                for f, column in zip(SPAN_FIELDS, spans, strict=True)
            )
        )


@pytest.mark.parametrize(("devices", "split_px", "timeline_px"), [(4, 396, 316), (256, 1540, 1540)])
def test_many_devices_keep_the_device_plots_at_most_14_inches_tall(
    tmp_path, devices, split_px, timeline_px
):
    """time_split.png grows 0.4 in per device and timeline.png 0.32 in per row, up to 14 in
    (at 110 dpi): 256 devices made a 104-inch time_split.png."""
    from PIL import Image

    from simdist.report.timeline import plot_time_split, plot_timeline

    rows = []
    for d, step in itertools.product(range(devices), range(3)):
        host, device = f"w{d}", f"w{d}/gpu0"
        rows.append((float(step), step + 0.6, host, device, "compute", 0, step, "", ""))
        rows.append((step + 0.6, step + 1.0, host, device, "comm", 8, step, "all-reduce", ""))
    events = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    plot_time_split(events, 3.0, "many", tmp_path / "split.png")
    plot_timeline(events, None, "many", tmp_path / "timeline.png")
    assert Image.open(tmp_path / "split.png").size == (880, split_px)
    assert Image.open(tmp_path / "timeline.png").size == (1100, timeline_px)


# -- memory, for every strategy --------------------------------------------------------


def _parts(params, activations, **extra):
    parts = {"params": params, "gradients": params, "optimizer": 0, "activations": activations}
    return {**parts, "total": 2 * params + activations + sum(extra.values()), **extra}


def test_memory_groups_devices_alike_and_stacks_what_the_total_holds_beyond_the_parts():
    from simdist.report.memory import memory_layout, memory_rows

    summary = {
        "memory_per_device": {
            "w10/gpu0": _parts(100, 50),
            "w2/gpu0": _parts(100, 50),
            "w1/gpu0": _parts(40, 10, recompute=30),  # a part the report does not know
        },
        "memory_off_device": {"ps0": _parts(7, 0)},
    }
    caps = {"w1/gpu0": 1000.0, "w2/gpu0": 1000.0, "w10/gpu0": 1000.0}
    layout = memory_layout(summary, caps)
    assert [g.label for g in layout.rows] == ["w1/gpu0", "w2/gpu0 + 1 alike", "ps0 (host memory)"]
    bars = {
        row: list(zip(f["part"], f["width"], strict=True)) for row, f in layout.bars.groupby("row")
    }
    assert bars[0] == [("params", 40), ("gradients", 40), ("activations", 10), ("other", 30)]
    assert bars[1] == [("params", 100), ("gradients", 100), ("activations", 50)]
    assert (layout.capacity, layout.capacity_note) == (1000.0, "")  # within 4x of 250 B
    assert [label for label, _ in layout.legend] == [
        "parameters",
        "gradients",
        "activations",
        "other (the total beyond the parts above)",
    ]
    assert memory_rows(summary, caps) == [
        ("peak memory per device (3 devices)", "250 B on w2/gpu0 and 1 more alike, of its 1000 B "
         "(25.0%); least 120 B (w1/gpu0)"),
        ("the fullest device holds", "parameters 100 B · gradients 100 B · optimizer state 0 B "
         "· activations 50 B"),
        ("memory off the devices (parameter servers, host)", "ps0 14 B"),
    ]  # fmt: skip
    kinds = {"stored_inputs": 30, "attention_scores": 20}  # their own row, not this one
    per_device = summary["memory_per_device"]
    by_kind = {d: {**p, "activations_by_kind": kinds} for d, p in per_device.items()}
    assert (
        memory_rows({**summary, "memory_per_device": by_kind}, caps)[1]
        == memory_rows(summary, caps)[1]
    )
    sharded = memory_rows({**summary, "param_bytes": 400}, caps)[1][1]
    assert sharded.startswith("parameters 100 B (25.0% of the model's 400 B) · gradients")
    far = memory_layout(summary, {d: 1e12 for d in caps})
    assert far.capacity == 0 and far.capacity_note.endswith("the fullest device uses 2.5e-08%")
    assert memory_layout(summary).capacity_note == ""  # no capacity known: none said


def test_every_run_reports_its_memory(reports):
    for name in SCENARIOS:
        _, folder = reports[name]
        text = (folder / "report.md").read_text()
        assert "| peak memory per device (" in text and "](memory.png)" in text, name


def test_the_iteration_gap_has_its_own_panel_and_axis_beside_the_staleness(tmp_path):
    """SSP's measure counts iterations ahead (to 48 for a straggler's peers); drawn on the
    staleness axis it read as "parameter versions behind"."""
    from simdist.report.plots import plot_staleness_hist

    updates = pd.DataFrame({"staleness": [0, 1, 3, 3], "ssp_staleness": [0, 0, 48, 2]})
    fig = plot_staleness_hist(updates, "ps", tmp_path / "s.png")
    left, right = fig.axes
    assert left.get_xlabel() == "staleness (parameter versions behind at apply)"
    assert right.get_xlabel() == "iterations ahead of the slowest worker (SSP's measure)"
    assert [round(p.get_height()) for p in left.patches] == [1, 1, 0, 2]
    assert len(right.patches) == 49 and right.patches[48].get_height() == 1
    only = plot_staleness_hist(updates[["staleness"]], "ps", tmp_path / "t.png")
    assert len(only.axes) == 1


def test_the_activations_line_names_each_kind_and_what_recomputation_freed():
    from simdist.report.markdown import activations_line

    kinds = {
        "stored_inputs": 3 * 2**20,
        "attention_scores": 0,
        "masks": 1536,
        "recompute_working_set": 2**20,
        "freed_by_recompute": 5 * 2**20,
    }
    per_device = {
        "w0/gpu0": {**_parts(10, 5), "activations_by_kind": kinds},
        "w1/gpu0": _parts(1, 1),  # the emptier device, and without a breakdown
    }
    assert activations_line(per_device) == (
        "stored inputs 3.0 MiB, masks 1.5 KiB, recomputed 1.0 MiB; recomputation freed 5.0 MiB"
    )
    assert activations_line({"w1/gpu0": _parts(1, 1)}) == ""
