"""The run as tracks: one per device, parameter-server task or link, spread over lanes.

A Chrome trace thread must not hold overlapping spans, but a device can do two
things at once (a worker pulls from every parameter server in parallel; a
parameter server serves several transfers whose latencies overlap).  Such
spans are spread over extra *lanes*: threads named ``w0/cpu0 #2``, ``#3`` …
beside the device's own, first-fit, so each thread's spans never overlap.

Link tracks come from the ``links`` column of ``events.csv``, which the
network layer fills (:mod:`simdist.network`): every ``comm`` row names the links
of its host that the bytes occupied, and each is drawn on that link's track
(identical spans recorded by several devices of one host are drawn once).
Roles and the order of hosts come from the scenario's cluster
(:attr:`simdist.hardware.cluster.Cluster.roles`); hosts it does not name come last.
``trace.json`` (:mod:`simdist.report.trace`) draws these tracks, lanes included;
``timeline.png`` (:mod:`simdist.report.timeline`) draws each track as one row, with
overlapping spans side by side inside it, so that one device never looks like two.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simdist.summary import natural_key

if TYPE_CHECKING:
    from simdist.scenario import Scenario

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


def host_roles(events: pd.DataFrame, scenario: Scenario | None = None) -> dict[str, str]:
    """Every host with events, in display order → its role (``worker``, ``chief`` or ``ps``).

    Roles and order come from the scenario's cluster: workers, the coordinator,
    the parameter-server tasks. Hosts the scenario does not name (or every host,
    without a scenario) follow as ``worker``, in natural order.
    """
    seen = set(events["host"].unique())
    roles: dict[str, str] = {}
    if scenario is not None:
        from simdist.hardware.cluster import Cluster

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


def device_tracks(
    events: pd.DataFrame, scenario: Scenario | None = None, *, links: bool = True
) -> tuple[pd.DataFrame, list[tuple[Track, np.ndarray]]]:
    """Every device, parameter-server task and (when asked for) link once, in display order.

    Returns the spans (the events' columns, ``links`` replaced by ``link``: the link's
    name on link spans, which have kind ``comm``) and, per track, its :class:`Track`
    (lane 0) with the positions of its spans in that frame.  :func:`timeline_spans`
    spreads each track's spans over lanes; ``timeline.png`` draws each track as one row
    (:func:`simdist.report.timeline.timeline_layout`).
    """
    roles = host_roles(events, scenario)
    frames = [events.drop(columns="links", errors="ignore").assign(link="")]
    if links:
        spans = link_spans(events)
        if not spans.empty:
            frames.append(spans.assign(device=spans["link"], kind="comm"))
    spans = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    host_rank = {h: i for i, h in enumerate(roles)}
    is_link = (spans["link"] != "").to_numpy()
    groups = spans.groupby([spans["host"], spans["device"], is_link], sort=False).indices
    tracks = []
    for host, name, link in sorted(
        groups, key=lambda k: (host_rank.get(k[0], len(host_rank)), k[2], natural_key(k[1]))
    ):
        kind = "link" if link else ("ps" if roles.get(host) == "ps" else "device")
        tracks.append((Track(host, str(name), kind, 0), groups[(host, name, link)]))
    return spans, tracks


def timeline_spans(
    events: pd.DataFrame, scenario: Scenario | None = None, *, links: bool = True
) -> tuple[list[Track], pd.DataFrame]:
    """Every span placed on a track (lane included), ready to draw.

    Returns the tracks in display order and a frame with the events'
    columns plus ``track`` (index into the track list); link spans, when
    asked for, have kind ``comm`` and ``link`` set to the link's name.
    """
    spans, groups = device_tracks(events, scenario, links=links)
    tracks: list[Track] = []
    track_col = np.zeros(len(spans), dtype=np.int64)
    starts, ends = spans["start_s"].to_numpy(), spans["end_s"].to_numpy()
    for track, idx in groups:
        lanes = assign_lanes(starts[idx].tolist(), ends[idx].tolist())
        base = len(tracks)
        tracks.extend(
            Track(track.host, track.name, track.kind, lane) for lane in range(max(lanes) + 1)
        )
        track_col[idx] = base + np.asarray(lanes, dtype=np.int64)
    return tracks, spans.assign(track=track_col)
