"""The run as a timeline: tracks, lanes, per-device time split, and ``trace.json``.

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
  process.

A Chrome trace thread must not hold overlapping spans, but a device can do two
things at once (a worker pulls from every parameter server in parallel; a
parameter server serves several transfers whose latencies overlap).  Such
spans are spread over extra *lanes*: threads named ``w0/cpu0 #2``, ``#3`` …
beside the device's own, first-fit, so each thread's spans never overlap.

What link tracks can and cannot show.  ``events.csv`` has no link column:
each strategy records a transfer on the tracks of the devices or tasks
involved.  Link spans are therefore derived (:func:`link_of`): rows of kind
``comm`` with identical (start, end, bytes, step, detail) are one transfer;
on several hosts it is drawn on each host's NIC; on a parameter-server task
on that task's NIC; on several devices of one host (a collective) or in a
single-host run on the host's intra link.  A transfer recorded on one device
of a multi-host run with no matching peer row (parameter_server workers
record their whole pull or push phase, the servers each shard's
serialisation) cannot be placed and is left off the link tracks — the
worker's NIC is therefore not drawn in parameter_server runs, while each
server's NIC is.  Spans cover what the strategy recorded (serialisation
only, or start → arrival with latency); queueing before a transfer and the
hops of a collective inside the network are not shown, and two transfers with
identical times, size, step and detail are drawn as one.  Nothing is drawn
where no event was recorded: unrecorded time is idle.

Times are microseconds (``ts``, ``dur``); bytes are identical for identical
runs (stable ordering, one event per line, floats in shortest round-trip form).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: Spans closer than this (seconds) do not count as overlapping: float noise only.
OVERLAP_TOL_S = 1e-12

#: Time-split categories, in priority order: an instant in which a device both
#: computes and communicates counts as compute.
SPLIT_CATEGORIES = ("compute", "comm", "waiting", "other", "idle")


def split_category(kind: str) -> str:
    """The time-split category of an event kind.

    ``compute`` includes ``straggle`` (the slow excess of a straggler's
    compute: the device is still computing); ``waiting`` gathers recorded
    waits (``idle`` rows: barriers, staleness bounds; ``input_wait``; any kind
    mentioning "wait"); ``other`` is anything else recorded (eval, apply,
    checkpoint, failure, restart, …).  The category ``idle`` is time with no
    event at all.
    """
    if kind in ("compute", "straggle"):
        return "compute"
    if kind == "comm":
        return kind
    if kind == "idle" or "wait" in kind:
        return "waiting"
    return "other"


@functools.lru_cache(maxsize=4096)
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key under which ``w2`` comes before ``w10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )


def assign_lanes(starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """First-fit lane of each interval, so that intervals in one lane never overlap.

    Intervals are taken by start time (stably); each goes into the lowest lane
    whose last interval has ended.  Returns one lane index per input interval.
    """
    order = sorted(range(len(starts)), key=lambda i: (starts[i], ends[i]))
    lane_end: list[float] = []
    lanes = [0] * len(starts)
    for i in order:
        start = starts[i]
        for lane, end in enumerate(lane_end):
            if end <= start + OVERLAP_TOL_S:
                lane_end[lane] = ends[i]
                lanes[i] = lane
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(ends[i])
    return lanes


def union_seconds(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals ``[starts[i], ends[i]]``."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, float)[order], np.asarray(ends, float)[order]
    reach = np.maximum.accumulate(e)
    before = np.concatenate(([-np.inf], reach[:-1]))
    return float(np.clip(e - np.maximum(s, before), 0.0, None).sum())


# ---------------------------------------------------------------------------
# Hosts, roles and tracks
# ---------------------------------------------------------------------------


def host_roles(events: pd.DataFrame, scenario: Any = None) -> dict[str, str]:
    """Every host with events, in display order → its role.

    Roles are ``worker``, ``chief`` (when it does not train) or ``ps``; the
    scenario's host lists give the order and the parameter-server tasks;
    without a scenario, a host whose events all sit on a track named after
    itself is taken for a parameter-server task.
    """
    cluster = getattr(scenario, "cluster", None)
    workers = list(getattr(cluster, "worker_names", []))
    chiefs = list(getattr(cluster, "chief_names", []))
    ps_names = list(getattr(cluster, "ps_names", []))
    roles: dict[str, str] = {}
    seen = sorted(set(events["host"]), key=natural_key)
    for name in workers:
        if name in seen:
            roles.setdefault(name, "worker")
    for name in chiefs:
        if name in seen:
            roles.setdefault(name, "chief")
    if not ps_names:
        only_self = (events["host"] == events["device"]).groupby(events["host"]).all()
        ps_names = [h for h in seen if only_self.get(h, False) and h not in roles]
    for name in seen:
        if name not in roles and name not in ps_names:
            # parameter_server records its checkpoints on an implicit "chief" task.
            roles[name] = "chief" if name.startswith("chief") else "worker"
    for name in ps_names:
        if name in seen:
            roles[name] = "ps"
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


def link_of(hosts: Sequence[str], devices: int, roles: Mapping[str, str]) -> str | None:
    """The link a transfer recorded on ``hosts`` (by ``devices`` tracks) went over, if known.

    Several hosts: their network links (``nic``).  One host: its ``nic`` if
    it is a parameter-server task (it has no devices to talk to inside), its
    ``intra`` link if several of its devices took part (a collective inside
    the host) or if the run has a single host.  Otherwise — one device of one
    host among several, e.g. a worker's pull phase — the peer is unknown and
    None is returned.
    """
    if len(hosts) > 1:
        return "nic"
    if roles.get(hosts[0]) == "ps":
        return "nic"
    if devices > 1 or len(roles) == 1:
        return "intra"
    return None


def link_spans(events: pd.DataFrame, roles: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Transfers drawn on links, derived from comm events (see the module docstring).

    Rows of kind ``comm`` with identical (start, end, bytes, step, detail)
    are one transfer; :func:`link_of` says which link it used.  ``roles``
    defaults to :func:`host_roles` without a scenario.  Columns:
    ``start_s, end_s, host, link, nbytes, step, detail``.
    """
    columns = ["start_s", "end_s", "host", "link", "nbytes", "step", "detail"]
    comm = events[events["kind"] == "comm"]
    if comm.empty:
        return pd.DataFrame(columns=columns)
    roles = host_roles(events) if roles is None else roles
    key_cols = ["start_s", "end_s", "nbytes", "step", "detail"]
    hosts_of: dict[tuple[Any, ...], set[str]] = {}
    devices_of: dict[tuple[Any, ...], set[str]] = {}
    keys = zip(*(comm[c].tolist() for c in key_cols), strict=True)
    for key, host, device in zip(keys, comm["host"].tolist(), comm["device"].tolist(), strict=True):
        hosts_of.setdefault(key, set()).add(host)
        devices_of.setdefault(key, set()).add(device)
    rows = []
    for key in sorted(hosts_of):
        hosts = sorted(hosts_of[key], key=natural_key)
        link = link_of(hosts, len(devices_of[key]), roles)
        if link is None:
            continue
        start, end, nbytes, step, detail = key
        rows.extend((start, end, h, f"{h}/{link}", nbytes, step, detail) for h in hosts)
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
    frames = [events.assign(link="")]
    if links:
        spans = link_spans(events, roles)
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


def time_split_by_device(
    events: pd.DataFrame, sim_time_s: float, devices: Iterable[str] | None = None
) -> pd.DataFrame:
    """Seconds each device spends in each :data:`SPLIT_CATEGORIES`, overlaps counted once.

    At each instant a device is in the highest-priority category of the
    events covering it (compute > comm > waiting > other); ``idle`` is the rest
    of ``[0, sim_time_s]``.  Unlike summing durations, parallel transfers
    (a worker pulling from two parameter servers at once) are not counted
    twice, so the categories add up to ``sim_time_s``.  ``devices`` defaults
    to every device with events, in natural order.
    """
    if devices is None:
        devices = sorted(set(events["device"]), key=natural_key)
    devices = list(devices)
    cats = events["kind"].map(split_category)
    start = events["start_s"].clip(0.0, sim_time_s).to_numpy()
    end = events["end_s"].clip(0.0, sim_time_s).to_numpy()
    by_device = events.groupby("device", sort=False).indices
    all_cats = cats.to_numpy()
    rows = []
    for device in devices:
        idx = by_device.get(device, np.array([], dtype=np.int64))
        covered, row = 0.0, {}
        mask = np.zeros(len(idx), dtype=bool)
        dev_cats = all_cats[idx]
        for category in SPLIT_CATEGORIES[:-1]:
            mask |= dev_cats == category
            total = union_seconds(start[idx][mask], end[idx][mask])
            row[category] = max(0.0, total - covered)
            covered = max(covered, total)
        row["idle"] = max(0.0, sim_time_s - covered)
        rows.append(row)
    return pd.DataFrame(rows, index=pd.Index(devices, name="device"), columns=SPLIT_CATEGORIES)


def training_devices(events: pd.DataFrame) -> list[str]:
    """Devices that computed at least one gradient, in natural order."""
    return sorted(set(events.loc[events["kind"] == "compute", "device"]), key=natural_key)


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


def build_trace(
    events: pd.DataFrame,
    *,
    scenario: Any = None,
    metrics: pd.DataFrame | None = None,
    tables: Mapping[str, pd.DataFrame] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chrome trace of a run as a JSON-able dict (see the module docstring)."""
    tables = tables or {}
    roles = host_roles(events, scenario)
    tracks, spans = timeline_spans(events, scenario)
    counters = _counter_rows(metrics, tables, [h for h, r in roles.items() if r == "ps"])
    hosts = list(roles)
    pid = {h: i + 1 for i, h in enumerate(hosts)}
    run_pid = len(hosts) + 1
    role_label = {"worker": "worker", "chief": "chief", "ps": "parameter server"}

    meta: list[dict[str, Any]] = []
    for host in hosts:
        meta.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid[host],
                "tid": 0,
                "args": {"name": f"{host} ({role_label[roles[host]]})"},
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
    columns = ("start_s", "end_s", "kind", "detail", "nbytes", "step", "link", "track")
    complete: list[dict[str, Any]] = []
    for start, end, kind, detail, nbytes, step, link, track in zip(
        *(spans[c].tolist() for c in columns), strict=True
    ):
        ts = _us(start)
        args: dict[str, Any] = {"step": step}
        if nbytes:
            args["bytes"] = nbytes
        if detail:
            args["detail"] = detail
        complete.append(
            {
                "name": f"{kind}: {detail}" if detail else kind,
                "cat": "link" if link else kind,
                "ph": "X",
                "ts": ts,
                "dur": _us(end) - ts,
                "pid": pid[tracks[track].host],
                "tid": tid[track],
                "args": args,
            }
        )

    counter_events = [
        {
            "name": name,
            "ph": "C",
            "ts": _us(t),
            "pid": run_pid if host is None else pid[host],
            "args": {name: value},
        }
        for host, name, t, value in sorted(
            counters, key=lambda r: (r[0] is None, hosts.index(r[0]) if r[0] else 0, r[1], r[2])
        )
    ]
    other: dict[str, Any] = {"generator": "simdist", "time_unit": "simulated microseconds"}
    if summary is not None:
        other.update(
            {k: summary[k] for k in ("name", "strategy", "simulated_time_s") if k in summary}
        )
    return {
        "displayTimeUnit": "ns",
        "otherData": other,
        "traceEvents": meta + complete + counter_events,
    }


def dumps_trace(trace: Mapping[str, Any]) -> str:
    """Deterministic JSON text: one trace event per line, keys in a fixed order."""
    head = "".join(
        f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'), sort_keys=True)},"
        for k, v in sorted(trace.items())
        if k != "traceEvents"
    )
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    lines = [encode(e) for e in trace["traceEvents"]]
    body = ",\n".join(lines)
    return f'{{{head}"traceEvents":[\n{body}\n]}}\n'


def write_trace(result: Any, path: Path) -> None:
    """Write ``result``'s timeline to ``path`` as a Chrome trace (``trace.json``)."""
    trace = build_trace(
        result.events,
        scenario=result.scenario,
        metrics=result.metrics,
        tables=result.tables,
        summary=result.summary,
    )
    Path(path).write_text(dumps_trace(trace))
