"""The run's timeline as ``trace.json`` (its tracks and lanes: :mod:`simdist.report.tracks`).

``trace.json`` is in the Chrome trace-event format (a JSON object with
``traceEvents``), which https://ui.perfetto.dev and chrome://tracing open.
Layout:

* one *process* per host — workers first, then the chief and the
  parameter-server tasks, in the scenario's order — named ``w0 (worker)``,
  ``ps0 (parameter server)``;
* inside it one *thread* per device, one for events recorded on the host
  itself (a parameter-server task, a failed host), and one per link of that
  host that carried traffic: ``w0/nic`` (network interface) and
  ``w0/intra`` (PCIe / NVLink);
* a complete ("X") span per row of ``events.csv`` on its device track, named
  ``kind`` or ``kind: detail`` (``comm: pull ps0``, ``idle: barrier``), with
  ``cat`` = kind, so every kind — today's and future ones such as
  checkpoint, failure, input_wait — appears without special cases;
* counter ("C") tracks: ``staleness`` on each parameter server (from
  ``updates.csv``), and ``train_loss`` / ``test_accuracy`` under a ``run``
  process;
* a counter track per link and direction (``w0/nic/tx``, every link of
  ``links.csv``, the workers' NICs of a parameter_server run included) on its
  host's process (links of no host under a ``network`` process): its
  utilisation, the load over the bandwidth, at every change of its load
  (``link_load.csv``, exact: the step function the network recorded).

Spans cover what was recorded: a collective from the moment it holds its links
to its end, a device's message from grant to arrival, a parameter server's
message for the time its NIC serialised it, a worker's parallel pulls or pushes
as one phase. Queueing before a transfer is drawn on the waiting device, not on
the link.

Times are microseconds (``ts``, ``dur``); bytes are identical for identical
runs (stable ordering, one event per line, floats in shortest round-trip form).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd

from simdist.report.trace_text import counter_lines, document, span_args, span_lines
from simdist.report.tracks import Track, host_roles, timeline_spans

if TYPE_CHECKING:
    from simdist.report.drawn import Drawn
    from simdist.runtime.engine import Result
    from simdist.scenario import Scenario

#: What each role's process is called: ``w0 (worker)``, ``ps0 (parameter server)``.
_ROLE_LABELS = {
    "worker": "worker",
    "chief": "chief",
    "ps": "parameter server",
    "network": "links",  # links of no host: a leaf-spine network's uplinks
}


def _us(seconds: float) -> float:
    return float(seconds) * 1e6


def _counter_rows(
    metrics: pd.DataFrame | None, tables: Mapping[str, pd.DataFrame], ps_order: Sequence[str]
) -> list[tuple[str | None, str, float, float]]:
    """(host or None for the run, counter name, time_s, value) of every finite counter sample."""
    rows: list[tuple[str | None, str, float, float]] = []
    updates = tables.get("updates")
    if updates is not None and {"time_s", "staleness"} <= set(updates.columns):
        ps_col = updates["ps"] if "ps" in updates.columns else pd.Series(-1, index=updates.index)
        for t, ps, value in zip(updates["time_s"], ps_col, updates["staleness"], strict=True):
            ps = int(ps)
            host = ps_order[ps] if 0 <= ps < len(ps_order) else None
            rows.append((host, "staleness", float(t), float(value)))
    if metrics is not None:
        for name in ("train_loss", "test_accuracy"):
            part = metrics[metrics["metric"] == name]
            rows.extend(
                (None, name, float(t), float(v))
                for t, v in zip(part["time_s"], part["value"], strict=True)
            )
    return [r for r in rows if math.isfinite(r[3])]


def link_counter_rows(tables: Mapping[str, pd.DataFrame]) -> list[tuple[str, str, float, float]]:
    """(host, link, time_s, utilisation) of every link's load change, in ``links.csv``'s order.

    Each link starts with a sample at 0 (idle until its first change), so a link that
    never carried a byte still has its (flat) track.
    """
    links, load = tables.get("links"), tables.get("link_load")
    if links is None or load is None or links.empty:
        return []
    by_link = load.groupby("link", sort=False).indices
    times, rates = load["time_s"].to_numpy(), load["rate_Bps"].to_numpy()
    rows: list[tuple[str, str, float, float]] = []
    for name, host, bandwidth in zip(
        links["link"], links["host"], links["bandwidth_Bps"], strict=True
    ):
        idx = by_link.get(name, [])
        if len(idx) == 0 or times[idx[0]] > 0:
            rows.append((host, name, 0.0, 0.0))
        loads = (rates[idx] / bandwidth).tolist()  # the divisions float() / bandwidth makes
        rows.extend((host, name, t, u) for t, u in zip(times[idx].tolist(), loads, strict=True))
    return rows


class _Parts(NamedTuple):
    """A trace in pieces: what :func:`build_trace` returns as one dict and
    :func:`write_trace` writes without building a dict per span."""

    other: dict[str, Any]
    meta: list[dict[str, Any]]  # process and thread names and sort indices
    spans: tuple[list[Any], ...]  # one list per field of a complete ("X") event: SPAN_FIELDS
    counters: list[tuple[Any, ...]]  # counter ("C") events: (name, ts, pid, key, value)


def build_trace(
    events: pd.DataFrame,
    *,
    scenario: Scenario | None = None,
    metrics: pd.DataFrame | None = None,
    tables: Mapping[str, pd.DataFrame] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chrome trace of a run as a JSON-able dict (see the module docstring)."""
    parts = _trace_parts(events, scenario, metrics, tables, summary)
    complete = [
        {
            "name": name,
            "cat": cat,
            "ph": "X",
            "ts": ts,
            "dur": dur,
            "pid": pid,
            "tid": tid,
            "args": span_args(step, nbytes, detail),
        }
        for name, cat, ts, dur, pid, tid, step, nbytes, detail in zip(*parts.spans, strict=True)
    ]
    counters = [
        {"name": name, "ph": "C", "ts": ts, "pid": pid, "args": {key: value}}
        for name, ts, pid, key, value in parts.counters
    ]
    return {
        "displayTimeUnit": "ns",
        "otherData": parts.other,
        "traceEvents": parts.meta + complete + counters,
    }


def _trace_parts(
    events: pd.DataFrame,
    scenario: Scenario | None,
    metrics: pd.DataFrame | None,
    tables: Mapping[str, pd.DataFrame] | None,
    summary: Mapping[str, Any] | None,
) -> _Parts:
    """The pieces of the trace: metadata, complete events and counters (module docstring)."""
    tables = tables or {}
    roles = host_roles(events, scenario)
    tracks, spans = timeline_spans(events, scenario)
    counters = _counter_rows(metrics, tables, [h for h, r in roles.items() if r == "ps"])
    link_counters = link_counter_rows(tables)
    for host, *_ in link_counters:  # a link's host without events (or "": the network's)
        roles.setdefault(host, "network" if host == "" else "worker")
    hosts = list(roles)
    pid = {h: i + 1 for i, h in enumerate(hosts)}
    run_pid = len(hosts) + 1
    tid = _thread_ids(tracks)
    meta = _process_meta(hosts, roles, pid) + _thread_meta(tracks, pid, tid)
    if any(host is None for host, *_ in counters):
        meta += _named_process(run_pid, "run (metrics)")
    counter_events = _counter_events(counters, hosts, pid, run_pid)
    counter_events += [
        (link, _us(t), pid[host], "utilisation", value) for host, link, t, value in link_counters
    ]
    other: dict[str, Any] = {"generator": "simdist", "time_unit": "simulated microseconds"}
    if summary is not None:
        other.update(
            {k: summary[k] for k in ("name", "strategy", "simulated_time_s") if k in summary}
        )
    return _Parts(other, meta, _span_fields(spans, tracks, pid, tid), counter_events)


def _metadata(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    """A metadata ("M") event: a process's or thread's name or sort index."""
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _named_process(pid: int, name: str) -> list[dict[str, Any]]:
    """Process ``pid``'s name, and its place: its pid."""
    return [
        _metadata("process_name", pid, 0, {"name": name}),
        _metadata("process_sort_index", pid, 0, {"sort_index": pid}),
    ]


def _process_meta(
    hosts: list[str], roles: Mapping[str, str], pid: Mapping[str, int]
) -> list[dict[str, Any]]:
    """A process per host, named after it and its role, in display order."""
    return [
        event
        for host in hosts
        for event in _named_process(pid[host], f"{host or 'network'} ({_ROLE_LABELS[roles[host]]})")
    ]


def _thread_ids(tracks: list[Track]) -> dict[int, int]:
    """Each track's thread id: its rank among its host's tracks, from 1."""
    tid: dict[int, int] = {}
    per_host: dict[str, int] = {}
    for i, track in enumerate(tracks):
        per_host[track.host] = per_host.get(track.host, 0) + 1
        tid[i] = per_host[track.host]
    return tid


def _thread_meta(
    tracks: list[Track], pid: Mapping[str, int], tid: Mapping[int, int]
) -> list[dict[str, Any]]:
    """A thread per track, named by its label, placed by its thread id."""
    meta = []
    for i, track in enumerate(tracks):
        label = track.label + (" (parameter server)" if track.kind == "ps" else "")
        meta.append(_metadata("thread_name", pid[track.host], tid[i], {"name": label}))
        meta.append(_metadata("thread_sort_index", pid[track.host], tid[i], {"sort_index": tid[i]}))
    return meta


def _span_fields(
    spans: pd.DataFrame, tracks: list[Track], pid: Mapping[str, int], tid: Mapping[int, int]
) -> tuple[list[Any], ...]:
    """The complete events' columns (:data:`~simdist.report.trace_text.SPAN_FIELDS`), by
    track, then start, then end."""
    spans = spans.sort_values(["track", "start_s", "end_s"], kind="stable")
    # Microseconds as _us computes them, for every span at once (the same products).
    start_us = spans["start_s"].to_numpy(dtype=float) * 1e6
    ts = start_us.tolist()
    dur = (spans["end_s"].to_numpy(dtype=float) * 1e6 - start_us).tolist()
    kinds, details = spans["kind"].tolist(), spans["detail"].tolist()
    links, track_of = spans["link"].tolist(), spans["track"].tolist()
    track_pid = [pid[track.host] for track in tracks]
    return (
        [f"{k}: {d}" if d else k for k, d in zip(kinds, details, strict=True)],
        ["link" if link else k for k, link in zip(kinds, links, strict=True)],
        ts,
        dur,
        [track_pid[track] for track in track_of],
        [tid[track] for track in track_of],
        spans["step"].tolist(),
        spans["nbytes"].tolist(),
        details,
    )


def _counter_events(
    counters: list[tuple[str | None, str, float, float]],
    hosts: list[str],
    pid: Mapping[str, int],
    run_pid: int,
) -> list[tuple[Any, ...]]:
    """The run's metrics as counter events (name, ts, pid, args key, value), by host."""
    rank = {host: i for i, host in reversed(list(enumerate(hosts)))}  # hosts.index(host)
    return [
        (name, _us(t), run_pid if host is None else pid[host], name, value)
        for host, name, t, value in sorted(
            counters, key=lambda r: (r[0] is None, rank[r[0]] if r[0] else 0, r[1], r[2])
        )
    ]


def write_trace(result: Result | Drawn, path: Path) -> None:
    """Write ``result``'s timeline to ``path`` as a Chrome trace (``trace.json``): the text
    :func:`~simdist.report.trace_text.dumps_trace` makes of :func:`build_trace`, without a
    dict per span."""
    parts = _trace_parts(
        result.events, result.scenario, result.metrics, result.tables, result.summary
    )
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    lines = [encode(e) for e in parts.meta]
    lines += span_lines(parts.spans)
    lines += counter_lines(parts.counters)
    trace = {"displayTimeUnit": "ns", "otherData": parts.other}
    Path(path).write_text(document(trace, ",\n".join(lines)))
