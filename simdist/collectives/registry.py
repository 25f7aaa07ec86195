"""The collective registry: every collective and algorithm, defined once as its pattern.

``pattern(op, algo, n, per_host, grid)`` is the :class:`~simdist.collectives.pattern.Pattern`
of collective ``op`` run with ``algo`` over ``n`` ranks, numbered host by host
(``per_host`` ranks on each host; 0 when the hosts hold different numbers). Closed forms,
per-link bytes and bottleneck pricing are all derived from it, so a topology never asks
which collective it prices.

============== ======================================================================
op             algorithms
============== ======================================================================
all_reduce     ring, tree, halving_doubling, hierarchical, torus2d
reduce_scatter ring, halving_doubling (n a power of two), hierarchical, torus2d
all_gather     ring, halving_doubling (n a power of two), hierarchical, torus2d
broadcast      tree (binomial)
reduce         tree (binomial)
all_to_all     pairwise, hierarchical, torus2d
============== ======================================================================

Every all-reduce but the tree is its reduce-scatter followed by its all-gather, as
ASTRA-sim composes them (Won et al. 2023); the tree is NCCL's double binary tree, a
reduce then a broadcast. ``hierarchical`` is Horovod's NCCL hierarchical all-reduce (ring
reduce-scatter inside each host, one ring per local rank across hosts on its S/d shard,
ring all-gather inside: ``NCCLHierarchicalAllreduce`` in
horovod/common/ops/nccl_operations.cc); ``torus2d`` runs the rings along x on S, then
along y on the S/x shard (Ying, Kumar, Chen, Wang & Cheng 2018, "Image classification at
supercomputer scale", the TPU-v3 2-D gradient summation). The two-level all-to-alls
exchange inside each line first, then across (the 2-D hierarchical all-to-all of
DeepSpeed-MoE: Rajbhandari et al. 2022, ICML; ASTRA-sim runs all-to-all per dimension).
All sizes are of the whole buffer S, as nccl-tests counts them: a reduce-scatter leaves
S/n on each rank, an all-gather starts from S/n, an all-to-all sends S/n to each peer.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

from simdist.collectives.pattern import FLAT, INTER, INTRA, Pattern, Phase, Stage, single
from simdist.collectives.phases import (
    binomial_phase,
    double_tree_phases,
    doubling_phase,
    fold_phases,
    halving_phase,
    pairwise_phase,
    real_ranks,
    ring_phase,
)
from simdist.errors import SimdistError

#: Every all-reduce algorithm (the names scenarios and ``simdist collectives`` use).
ALGORITHMS: tuple[str, ...] = ("ring", "tree", "halving_doubling", "hierarchical", "torus2d")

#: The collectives, in the order ``simdist collectives --op`` lists them.
OPS: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "all_to_all",
)

#: Older spellings the strategies and topologies use.
ALIASES: dict[str, str] = {"allreduce": "all_reduce"}

#: What a collective is built from: ranks, ranks per host (0: uneven), the torus grid.
Shape = tuple[int, int, tuple[int, int]]
Builder = Callable[[int, int, tuple[int, int]], Pattern]


def square_factors(n: int) -> tuple[int, int]:
    """The most square (x, y) with x·y = n and x ≥ y; a prime n gives (n, 1)."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    y = math.isqrt(n)
    while n % y:
        y -= 1
    return n // y, y


def canonical(op: str) -> str:
    """``op`` under its registry name (``allreduce`` → ``all_reduce``)."""
    name = ALIASES.get(op, op)
    if name not in OPS:
        raise ValueError(f"unknown collective {op!r}; expected one of {OPS}")
    return name


# ---------------------------------------------------------------- dimensions


def _flat(n: int, phases: tuple[Phase, ...], shard: Fraction = Fraction(1)) -> Stage:
    return Stage((tuple(range(n)),), shard, FLAT, phases)


def _hosts(n: int, per_host: int) -> tuple[int, int]:
    if per_host < 1 or n % per_host:
        got = f"devices_per_host={per_host}" if per_host else "uneven hosts or none given"
        raise SimdistError(
            f"hierarchical collectives need the same number of devices on every host "
            f"(devices_per_host dividing n={n}), got {got}"
        )
    return n // per_host, per_host


def _intra(h: int, d: int, phase: Phase) -> Stage:
    return Stage(
        tuple(tuple(range(i * d, (i + 1) * d)) for i in range(h)), Fraction(1), INTRA, (phase,)
    )


def _inter(h: int, d: int, phase: Phase, shard: Fraction) -> Stage:
    return Stage(
        tuple(tuple(i * d + j for i in range(h)) for j in range(d)), shard, INTER, (phase,)
    )


def _grid(n: int, grid: tuple[int, int]) -> tuple[int, int]:
    x, y = grid if grid[0] * grid[1] == n else square_factors(n)
    return x, y


def _rows(x: int, y: int, phase: Phase) -> Stage:
    return Stage(
        tuple(tuple(r * x + i for i in range(x)) for r in range(y)), Fraction(1), FLAT, (phase,)
    )


def _columns(x: int, y: int, phase: Phase, shard: Fraction) -> Stage:
    return Stage(tuple(tuple(j * x + c for j in range(y)) for c in range(x)), shard, FLAT, (phase,))


def _chain(n: int, stages: list[Stage]) -> Pattern:
    """Stages one after another (the first's phases, then the next's …)."""
    pattern = Pattern(n)
    for stage in stages:
        pattern = pattern.then(single(n, stage))
    return pattern


# ---------------------------------------------------------------- reduce-scatter, all-gather


def _ring_rs(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(n, (ring_phase(n),)))


def _power_of_two(n: int) -> int:
    if n & (n - 1):
        raise SimdistError(
            f"halving_doubling reduce-scatter and all-gather need a power of two, got n={n}"
        )
    return n


def _hd_rs(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(_power_of_two(n), (halving_phase(n),)))


def _hd_ag(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(_power_of_two(n), (doubling_phase(n),)))


def _hier_rs(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    h, d = _hosts(n, per_host)
    return _chain(n, [_intra(h, d, ring_phase(d)), _inter(h, d, ring_phase(h), Fraction(1, d))])


def _hier_ag(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    h, d = _hosts(n, per_host)
    return _chain(n, [_inter(h, d, ring_phase(h), Fraction(1, d)), _intra(h, d, ring_phase(d))])


def _torus_rs(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    x, y = _grid(n, grid)
    return _chain(n, [_rows(x, y, ring_phase(x)), _columns(x, y, ring_phase(y), Fraction(1, x))])


def _torus_ag(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    x, y = _grid(n, grid)
    return _chain(n, [_columns(x, y, ring_phase(y), Fraction(1, x)), _rows(x, y, ring_phase(x))])


# ---------------------------------------------------------------- all-reduce, broadcast, reduce


def _composed(rs: Builder, ag: Builder) -> Builder:
    def build(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
        return rs(n, per_host, grid).then(ag(n, per_host, grid))

    return build


def _hd_ar(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    """Rabenseifner's all-reduce: the surplus ranks fold in, the p' others reduce-scatter
    and all-gather by halving and doubling, the surplus ranks get the result back."""
    if n < 2:
        return single(n, _flat(n, ()))
    real = tuple(real_ranks(n))
    p = len(real)
    give, take = fold_phases(n)
    core = Stage((real,), Fraction(1), FLAT)
    fold = _flat(n, ())
    parts = [
        single(n, Stage(fold.lines, fold.shard, FLAT, (give,))) if give.rounds else None,
        single(n, Stage(core.lines, core.shard, FLAT, (halving_phase(p),))),
        single(n, Stage(core.lines, core.shard, FLAT, (doubling_phase(p),))),
        single(n, Stage(fold.lines, fold.shard, FLAT, (take,))) if take.rounds else None,
    ]
    pattern = Pattern(n)
    for part in parts:
        if part is not None:
            pattern = pattern.then(part)
    return pattern


def _tree_ar(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(n, double_tree_phases(n)))


def _binomial_bcast(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(n, (binomial_phase(n),)))


def _binomial_reduce(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(n, (binomial_phase(n, reduce=True),)))


# ---------------------------------------------------------------- all-to-all


def _pairwise(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    return single(n, _flat(n, (pairwise_phase(n),)))


def _hier_a2a(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    h, d = _hosts(n, per_host)
    return _chain(
        n, [_intra(h, d, pairwise_phase(d)), _inter(h, d, pairwise_phase(h), Fraction(1))]
    )


def _torus_a2a(n: int, per_host: int, grid: tuple[int, int]) -> Pattern:
    x, y = _grid(n, grid)
    return _chain(
        n, [_rows(x, y, pairwise_phase(x)), _columns(x, y, pairwise_phase(y), Fraction(1))]
    )


REGISTRY: dict[str, dict[str, Builder]] = {
    "reduce_scatter": {
        "ring": _ring_rs,
        "halving_doubling": _hd_rs,
        "hierarchical": _hier_rs,
        "torus2d": _torus_rs,
    },
    "all_gather": {
        "ring": _ring_rs,  # a ring all-gather moves exactly as its reduce-scatter
        "halving_doubling": _hd_ag,
        "hierarchical": _hier_ag,
        "torus2d": _torus_ag,
    },
    "broadcast": {"tree": _binomial_bcast},
    "reduce": {"tree": _binomial_reduce},
    "all_to_all": {"pairwise": _pairwise, "hierarchical": _hier_a2a, "torus2d": _torus_a2a},
}
REGISTRY["all_reduce"] = {
    "ring": _composed(_ring_rs, _ring_rs),
    "tree": _tree_ar,
    "halving_doubling": _hd_ar,
    "hierarchical": _composed(_hier_rs, _hier_ag),
    "torus2d": _composed(_torus_rs, _torus_ag),
}


def algorithms(op: str) -> tuple[str, ...]:
    """The algorithms collective ``op`` has, in the registry's order."""
    return tuple(REGISTRY[canonical(op)])


@lru_cache(maxsize=4096)
def pattern(
    op: str, algo: str, n: int, per_host: int = 1, grid: tuple[int, int] = (0, 0)
) -> Pattern:
    """The pattern of collective ``op`` with ``algo`` over ``n`` ranks (host by host,
    ``per_host`` each, 0 when uneven; ``grid``: a torus's x × y, used when x·y = n)."""
    builders = REGISTRY[canonical(op)]
    if algo not in builders:
        raise SimdistError(
            f"unknown {canonical(op).replace('_', '-')} algorithm {algo!r}; "
            f"expected one of {algorithms(op)}"
        )
    if int(n) != n or n < 1:
        raise ValueError(f"participants must be a positive integer, got {n}")
    return builders[algo](n, per_host, grid)


def why_not(op: str, algo: str, n: int, per_host: int | None) -> str | None:
    """Why ``algo`` cannot run ``op`` over ``n`` ranks (``per_host`` each), or None."""
    if n < 2:
        return "one participant: nothing to exchange"
    if algo == "hierarchical":
        if per_host is None:
            return "needs devices_per_host"
        if n % per_host:
            return f"n={n} is not a multiple of devices_per_host={per_host}"
    if algo == "torus2d" and square_factors(n)[1] == 1:
        return f"n={n} is prime: no 2D grid (an {n}x1 torus is a ring)"
    if algo == "halving_doubling" and canonical(op) != "all_reduce" and n & (n - 1):
        return f"n={n} is not a power of two"
    return None
