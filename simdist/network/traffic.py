"""Who sends what to whom in each collective algorithm: the traffic behind the closed forms.

:mod:`simdist.collectives` says how long a collective takes; this module says
which messages it is made of, as a list of ``(src_rank, dst_rank, share)``
edges, ``share`` being the bytes sent along that edge per byte of the buffer
``S`` each participant contributes (summed over the algorithm's steps). A
topology routes every edge and adds ``share · S`` to each link of its route
(:meth:`simdist.network.topology.Topology.collective_link_bytes`), which is
what the links really carry, for telemetry: the closed-form *time* is not
touched.

Every pattern is the algorithm the matching closed form prices, so the bytes a
rank sends agree with the formula's bandwidth term:

* ring all-reduce: a reduce-scatter and an all-gather around the ring, each
  edge ``2(n−1)/n`` (Patarasuk & Yuan 2009; Thakur, Rabenseifner & Gropp 2005);
* tree: NCCL's double binary tree (``ncclGetDtree`` in NCCL's
  src/graph/trees.cc: a binary tree and its mirror, or its shift by one rank
  for odd n), each tree reducing then broadcasting half the buffer, so every
  tree edge carries ``1/2`` up and ``1/2`` down (Sanders, Speck & Träff 2009);
* halving_doubling: Rabenseifner's algorithm as MPICH runs it (Thakur et al.
  2005): surplus ranks of a non-power-of-two n hand their buffer to a partner
  (even ranks below 2r to the next odd one) and get the result back; the p'
  others halve the vector while doubling the distance (reduce-scatter) and
  double it while halving the distance (all-gather);
* hierarchical: Horovod's NCCL hierarchical all-reduce: a ring reduce-scatter
  and all-gather inside each host, and between them one ring across hosts per
  local rank on that rank's ``S/d`` shard;
* torus2d: rings along x on S, along y on the ``S/x`` shard, then the
  all-gathers (Ying et al. 2018), rank ``i`` at ``(i mod x, i div x)``;
* broadcast and reduce: MPICH's binomial tree from rank 0 (Thakur et al. 2005
  §4.1, §4.4): rank ``r`` receives the buffer from ``r`` with its lowest set
  bit cleared (a reduce sends it there).

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

from collections.abc import Sequence

from simdist.collectives import square_factors

#: One message of a collective: (source rank, destination rank, bytes per byte of S).
Edge = tuple[int, int, float]


def ring_edges(ranks: Sequence[int], share: float) -> list[Edge]:
    """Edges ``ranks[i] → ranks[i+1]`` around the ring, each carrying ``share``."""
    n = len(ranks)
    if n < 2:
        return []
    return [(ranks[i], ranks[(i + 1) % n], share) for i in range(n)]


def ring_allreduce_edges(n: int) -> list[Edge]:
    """Ring all-reduce over ranks 0..n−1: each edge carries ``2(n−1)/n`` of S."""
    # Patarasuk & Yuan 2009: 2(n−1) steps of S/n bytes on every edge of the ring.
    return ring_edges(range(n), 2 * (n - 1) / n) if n > 1 else []


def btree_parent(n: int, rank: int) -> int:
    """The parent of ``rank`` in NCCL's binary tree over ``n`` ranks rooted at 0 (−1: the root)."""
    if rank == 0:
        return -1
    # ncclGetBtree (NCCL src/graph/trees.cc): find the lowest set bit, go up to xx10[0],
    # or to xx00[0] when that is out of range.
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def double_tree_parents(n: int) -> tuple[list[int], list[int]]:
    """Each rank's parent in the two trees of NCCL's double binary tree (−1: a root)."""
    first = [btree_parent(n, r) for r in range(n)]
    second = []
    for r in range(n):
        # ncclGetDtree: the second tree is the first shifted by one rank (odd n) or mirrored.
        if n % 2 == 1:
            u = btree_parent(n, (r - 1 + n) % n)
            second.append(-1 if u == -1 else (u + 1) % n)
        else:
            u = btree_parent(n, n - 1 - r)
            second.append(-1 if u == -1 else n - 1 - u)
    return first, second


def tree_allreduce_edges(n: int) -> list[Edge]:
    """Double-binary-tree all-reduce: per tree, ``1/2`` up every edge, then ``1/2`` down."""
    edges: list[Edge] = []
    for parents in double_tree_parents(n) if n > 1 else ():
        for child, parent in enumerate(parents):
            if parent >= 0:
                edges += [(child, parent, 0.5), (parent, child, 0.5)]
    return edges


def halving_doubling_edges(n: int) -> list[Edge]:
    """Rabenseifner's all-reduce (recursive halving, then doubling), MPICH's rank layout."""
    if n < 2:
        return []
    p = 1 << (n.bit_length() - 1)
    r = n - p
    edges: list[Edge] = []
    # Thakur, Rabenseifner & Gropp 2005 (MPICH allreduce): of the first 2r ranks the even
    # ones hand their whole buffer to the next odd one, and get the result back at the end.
    for even in range(0, 2 * r, 2):
        edges += [(even, even + 1, 1.0), (even + 1, even, 1.0)]
    real = [2 * i + 1 if i < r else i + r for i in range(p)]
    mask = 1
    while mask < p:
        # Reduce-scatter with distance mask sends S/(2·mask); the all-gather's step at the
        # same distance sends as much back: 2·Σ S/2^(k+1) = 2(p−1)/p·S per rank.
        share = 2 * (1 / (2 * mask))
        for i in range(p):
            edges.append((real[i], real[i ^ mask], share))
        mask <<= 1
    return edges


def hierarchical_edges(host_of: Sequence[int]) -> list[Edge]:
    """Horovod's hierarchical all-reduce over ranks grouped by host (``host_of[rank]``).

    Inside each host of d ranks: a ring reduce-scatter and all-gather, ``2(d−1)/d`` per
    edge. Across the h hosts: one ring per local rank j (the j-th rank of every host) on
    the ``S/d`` shard, ``2(h−1)/h · 1/d`` per edge.
    """
    groups: dict[int, list[int]] = {}
    for rank, host in enumerate(host_of):
        groups.setdefault(host, []).append(rank)
    members = list(groups.values())
    d, h = len(members[0]), len(members)
    if any(len(m) != d for m in members):
        raise ValueError(
            f"hierarchical all-reduce needs as many ranks on every host, got {members}"
        )
    edges: list[Edge] = []
    for ranks in members:
        edges += ring_edges(ranks, 2 * (d - 1) / d)
    for j in range(d):
        edges += ring_edges([m[j] for m in members], 2 * (h - 1) / h / d)
    return edges


def torus2d_edges(x: int, y: int) -> list[Edge]:
    """2D-torus all-reduce on an x × y grid: rings along x on S, along y on S/x."""
    if x * y < 2:
        return []
    edges: list[Edge] = []
    for row in range(y):
        edges += ring_edges([row * x + i for i in range(x)], 2 * (x - 1) / x)
    for col in range(x):
        edges += ring_edges([j * x + col for j in range(y)], 2 * (y - 1) / y / x)
    return edges


def binomial_edges(n: int) -> list[Edge]:
    """Binomial-tree broadcast from rank 0: ``r`` receives S from ``r & (r − 1)``."""
    # MPICH's binomial broadcast (Thakur et al. 2005 §4.1): relative rank r receives from
    # r − mask, mask its lowest set bit.
    return [(r & (r - 1), r, 1.0) for r in range(1, n)]


def collective_edges(
    op: str, algo: str, host_of: Sequence[int], grid: tuple[int, int] | None = None
) -> list[Edge]:
    """The messages of collective ``op`` (``algo``) over ranks ``0..len(host_of)−1``.

    ``host_of[rank]`` is the rank's host (only hierarchical all-reduce reads it);
    ``grid`` the (x, y) of a torus2d all-reduce (default: :func:`square_factors`).
    """
    n = len(host_of)
    if op == "broadcast":
        return binomial_edges(n)
    if op == "reduce":
        return [(dst, src, share) for src, dst, share in binomial_edges(n)]
    if op != "allreduce":
        raise ValueError(f"unknown collective {op!r}")
    if algo == "ring":
        return ring_allreduce_edges(n)
    if algo == "tree":
        return tree_allreduce_edges(n)
    if algo == "halving_doubling":
        return halving_doubling_edges(n)
    if algo == "hierarchical":
        return hierarchical_edges(host_of)
    if algo == "torus2d":
        x, y = grid if grid is not None and grid[0] * grid[1] == n else square_factors(n)
        return torus2d_edges(x, y)
    raise ValueError(f"unknown all-reduce algorithm {algo!r}")
