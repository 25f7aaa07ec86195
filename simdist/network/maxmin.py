"""Max-min fair levels by progressive filling: the full solver.

Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2: raise every unfixed flow's level
together until some link is full, fix the flows crossing it at that level, subtract their
use from their other links, repeat. The result is the unique max-min fair allocation:
every flow has a *bottleneck*, a full link on which no flow gets more.

:class:`~simdist.network.fair.FairShare` keeps this allocation up to date incrementally
and calls the full solver only on a connected component whose structure changed; the
property test (tests/test_fair_sharing.py) checks the incremental rates against it.
Pure arithmetic on what the links and flows carry: no SimPy, no JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Capacity(Protocol):
    """What the solver reads of a link."""

    bandwidth_Bps: float


class Demand(Protocol):
    """What the solver reads of a flow: its links, and the capacity it takes per unit of
    level on each (``weights``, aligned with ``links``)."""

    links: Sequence[Any]
    weights: Sequence[float]


def progressive_filling(
    links: Sequence[Capacity],
    flows: Sequence[Demand],
    capacity: Sequence[float] | None = None,
) -> tuple[list[float], list[int]]:
    """Every flow's level, max-min fair under the links' capacities, and the index (in
    ``links``) of the link that fixed it: its bottleneck.

    A flow at level λ consumes ``λ · weight`` of each of its links. The bottleneck (least
    remaining capacity per unit of unfixed weight; ties to the first link in ``links``)
    fixes its flows at its level, which is subtracted from their other links. Every link
    a flow crosses must be in ``links``. ``capacity`` (aligned with ``links``) replaces the
    links' bandwidths: what flows fixed elsewhere leave of them.
    """
    index = {id(link): i for i, link in enumerate(links)}
    remaining = [link.bandwidth_Bps for link in links] if capacity is None else list(capacity)
    weight = [0.0] * len(links)
    count = [0] * len(links)
    members: list[list[int]] = [[] for _ in links]
    for j, flow in enumerate(flows):
        for link, w in zip(flow.links, flow.weights, strict=True):
            i = index[id(link)]
            weight[i] += w
            count[i] += 1
            members[i].append(j)
    levels = [0.0] * len(flows)
    fixed_at = [-1] * len(flows)
    left = len(flows)
    while left:
        best, best_level = -1, 0.0
        for i in range(len(links)):
            if count[i]:
                level = max(remaining[i], 0.0) / weight[i]
                if best < 0 or level < best_level:
                    best, best_level = i, level
        for j in members[best]:
            if fixed_at[j] >= 0:
                continue
            fixed_at[j] = best
            left -= 1
            levels[j] = best_level
            flow = flows[j]
            for link, w in zip(flow.links, flow.weights, strict=True):
                i = index[id(link)]
                remaining[i] -= best_level * w
                weight[i] -= w
                count[i] -= 1
    return levels, fixed_at


def max_min_levels(links: Sequence[Capacity], flows: Sequence[Demand]) -> list[float]:
    """Every flow's max-min fair level (:func:`progressive_filling` without bottlenecks)."""
    return progressive_filling(links, flows)[0]
