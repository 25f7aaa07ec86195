"""Collectives as data: one registry of step patterns, and what is derived from them.

Strategies decide *what* is reduced; :mod:`simdist.network` decides how long it takes on
a topology. This package says what a collective *is*: its pattern, which rank sends how
big a share of the buffer to which rank in each step
(:mod:`~simdist.collectives.registry`, built from the one-dimensional algorithms of
:mod:`~simdist.collectives.phases`). From that one definition come its alpha–beta time
(:mod:`~simdist.collectives.closed_form`), the bytes on every rank-to-rank edge
(:meth:`~simdist.collectives.pattern.Pattern.edges`) and the steps a topology's
bottleneck pricing shares (:meth:`~simdist.collectives.pattern.Pattern.steps`). The
published formulas (:mod:`~simdist.collectives.formulas`) are kept as documentation and
as the cross-check the derived times must equal bit for bit.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from simdist.collectives.closed_form import (
    TOPOLOGY_KEYS,
    allreduce_s,
    collective_s,
    pattern_s,
)
from simdist.collectives.figures import algbw_Bps, allreduce_figures, bus_factor, busbw_Bps
from simdist.collectives.formulas import (
    broadcast_s,
    halving_doubling_allreduce_s,
    halving_reduce_scatter_s,
    hierarchical_allreduce_s,
    pairwise_all_to_all_s,
    reduce_s,
    ring_allreduce_s,
    ring_reduce_scatter_s,
    torus2d_allreduce_s,
    tree_allreduce_s,
)
from simdist.collectives.pattern import FLAT, INTER, INTRA, Pattern
from simdist.collectives.registry import (
    ALGORITHMS,
    OPS,
    algorithms,
    canonical,
    pattern,
    square_factors,
)
from simdist.collectives.table import collectives_table

__all__ = [
    "ALGORITHMS",
    "FLAT",
    "INTER",
    "INTRA",
    "OPS",
    "TOPOLOGY_KEYS",
    "Pattern",
    "algbw_Bps",
    "algorithms",
    "allreduce_figures",
    "allreduce_s",
    "broadcast_s",
    "bus_factor",
    "busbw_Bps",
    "canonical",
    "collective_s",
    "collectives_table",
    "halving_doubling_allreduce_s",
    "halving_reduce_scatter_s",
    "hierarchical_allreduce_s",
    "pairwise_all_to_all_s",
    "pattern",
    "pattern_s",
    "reduce_s",
    "ring_allreduce_s",
    "ring_reduce_scatter_s",
    "square_factors",
    "torus2d_allreduce_s",
    "tree_allreduce_s",
]
