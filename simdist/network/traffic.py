"""Who sends what to whom in a collective: its edges, for the bytes on every link.

:mod:`simdist.collectives.registry` defines each collective once, as its pattern; this
module reads the messages off it, as a list of ``(src_rank, dst_rank, share)`` edges,
``share`` being the bytes sent along that edge per byte of the buffer ``S`` (summed over
the algorithm's steps; :meth:`simdist.collectives.pattern.Pattern.edges`). A topology
routes every edge and adds ``share · S`` to each link of its route
(:meth:`simdist.network.topology.Topology.collective_link_bytes`), which is what the
links really carry, for telemetry: the closed-form *time* is not touched.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

from collections.abc import Sequence

from simdist.collectives.pattern import Edge
from simdist.collectives.phases import btree_parent, double_tree_parents
from simdist.collectives.registry import pattern

__all__ = [
    "Edge",
    "btree_parent",
    "collective_edges",
    "double_tree_parents",
    "halving_doubling_edges",
]


def collective_edges(
    op: str, algo: str, host_of: Sequence[int], grid: tuple[int, int] | None = None
) -> list[Edge]:
    """The messages of collective ``op`` (``algo``) over ranks ``0..len(host_of)−1``.

    ``host_of[rank]`` is the rank's host, ranks numbered host by host (only hierarchical
    algorithms read it, and need as many ranks on every host); ``grid`` the (x, y) of a
    torus2d collective (default: the most square).
    """
    counts: dict[int, int] = {}
    for host in host_of:
        counts[host] = counts.get(host, 0) + 1
    per_host = counts.popitem()[1] if len(set(counts.values())) == 1 else 0
    return pattern(op, algo, len(host_of), per_host, grid or (0, 0)).edges()


def halving_doubling_edges(n: int) -> list[Edge]:
    """Rabenseifner's all-reduce (recursive halving, then doubling), MPICH's rank layout."""
    return collective_edges("all_reduce", "halving_doubling", [0] * n)
