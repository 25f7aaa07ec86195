"""Per-link telemetry: what every link carried, how long it was busy, its load over time.

Every :class:`~simdist.network.link.Link` keeps its load as a step function,
``rates = [(time_s, bytes_per_s), …]`` (the rate it carries from ``time_s`` on;
0 before the first entry), which both sharing models append to. From it come
three tables, which the engine adds to the run's tables and the report writes
as CSV:

``links.csv`` — one row per link and direction, in the topology's order (by
host, then by name): ``link, channel, direction, host, bandwidth_Bps, bytes,
busy_s, busy_share, utilisation, peak_utilisation``. ``bytes`` is the integral
of the rate; ``busy_s`` the time the rate was above 0 (``busy_share`` = over the
simulated time); ``utilisation = bytes / (bandwidth_Bps · simulated time)``, the
mean load; ``peak_utilisation`` the highest rate over the bandwidth.

Bytes are the bytes that really cross the link: a message's on every link of its
route (on the wire: payload / the protocol's ``efficiency``; a machine's
``<machine>/cpu`` link, which a protocol with a serialisation cost adds, the
payload it encodes and decodes), a collective's per link from its algorithm's
messages (:meth:`~simdist.network.topology.Topology.collective_link_bytes`). One caveat
follows from the closed forms: on a ``shared`` intra-host link (one link for
all of a host's devices) a collective's time gives every ring edge inside the
host the link's full bandwidth, so while d devices all-reduce over it the link
carries up to d × its bandwidth and its utilisation exceeds 1.

``link_buckets.csv`` — the load over time as a long table, one row per link
that carried anything and per fixed bucket: ``link, bucket_start_s,
bucket_end_s, bytes, utilisation`` (utilisation = the bucket's bytes over
``bandwidth_Bps`` times the bucket's length). Buckets are all as wide,
``1, 2 or 5 × 10^k`` seconds, the narrowest giving at most
:data:`MAX_BUCKETS` buckets; the last one ends with the run. Links that never
carried a byte are in ``links.csv`` only.

``link_load.csv`` — the step function itself, for the timeline (``trace.json``
draws a counter track per link from it): one row per change of a link's load,
``link, time_s, rate_Bps``, each link's rows in time order, the rate holding
until the link's next row (or the end of the run).

Pure computation on the links after the run: no SimPy clock, no JAX, no
matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from simdist.network.load_steps import binned_steps, point_count

if TYPE_CHECKING:
    import pandas as pd

    from simdist.network.core import Network
    from simdist.network.link import Link

#: At most this many time buckets in ``link_buckets.csv`` and the heatmap.
MAX_BUCKETS = 60
#: At most this many changes of load kept exactly, over all links (see link_steps).
MAX_LOAD_POINTS = 500_000

LINK_COLUMNS = (
    "link",
    "channel",
    "direction",
    "host",
    "bandwidth_Bps",
    "bytes",
    "busy_s",
    "busy_share",
    "utilisation",
    "peak_utilisation",
)
BUCKET_COLUMNS = ("link", "bucket_start_s", "bucket_end_s", "bytes", "utilisation")
LOAD_COLUMNS = ("link", "time_s", "rate_Bps")
#: dtypes of the three tables, so a report read back (an empty one too) equals the run's.
TABLE_DTYPES: dict[str, dict[str, str]] = {
    "links": {c: "str" if i < 4 else "float64" for i, c in enumerate(LINK_COLUMNS)},
    "link_buckets": {c: "str" if c == "link" else "float64" for c in BUCKET_COLUMNS},
    "link_load": {c: "str" if c == "link" else "float64" for c in LOAD_COLUMNS},
}


def network_links(network: Network) -> list[Link]:
    """Every link of a :class:`~simdist.network.Network`: its topology's, in their order,
    then the machines' CPU links a protocol with a serialisation cost made (by name)."""
    links = list(network.topology.links())
    seen = {id(link) for link in links}
    cpu = network.transport.cpu
    links += [link for _, link in sorted(cpu.items()) if id(link) not in seen]
    return links


def bucket_width_s(end_s: float, max_buckets: int = MAX_BUCKETS) -> float:
    """The narrowest width of ``1, 2 or 5 × 10^k`` seconds giving at most ``max_buckets``."""
    if not end_s > 0:
        raise ValueError(f"end_s must be > 0, got {end_s}")
    if max_buckets < 1:
        raise ValueError(f"max_buckets must be >= 1, got {max_buckets}")
    exponent = math.floor(math.log10(end_s / max_buckets))
    for e in (exponent - 1, exponent, exponent + 1):
        for m in (1, 2, 5):
            width = _decimal(m, e)
            if math.ceil(end_s / width) <= max_buckets:
                return width
    return _decimal(1, exponent + 2)


def _decimal(m: int, e: int) -> float:
    """``m × 10^e``, correctly rounded (``3 × 2 / 1000`` is ``0.006``, not ``0.006000…01``)."""
    return float(m * 10**e) if e >= 0 else m / 10**-e


def bucket_edges(end_s: float, width_s: float) -> np.ndarray:
    """Bucket boundaries ``0, w, 2w, …, end_s`` (the last bucket may be shorter)."""
    count = max(1, math.ceil(end_s / width_s - 1e-9))
    mantissa, exponent = _split(width_s)
    edges = [_decimal(k * mantissa, exponent) if mantissa else k * width_s for k in range(count)]
    return np.asarray([*edges, end_s], dtype=np.float64)


def _split(width_s: float) -> tuple[int, int]:
    """(m, e) with ``width_s == m × 10^e`` for a small integer m, or (0, 0) when there is none."""
    e = math.floor(math.log10(width_s))
    for m in (1, 2, 5):
        if _decimal(m, e) == width_s:
            return m, e
    return 0, 0


class _Loads:
    """Every link's load at once, as flat arrays (one pass of numpy for thousands of links).

    ``changes`` and ``owner``: every ``(time_s, rate)`` up to ``end_s`` (inclusive, for
    ``link_load``) and the index of its link. The integral uses the changes strictly
    before ``end_s``: segment ``k`` of link ``link[k]`` starts at ``times[k]``, carries
    ``rates[k]`` and lasts ``durations[k]`` (to its link's next change, or ``end_s``).
    Per link: ``bytes``, ``busy_s`` (time at a rate above 0) and ``peak`` (highest rate).
    """

    def __init__(self, links: Sequence[Link], end_s: float) -> None:
        n = len(links)
        steps = link_steps(links, end_s)
        counts = np.fromiter((len(rates) for rates in steps), np.int64, n)
        flat = np.fromiter(
            chain.from_iterable(chain.from_iterable(steps)),
            np.float64,
            2 * int(counts.sum()),
        ).reshape(-1, 2)
        owner = np.repeat(np.arange(n), counts)
        upto = flat[:, 0] <= end_s
        self.changes, self.owner = flat[upto], owner[upto]
        before = flat[:, 0] < end_s
        self.times, self.rates, self.link = (
            flat[before, 0].clip(0.0),
            flat[before, 1],
            owner[before],
        )
        following = np.append(self.times[1:], end_s)
        following[np.append(self.link[1:] != self.link[:-1], True)] = end_s  # a link's last
        self.durations = following - self.times
        self.bytes = np.bincount(self.link, weights=self.rates * self.durations, minlength=n)
        self.busy_s = np.bincount(self.link, weights=self.durations * (self.rates > 0), minlength=n)
        self.peak = np.zeros(n)
        np.maximum.at(self.peak, self.link, self.rates)


def link_steps(links: Sequence[Link], end_s: float) -> list[list[tuple[float, float]]]:
    """Every link's load as a step function: exact (``Link.rates``) while all of them
    together change at most :data:`MAX_LOAD_POINTS` times, else binned.

    Under fair sharing the exact load can change O(flows in flight) times per event (a
    bottleneck shared by n flows changes the rate of every link those flows cross), so
    a run of many workers has O(events × workers) changes. Above the budget, each
    fair-shared link's load is its mean rate in each of at most ``MAX_LOAD_POINTS /
    links`` equal bins (:func:`~simdist.network.load_steps.binned_steps`): bytes stay
    exact, while peaks and idle gaps inside a bin are averaged away.
    """
    entries = sum(len(link.load_log) or len(link.rates) for link in links)
    exact = True
    if entries > MAX_LOAD_POINTS // 20:  # count first: building them all may be wasted
        total = 0
        for link in links:
            left = MAX_LOAD_POINTS - total
            total += point_count(link.load_log, left) if link.load_log else len(link.rates)
            if total > MAX_LOAD_POINTS:
                exact = False
                break
    if exact:
        steps, total = [], 0
        for link in links:
            rates = link.rates  # fair links: rebuilt from their logs, counted as they come
            total += len(rates)
            if total > MAX_LOAD_POINTS:
                break
            steps.append(rates)
        if total <= MAX_LOAD_POINTS:
            return steps
    if not end_s > 0:  # nothing to bin over
        return [link.rates for link in links]
    fair = sum(1 for link in links if link.load_log)
    width = bucket_width_s(end_s, max(MAX_BUCKETS, MAX_LOAD_POINTS // max(fair, 1)))
    edges = bucket_edges(end_s, width).tolist()
    return [binned_steps(link.load_log, edges) if link.load_log else link.rates for link in links]


def link_rows(links: Sequence[Link], end_s: float) -> list[dict[str, Any]]:
    """One ``links.csv`` row per link (see the module docstring)."""
    columns = _link_columns(links, _Loads(links, end_s), end_s)
    return [
        dict(zip(LINK_COLUMNS, row, strict=True)) for row in zip(*columns.values(), strict=True)
    ]


def _link_columns(links: Sequence[Link], loads: _Loads, end_s: float) -> dict[str, Any]:
    """``links.csv``'s columns, one entry per link."""
    capacity = np.array([link.bandwidth_Bps for link in links], dtype=np.float64)
    seconds = capacity * end_s
    with np.errstate(divide="ignore", invalid="ignore"):
        busy_share = loads.busy_s / end_s if end_s > 0 else np.zeros(len(links))
        utilisation = np.where(seconds > 0, loads.bytes / seconds, 0.0)
    return {
        "link": [link.name for link in links],
        "channel": [link.channel for link in links],
        "direction": [link.direction for link in links],
        "host": [link.host for link in links],
        "bandwidth_Bps": capacity,
        "bytes": loads.bytes,
        "busy_s": loads.busy_s,
        "busy_share": busy_share,
        "utilisation": utilisation,
        "peak_utilisation": loads.peak / capacity,
    }


def bucket_rows(
    links: Sequence[Link], end_s: float, width_s: float | None = None
) -> list[dict[str, Any]]:
    """``link_buckets.csv`` rows: every link that carried bytes, bucket by bucket."""
    columns = _bucket_columns(links, _Loads(links, end_s), end_s, width_s)
    return [
        dict(zip(BUCKET_COLUMNS, row, strict=True)) for row in zip(*columns.values(), strict=True)
    ]


def _bucket_columns(
    links: Sequence[Link], loads: _Loads, end_s: float, width_s: float | None
) -> dict[str, Any]:
    """``link_buckets.csv``'s columns, built as arrays (a link × bucket table can be long).

    Every busy segment of every link adds ``rate × overlap`` to each bucket it overlaps
    (one add per segment and bucket, no differences of running totals, so an idle
    bucket is exactly 0 and a segment inside one bucket adds exactly its bytes).
    """
    used = np.flatnonzero(loads.bytes > 0)
    if end_s > 0 and len(used):
        edges = bucket_edges(end_s, bucket_width_s(end_s) if width_s is None else width_s)
    else:
        edges, used = np.zeros(1), used[:0]
    count = len(edges) - 1
    grid = np.zeros((len(used), count))
    busy = loads.rates > 0
    if len(used) and busy.any():
        row_of = np.full(len(links), -1)
        row_of[used] = np.arange(len(used))
        start, seconds = loads.times[busy], loads.durations[busy]
        rate, row = loads.rates[busy], row_of[loads.link[busy]]
        stop = start + seconds
        first = (np.searchsorted(edges, start, side="right") - 1).clip(0, count - 1)
        last = np.maximum((np.searchsorted(edges, stop, side="left") - 1).clip(0, count - 1), first)
        spans = last - first + 1
        seg = np.repeat(np.arange(len(start)), spans)
        bucket = first[seg] + np.arange(len(seg)) - np.repeat(np.cumsum(spans) - spans, spans)
        inside = np.minimum(stop[seg], edges[bucket + 1]) - np.maximum(start[seg], edges[bucket])
        amount = rate[seg] * np.where(spans[seg] == 1, seconds[seg], inside)
        np.add.at(grid, (row[seg], bucket), amount)
    capacity = np.array([links[i].bandwidth_Bps for i in used]).reshape(-1, 1) * np.diff(edges)
    return {
        "link": np.repeat(np.array([links[i].name for i in used], dtype=object), count),
        "bucket_start_s": np.tile(edges[:-1], len(used)),
        "bucket_end_s": np.tile(edges[1:], len(used)),
        "bytes": grid.ravel(),
        "utilisation": (grid / capacity).ravel() if len(used) else np.zeros(0),
    }


def load_columns(links: Sequence[Link], end_s: float) -> dict[str, Any]:
    """``link_load.csv``'s columns: every change of every link's load up to ``end_s``."""
    return _load_columns(links, _Loads(links, end_s))


def _load_columns(links: Sequence[Link], loads: _Loads) -> dict[str, Any]:
    names = np.array([link.name for link in links], dtype=object)
    return {
        "link": names[loads.owner] if len(names) else np.zeros(0, dtype=object),
        "time_s": loads.changes[:, 0],
        "rate_Bps": loads.changes[:, 1],
    }


def link_frames(
    links: Sequence[Link], end_s: float, width_s: float | None = None
) -> dict[str, pd.DataFrame]:
    """The telemetry tables of a run ending at ``end_s``: ``links``, ``link_buckets``,
    ``link_load`` (see the module docstring); ``width_s`` overrides the bucket width."""
    import pandas as pd

    loads = _Loads(links, end_s)
    frames = {
        "links": pd.DataFrame(_link_columns(links, loads, end_s)),
        "link_buckets": pd.DataFrame(_bucket_columns(links, loads, end_s, width_s)),
        "link_load": pd.DataFrame(_load_columns(links, loads)),
    }
    return {name: _typed(frame, TABLE_DTYPES[name]) for name, frame in frames.items()}


def _typed(frame: pd.DataFrame, dtypes: dict[str, str]) -> pd.DataFrame:
    """``frame`` with ``dtypes``, converting only the columns that differ (``astype`` of a
    whole frame costs milliseconds, which a short run pays per table)."""
    have = dict(zip(frame.columns, frame.dtypes, strict=True))  # not a Series per column
    wrong = {column: dtype for column, dtype in dtypes.items() if have[column] != dtype}
    return frame.astype(wrong) if wrong else frame
