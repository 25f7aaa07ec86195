"""A collective's effective α and B on a topology: its communication pattern, max-min shared.

The closed forms of :mod:`simdist.collectives` assume every message of a step runs at a
link's full bandwidth B after a latency α. On a topology where messages share a
bottleneck (a rack's oversubscribed uplink, a NIC several devices send through, a PCIe
switch's uplink) that is no longer true. This module finds the (α, B) to feed the *same*
closed form:

1. the collective's pattern, as steps of simultaneous flows ``(src rank, dst rank,
   share)`` (:func:`steps`): a ring all-reduce is one step, its n edges; a double binary
   tree two (every child→parent edge of both trees, pipelined, then every parent→child
   edge); halving-doubling one step per distance (plus the surplus ranks' steps);
   broadcast and reduce one per binomial round;
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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from simdist.collectives import square_factors
from simdist.network.traffic import double_tree_parents

if TYPE_CHECKING:
    from simdist.network.link import Link

#: A link and the direction the bytes cross it (``tx``/``rx`` of a NIC or port, ``up``/
#: ``down`` of an uplink): one resource of the max-min allocation.
Hop = tuple["Link", str]

#: One flow of a step: (source rank, destination rank, share of the per-edge volume).
Edge = tuple[int, int, float]


class Flow(NamedTuple):
    """A flow routed over resources: consumption per unit of rate on each, and its α."""

    weights: dict[tuple[str, str], float]  # (link name, direction) → consumption per rate
    share: float
    latency_s: float


# ---------------------------------------------------------------- patterns


def ring_steps(n: int) -> list[list[Edge]]:
    """A ring all-reduce: one step, the n edges ``i → i+1`` at once (every step alike)."""
    # Patarasuk & Yuan 2009: 2(n−1) steps, each sending S/n along every ring edge.
    return [[(i, (i + 1) % n, 1.0) for i in range(n)]] if n > 1 else []


def tree_steps(n: int) -> list[list[Edge]]:
    """NCCL's double binary tree: every child→parent edge at once, then parent→child.

    Each tree moves half the buffer, pipelined, so every edge of both trees is busy at
    once in each phase, with share 1/2 (``ncclGetDtree``, NCCL src/graph/trees.cc; Sanders,
    Speck & Träff 2009).
    """
    if n < 2:
        return []
    up: list[Edge] = []
    for parents in double_tree_parents(n):
        up += [(child, parent, 0.5) for child, parent in enumerate(parents) if parent >= 0]
    return [up, [(dst, src, share) for src, dst, share in up]]


def halving_doubling_steps(n: int) -> list[list[Edge]]:
    """Rabenseifner's all-reduce in MPICH's rank layout: one step per distance.

    Of the first 2r ranks (r = n − p, p = 2^⌊log2 n⌋) the even ones hand their buffer to
    the next odd one first and get the result back last; the p others exchange with the
    partner at distance 1, 2, … (Thakur, Rabenseifner & Gropp 2005). A distance's
    reduce-scatter and all-gather steps use the same pairs, so each appears once.
    """
    if n < 2:
        return []
    p = 1 << (n.bit_length() - 1)
    r = n - p
    real = [2 * i + 1 if i < r else i + r for i in range(p)]
    steps: list[list[Edge]] = []
    if r:
        steps.append([(even, even + 1, 1.0) for even in range(0, 2 * r, 2)])
    mask = 1
    while mask < p:
        steps.append([(real[i], real[i ^ mask], 1.0) for i in range(p)])
        mask <<= 1
    if r:
        steps.append([(even + 1, even, 1.0) for even in range(0, 2 * r, 2)])
    return steps


def binomial_steps(n: int, *, reduce: bool = False) -> list[list[Edge]]:
    """Binomial broadcast from rank 0 (a reduce: reversed), one step per round.

    Rank r receives from r with its lowest set bit cleared (MPICH, Thakur et al. 2005
    §4.1); the ranks whose lowest set bit is the same receive in the same round.
    """
    rounds: dict[int, list[Edge]] = {}
    for r in range(1, n):
        low = r & -r
        edge = (r, r & (r - 1), 1.0) if reduce else (r & (r - 1), r, 1.0)
        rounds.setdefault(low, []).append(edge)
    return [rounds[low] for low in sorted(rounds, reverse=True)]


def torus2d_steps(n: int) -> list[list[Edge]]:
    """A 2D-torus all-reduce on the most square grid: the x rings at once, then the y rings."""
    x, y = square_factors(n)
    along_x = [(row * x + i, row * x + (i + 1) % x, 1.0) for row in range(y) for i in range(x)]
    along_y = [(j * x + c, ((j + 1) % y) * x + c, 1.0) for c in range(x) for j in range(y)]
    return [s for s in (along_x if x > 1 else [], along_y if y > 1 else []) if s]


def steps(op: str, algo: str, n: int) -> list[list[Edge]]:
    """The steps of collective ``op`` (``algo``) over ranks ``0..n−1`` (flat algorithms)."""
    if op == "broadcast":
        return binomial_steps(n)
    if op == "reduce":
        return binomial_steps(n, reduce=True)
    if op != "allreduce":
        raise ValueError(f"unknown collective {op!r}")
    patterns: dict[str, Callable[[int], list[list[Edge]]]] = {
        "ring": ring_steps,
        "tree": tree_steps,
        "halving_doubling": halving_doubling_steps,
        "torus2d": torus2d_steps,
    }
    if algo not in patterns:
        raise ValueError(f"no flat pattern for all-reduce algorithm {algo!r}")
    return patterns[algo](n)


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
