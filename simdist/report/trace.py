"""The run as a timeline: tracks, lanes and ``trace.json`` (the time split: simdist.summary).

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

A Chrome trace thread must not hold overlapping spans, but a device can do two
things at once (a worker pulls from every parameter server in parallel; a
parameter server serves several transfers whose latencies overlap).  Such
spans are spread over extra *lanes*: threads named ``w0/cpu0 #2``, ``#3`` …
beside the device's own, first-fit, so each thread's spans never overlap.

Link tracks come from the ``links`` column of ``events.csv``, which the
network layer fills (:mod:`simdist.network`): every ``comm`` row names the links
of its host that the bytes occupied, and each is drawn on that link's track
(identical spans recorded by several devices of one host are drawn once).
Spans cover what was recorded: a collective from the moment it holds its links
to its end, a device's message from grant to arrival, a parameter server's
message for the time its NIC serialised it, a worker's parallel pulls or pushes
as one phase. Queueing before a transfer is drawn on the waiting device, not on
the link. Roles and the order of hosts come from the scenario's cluster
(:attr:`simdist.cluster.Cluster.roles`); hosts it does not name come last.

Times are microseconds (``ts``, ``dur``); bytes are identical for identical
runs (stable ordering, one event per line, floats in shortest round-trip form).
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from simdist.summary import natural_key

#: Spans closer than this (seconds) do not count as overlapping: float noise only.
OVERLAP_TOL_S = 1e-12


def assign_lanes(starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """First-fit lane of each interval, so that intervals in one lane never overlap.

    Intervals are taken by start time (stably); each goes into the lowest lane
    whose last interval has ended.  Returns one lane index per input interval.
    """
    order = sorted(range(len(starts)), key=lambda i: (starts[i], ends[i]))
    lanes = [0] * len(starts)
    # A lane whose last interval has ended by one start has ended by every later one (the
    # starts come in order), so lanes move once from ``busy`` (a heap of (end, lane)) to
    # ``free`` (a heap of lane numbers), and the lowest free lane is the first that fits.
    busy: list[tuple[float, int]] = []
    free: list[int] = []
    for i in order:
        start = starts[i]
        while busy and busy[0][0] <= start + OVERLAP_TOL_S:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy) + len(free)
        lanes[i] = lane
        heapq.heappush(busy, (ends[i], lane))
    return lanes


# ---------------------------------------------------------------------------
# Hosts, roles and tracks
# ---------------------------------------------------------------------------


def host_roles(events: pd.DataFrame, scenario: Any = None) -> dict[str, str]:
    """Every host with events, in display order → its role (``worker``, ``chief`` or ``ps``).

    Roles and order come from the scenario's cluster: workers, the coordinator,
    the parameter-server tasks. Hosts the scenario does not name (or every host,
    without a scenario) follow as ``worker``, in natural order.
    """
    seen = set(events["host"].unique())
    roles: dict[str, str] = {}
    if scenario is not None:
        from simdist.cluster import Cluster

        roles = {h: r for h, r in Cluster(scenario.cluster).roles.items() if h in seen}
    for name in sorted(seen - set(roles), key=natural_key):
        roles[name] = "worker"
    return roles


@dataclass(frozen=True)
class Track:
    """One row of the timeline: a device, a parameter-server task or a link, and a lane."""

    host: str
    name: str  # device name, PS task name, or link name (``w0/nic``)
    kind: str  # "device", "ps" or "link"
    lane: int

    @property
    def label(self) -> str:
        """What the viewer shows: the name, with ``#k`` for extra lanes."""
        return self.name if self.lane == 0 else f"{self.name} #{self.lane + 1}"


def link_spans(events: pd.DataFrame) -> pd.DataFrame:
    """The spans of every link, from the ``links`` column of the ``comm`` events.

    Columns: ``start_s, end_s, host, link, nbytes, step, detail``; a span that
    several rows name (the devices of one host in a collective) appears once.
    """
    columns = ["start_s", "end_s", "host", "link", "nbytes", "step", "detail"]
    if "links" not in events.columns:
        return pd.DataFrame(columns=columns)
    comm = events[(events["kind"] == "comm") & (events["links"] != "")]
    if comm.empty:
        return pd.DataFrame(columns=columns)
    cols = ["start_s", "end_s", "host", "links", "nbytes", "step", "detail"]
    rows, seen = [], set()
    for start, end, host, cell, nbytes, step, detail in zip(
        *(comm[c].tolist() for c in cols), strict=True
    ):
        for link in cell.split(";"):
            row = (start, end, host, link, nbytes, step, detail)
            if row not in seen:
                seen.add(row)
                rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def timeline_spans(
    events: pd.DataFrame, scenario: Any = None, *, links: bool = True
) -> tuple[list[Track], pd.DataFrame]:
    """Every span placed on a track (lane included), ready to draw.

    Returns the tracks in display order and a frame with the events'
    columns plus ``track`` (index into the track list); link spans, when
    asked for, have kind ``comm`` and ``link`` set to the link's name.
    """
    roles = host_roles(events, scenario)
    frames = [events.drop(columns="links", errors="ignore").assign(link="")]
    if links:
        spans = link_spans(events)
        if not spans.empty:
            frames.append(spans.assign(device=spans["link"], kind="comm"))
    spans = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    tracks: list[Track] = []
    track_col = np.zeros(len(spans), dtype=np.int64)
    host_rank = {h: i for i, h in enumerate(roles)}
    is_link = (spans["link"] != "").to_numpy()
    groups = spans.groupby([spans["host"], spans["device"], is_link], sort=False).indices
    starts, ends = spans["start_s"].to_numpy(), spans["end_s"].to_numpy()
    for host, name, link in sorted(
        groups, key=lambda k: (host_rank.get(k[0], len(host_rank)), k[2], natural_key(k[1]))
    ):
        idx = groups[(host, name, link)]
        kind = "link" if link else ("ps" if roles.get(host) == "ps" else "device")
        lanes = assign_lanes(starts[idx].tolist(), ends[idx].tolist())
        base = len(tracks)
        tracks.extend(Track(host, str(name), kind, lane) for lane in range(max(lanes) + 1))
        track_col[idx] = base + np.asarray(lanes, dtype=np.int64)
    return tracks, spans.assign(track=track_col)


# ---------------------------------------------------------------------------
# trace.json
# ---------------------------------------------------------------------------


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
    spans: tuple[list[Any], ...]  # one list per field of a complete ("X") event: _SPAN_FIELDS
    counters: list[tuple[Any, ...]]  # counter ("C") events: (name, ts, pid, key, value)


#: The fields of a complete event in :attr:`_Parts.spans`, in order.
_SPAN_FIELDS = ("name", "cat", "ts", "dur", "pid", "tid", "step", "nbytes", "detail")


def build_trace(
    events: pd.DataFrame,
    *,
    scenario: Any = None,
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
            "args": _span_args(step, nbytes, detail),
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


def _span_args(step: Any, nbytes: Any, detail: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"step": step}
    if nbytes:
        args["bytes"] = nbytes
    if detail:
        args["detail"] = detail
    return args


def _trace_parts(
    events: pd.DataFrame,
    scenario: Any,
    metrics: pd.DataFrame | None,
    tables: Mapping[str, pd.DataFrame] | None,
    summary: Mapping[str, Any] | None,
) -> _Parts:
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
    role_label = {"worker": "worker", "chief": "chief", "ps": "parameter server"}
    role_label["network"] = "links"  # links of no host: a leaf-spine network's uplinks

    meta: list[dict[str, Any]] = []
    for host in hosts:
        meta.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid[host],
                "tid": 0,
                "args": {"name": f"{host or 'network'} ({role_label[roles[host]]})"},
            }
        )
        meta.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid[host],
                "tid": 0,
                "args": {"sort_index": pid[host]},
            }
        )
    tid: dict[int, int] = {}
    per_host: dict[str, int] = {}
    for i, track in enumerate(tracks):
        per_host[track.host] = per_host.get(track.host, 0) + 1
        tid[i] = per_host[track.host]
        label = track.label + (" (parameter server)" if track.kind == "ps" else "")
        meta.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid[track.host],
                "tid": tid[i],
                "args": {"name": label},
            }
        )
        meta.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": pid[track.host],
                "tid": tid[i],
                "args": {"sort_index": tid[i]},
            }
        )
    if any(host is None for host, *_ in counters):
        meta.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": run_pid,
                "tid": 0,
                "args": {"name": "run (metrics)"},
            }
        )
        meta.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": run_pid,
                "tid": 0,
                "args": {"sort_index": run_pid},
            }
        )

    spans = spans.sort_values(["track", "start_s", "end_s"], kind="stable")
    # Microseconds as _us computes them, for every span at once (the same products).
    start_us = spans["start_s"].to_numpy(dtype=float) * 1e6
    ts = start_us.tolist()
    dur = (spans["end_s"].to_numpy(dtype=float) * 1e6 - start_us).tolist()
    kinds, details = spans["kind"].tolist(), spans["detail"].tolist()
    links, track_of = spans["link"].tolist(), spans["track"].tolist()
    track_pid = [pid[track.host] for track in tracks]
    span_fields = (
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

    # Counter events as (name, ts, pid, args key, value): run metrics, then links' loads.
    rank = {host: i for i, host in reversed(list(enumerate(hosts)))}  # hosts.index(host)
    counter_events = [
        (name, _us(t), run_pid if host is None else pid[host], name, value)
        for host, name, t, value in sorted(
            counters, key=lambda r: (r[0] is None, rank[r[0]] if r[0] else 0, r[1], r[2])
        )
    ]
    counter_events += [
        (link, _us(t), pid[host], "utilisation", value) for host, link, t, value in link_counters
    ]
    other: dict[str, Any] = {"generator": "simdist", "time_unit": "simulated microseconds"}
    if summary is not None:
        other.update(
            {k: summary[k] for k in ("name", "strategy", "simulated_time_s") if k in summary}
        )
    return _Parts(other, meta, span_fields, counter_events)


def dumps_trace(trace: Mapping[str, Any]) -> str:
    """Deterministic JSON text: one trace event per line, keys in a fixed order."""
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    events = trace["traceEvents"]
    # One encoder call for the whole list (one call per event took 0.36 s for ps_4w2s's
    # 42,000 events, this 0.24 s), then a line break between events. Every event's first
    # key is "name", and a string value cannot hold an unescaped quote, so '},{"name":'
    # only occurs between two events unless an event nests a list of such objects: then
    # the count tells, and each event is encoded on its own.
    joined = encode(events)[1:-1]
    body = joined.replace(_BETWEEN, _BETWEEN_LINES)
    named = all(next(iter(e), None) == "name" for e in events)
    if not named or len(body) - len(joined) != max(len(events) - 1, 0):
        body = ",\n".join(encode(e) for e in events)
    return _document(trace, body)


def _document(trace: Mapping[str, Any], body: str) -> str:
    """The text of ``trace`` whose events, encoded one per line, are ``body``."""
    head = "".join(
        f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'), sort_keys=True)},"
        for k, v in sorted(trace.items())
        if k != "traceEvents"
    )
    return f'{{{head}"traceEvents":[\n{body}\n]}}\n'


def _span_lines(spans: tuple[list[Any], ...]) -> list[str]:
    """Each complete event of ``spans`` (:data:`_SPAN_FIELDS`) as the JSON encoder writes
    its dict (:func:`build_trace`), formatted directly: no dict per span.

    Numbers as the encoder writes them (``int.__repr__``, ``float.__repr__``), strings
    through its own escaping, each distinct string once. Should a field hold anything
    else — a float that is not finite, which the encoder refuses, or another type (none
    does today) — every span goes through the encoder instead.
    """
    name, cat, ts, dur, pid, tid, step, nbytes, detail = spans
    if not (
        all(_strings(column) for column in (name, cat, detail))
        and all(_numbers(column) for column in (ts, dur, pid, tid, step, nbytes))
    ):
        encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        keys = ("name", "cat", "ph", "ts", "dur", "pid", "tid", "args")
        return [
            encode(dict(zip(keys, (n, c, "X", t, d, p, i, _span_args(s, b, e)), strict=True)))
            for n, c, t, d, p, i, s, b, e in zip(*spans, strict=True)
        ]
    quoted = {text: encode_basestring_ascii(text) for text in {*name, *cat, *detail}}
    return [
        f'{{"name":{quoted[n]},"cat":{quoted[c]},"ph":"X","ts":{t!r},"dur":{d!r},'
        f'"pid":{p!r},"tid":{i!r},"args":{{"step":{s!r}'
        + (f',"bytes":{b!r}' if b else "")
        + (f',"detail":{quoted[e]}' if e else "")
        + "}}"
        for n, c, t, d, p, i, s, b, e in zip(*spans, strict=True)
    ]


def _counter_lines(counters: list[tuple[Any, ...]]) -> list[str]:
    """Each counter event as the JSON encoder writes its dict (:func:`build_trace`); as
    :func:`_span_lines`, through the encoder when a field is not a plain str or number."""
    columns = tuple(map(list, zip(*counters, strict=True))) or ([],) * 5
    name, ts, pid, key, value = columns
    if not (_strings(name) and _strings(key) and all(map(_numbers, (ts, pid, value)))):
        encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        return [
            encode({"name": n, "ph": "C", "ts": t, "pid": p, "args": {k: v}})
            for n, t, p, k, v in counters
        ]
    quoted = {text: encode_basestring_ascii(text) for text in {*name, *key}}
    return [
        f'{{"name":{quoted[n]},"ph":"C","ts":{t!r},"pid":{p!r},"args":{{{quoted[k]}:{v!r}}}}}'
        for n, t, p, k, v in counters
    ]


def _strings(column: list[Any]) -> bool:
    return set(map(type, column)) <= {str}


def _numbers(column: list[Any]) -> bool:
    """Plain ints, or plain ints and finite floats (what the encoder writes with repr)."""
    kinds = set(map(type, column))
    if kinds <= {int}:
        return True
    return kinds <= {int, float} and bool(np.isfinite(np.asarray(column, dtype=float)).all())


_BETWEEN = '},{"name":'
_BETWEEN_LINES = '},\n{"name":'


def write_trace(result: Any, path: Path) -> None:
    """Write ``result``'s timeline to ``path`` as a Chrome trace (``trace.json``): the text
    :func:`dumps_trace` makes of :func:`build_trace`, without a dict per span."""
    parts = _trace_parts(
        result.events, result.scenario, result.metrics, result.tables, result.summary
    )
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    lines = [encode(e) for e in parts.meta]
    lines += _span_lines(parts.spans)
    lines += _counter_lines(parts.counters)
    trace = {"displayTimeUnit": "ns", "otherData": parts.other}
    Path(path).write_text(_document(trace, ",\n".join(lines)))
