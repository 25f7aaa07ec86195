"""A collective's effective α and B on a topology: its communication pattern, max-min shared.

The closed forms of :mod:`simdist.collectives` assume every message of a step runs at a
link's full bandwidth B after a latency α. On a topology where messages share a
bottleneck (a rack's oversubscribed uplink, a NIC several devices send through, a PCIe
switch's uplink) that is no longer true. This module finds the (α, B) to feed the *same*
closed form:

1. the collective's pattern, as steps of simultaneous flows ``(src rank, dst rank,
   share)`` (:meth:`simdist.collectives.pattern.Pattern.steps`, from the registry): a
   ring all-reduce is one step, its n edges; a double binary tree two (every child→parent
   edge of both trees, pipelined, then every parent→child edge); halving-doubling one
   step per distance (plus the surplus ranks' steps); broadcast and reduce one per
   binomial round;
2. each flow routed by the topology over *resources* — a link crossed in one direction
   (a half-duplex NIC's two directions count apart, as the closed forms always did);
3. the flows of a step share the resources max-min fairly (static progressive filling,
   Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2, the allocation
   :mod:`simdist.network.fair` computes over time);
4. a flow of share ``s`` (the fraction of the closed form's per-edge volume it carries: 1,
   or 1/2 for each of the two trees) at rate r stands for a link of bandwidth ``r / s``,
   but never more than its own path alone allows (the two-tree model's S/B per phase
   holds even at n = 2, as the closed form says);
5. B is the smallest over every flow of every step, α the largest path latency: the
   bottleneck over the steps, applied to all of them.

A flow's latency is the intra-host link's α inside a host, and the NIC's α plus
``hops × hop_latency`` across the network, so within one switch the result is exactly
the NIC's (α, B) whenever the NICs are the bottleneck: the closed form, bit for bit.

Pure arithmetic on :class:`~simdist.network.link.Link` figures: no SimPy, no JAX.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from simdist.network.link import Link

#: A link and the direction the bytes cross it (``tx``/``rx`` of a NIC or port, ``up``/
#: ``down`` of an uplink): one resource of the max-min allocation.
Hop = tuple["Link", str]


class Flow(NamedTuple):
    """A flow routed over resources: consumption per unit of rate on each, and its α."""

    weights: dict[tuple[str, str], float]  # (link name, direction) → consumption per rate
    share: float
    latency_s: float


# ---------------------------------------------------------------- pricing


def flow(paths: Sequence[Sequence[Hop]], share: float, latency_s: float) -> Flow:
    """A flow made of ``paths`` moving together (one path, or one per local rank).

    Rate is the flows' total: each of the k paths carries 1/k of it, so a resource
    crossed by every path is consumed at the full rate, one crossed by a single path at
    1/k of it.
    """
    weights: dict[tuple[str, str], float] = {}
    k = len(paths)
    for path in paths:
        for link, direction in dict.fromkeys(path):
            key = (link.name, direction)
            weights[key] = weights.get(key, 0.0) + 1.0
    return Flow({key: count / k for key, count in weights.items()}, share, latency_s)


def max_min_rates(flows: Sequence[Flow], capacity: dict[tuple[str, str], float]) -> list[float]:
    """Max-min fair rates of ``flows`` under the resources' ``capacity`` (bytes/s).

    Progressive filling (Bertsekas & Gallager §6.5.2): raise every unfixed flow's rate
    together until a resource is full; fix the flows crossing it; repeat. Ties go to the
    first resource by name, so the result is deterministic.
    """
    keys = sorted({key for f in flows for key in f.weights})
    remaining = {key: capacity[key] for key in keys}
    load = dict.fromkeys(keys, 0.0)
    members: dict[tuple[str, str], list[int]] = {key: [] for key in keys}
    for j, f in enumerate(flows):
        for key, w in f.weights.items():
            load[key] += w
            members[key].append(j)
    rates = [math.inf] * len(flows)
    fixed = [False] * len(flows)
    left = len(flows)
    while left:
        best, best_rate = None, math.inf
        for key in keys:
            if load[key] > 0:
                rate = max(remaining[key], 0.0) / load[key]
                if best is None or rate < best_rate:
                    best, best_rate = key, rate
        if best is None:  # flows crossing nothing: unconstrained
            break
        for j in members[best]:
            if fixed[j]:
                continue
            fixed[j], rates[j] = True, best_rate
            left -= 1
            for key, w in flows[j].weights.items():
                remaining[key] -= best_rate * w
                load[key] -= w
        load[best] = 0.0
    return rates


def effective(
    pattern: Sequence[Sequence[Flow]], capacity: dict[tuple[str, str], float]
) -> tuple[float, float] | None:
    """(α, B) of a collective whose steps are ``pattern``: the bottleneck over its steps.

    Per step the flows share the resources max-min fairly; a flow of share s at rate r
    stands for a bandwidth r / s, capped at what its path alone carries. B is the least
    over all flows, α the largest flow latency. ``None`` when no flow crosses a resource.
    """
    alpha, bandwidth = 0.0, math.inf
    for step in pattern:
        step = [f for f in step if f.weights]
        for f, rate in zip(step, max_min_rates(step, capacity), strict=True):
            alone = min(capacity[key] / w for key, w in f.weights.items())
            bandwidth = min(bandwidth, rate / f.share, alone)
            alpha = max(alpha, f.latency_s)
    if bandwidth == math.inf:
        return None
    return alpha, bandwidth
