"""A fair-shared link's load over time, rebuilt after the fact from what fair sharing logged.

Under fair sharing a link's rate changes whenever the level of any flow crossing it
changes, and when one bottleneck is shared by n flows that is every flow event on it:
writing every link's rate at every change costs O(n) per event. So
:class:`~simdist.network.fair.FairShare` writes O(1) per event instead:

* each *group* (the flows fixed at one bottleneck, :class:`~simdist.network.fair.Group`)
  keeps its speed over time, ``times`` and ``speeds``;
* each link keeps a ``load_log``: ``(time_s, ((group, bytes_per_s_at_speed_1), …))``
  whenever the set of flows crossing it, or their groups, change.

From these, :func:`load_steps` rebuilds the step function ``[(time_s, bytes/s), …]`` that
:mod:`simdist.network.telemetry` reads (``Link.rates``): between two log entries, the
link carries ``Σ coef · speed(t)`` over its groups, and changes when one of their speeds
does. Pure computation after the fact: no SimPy, no JAX.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, Protocol


class SpeedHistory(Protocol):
    """A group's speed over time: ``speeds[k]`` from ``times[k]`` on (times sorted)."""

    times: list[float]
    speeds: list[float]


LogEntry = tuple[float, tuple[tuple[Any, float], ...]]


def _put(out: list[tuple[float, float]], time_s: float, rate: float) -> None:
    """``Link.set_rate``'s rule: a later value at one instant replaces the earlier; an
    unchanged rate is not repeated."""
    if out and out[-1][0] == time_s:
        out.pop()
    if not out or out[-1][1] != rate:
        out.append((time_s, rate))


def load_steps(log: Sequence[LogEntry]) -> list[tuple[float, float]]:
    """The step function ``[(time_s, bytes/s), …]`` of a link whose ``load_log`` is ``log``."""
    out: list[tuple[float, float]] = []
    last = len(log) - 1
    for i, (start, carried) in enumerate(log):
        end = log[i + 1][0] if i < last else float("inf")
        if not carried:
            _put(out, start, 0.0)
        elif len(carried) == 1:
            group, coef = carried[0]
            times, speeds = group.times, group.speeds
            first = max(bisect_right(times, start) - 1, 0)
            _put(out, start, 0.0 + coef * speeds[first])
            for k in range(first + 1, len(times)):
                at = times[k]
                if at >= end:
                    break
                _put(out, at, 0.0 + coef * speeds[k])
        else:
            _merged(out, carried, start, end)
    return out


def _merged(
    out: list[tuple[float, float]],
    carried: tuple[tuple[Any, float], ...],
    start: float,
    end: float,
) -> None:
    """The rates of an interval ``[start, end)`` in which several groups cross the link."""
    at_k = []
    changes: set[float] = {start}
    for group, _ in carried:
        times = group.times
        k = max(bisect_right(times, start) - 1, 0)
        at_k.append(k)
        for t in times[k + 1 :]:
            if t >= end:
                break
            changes.add(t)
    for t in sorted(changes):
        rate = 0.0
        for j, (group, coef) in enumerate(carried):
            times = group.times
            k = at_k[j]
            while k + 1 < len(times) and times[k + 1] <= t:
                k += 1
            at_k[j] = k
            rate += coef * group.speeds[k]
        _put(out, t, rate)


def point_count(log: Sequence[LogEntry], limit: float = float("inf")) -> int:
    """How many changes :func:`load_steps` can give for ``log`` (an upper bound, counted
    without building them): the entries, and every speed change of a group crossing the
    link while it does. Counting stops once past ``limit``."""
    count = 0
    last = len(log) - 1
    for i, (start, carried) in enumerate(log):
        end = log[i + 1][0] if i < last else float("inf")
        count += 1
        for group, _ in carried:
            times = group.times
            if times[-1] > start:
                count += bisect_right(times, end) - bisect_right(times, start)
        if count > limit:
            break
    return count


def binned_steps(log: Sequence[LogEntry], edges: Sequence[float]) -> list[tuple[float, float]]:
    """The link's mean rate in each bin ``[edges[b], edges[b + 1])``, as a step function.

    Each bin's bytes are the integral of the load over it, taken from the groups' clocks
    (``coef · Δclock``, the clock read from its history: ``clocks[k] + speeds[k] · (t −
    times[k])``), so the bins add up to the link's bytes; what happens inside a bin (its
    peak, when it was idle) is averaged away. For runs whose exact load has too many
    changes to keep (:mod:`simdist.network.telemetry`).
    """
    bins = len(edges) - 1
    carried_bytes = [0.0] * bins
    end_s = edges[-1]
    last = len(log) - 1
    for i, (start, carried) in enumerate(log):
        if not carried or start >= end_s:
            continue
        stop = log[i + 1][0] if i < last else end_s
        if stop > end_s:
            stop = end_s
        if stop <= start:
            continue
        first = max(bisect_right(edges, start) - 1, 0)
        for group, coef in carried:
            times, speeds, clocks = group.times, group.speeds, group.clocks
            n = len(times)
            k = max(bisect_right(times, start) - 1, 0)
            before = clocks[k] + speeds[k] * (start - times[k])
            b = first
            while True:
                hi = edges[b + 1]
                if hi > stop:
                    hi = stop
                if k + 1 < n and times[k + 1] <= hi:
                    k = bisect_right(times, hi, k) - 1
                after = clocks[k] + speeds[k] * (hi - times[k])
                carried_bytes[b] += coef * (after - before)
                if hi >= stop or b + 1 >= bins:
                    break
                before = after
                b += 1
    widths = [edges[b + 1] - edges[b] for b in range(bins)]
    rates = [c / w if w > 0 else 0.0 for c, w in zip(carried_bytes, widths, strict=True)]
    # Link.set_rate's rule: a bin whose rate is the previous one's adds no change.
    return [
        (float(edges[b]), rate) for b, rate in enumerate(rates) if b == 0 or rate != rates[b - 1]
    ]
