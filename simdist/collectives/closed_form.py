"""A collective's alpha–beta time, derived from its pattern.

Every formula uses the alpha–beta model: ``latency_s`` (α) per message,
``bandwidth_Bps`` (B) per link, ``nbytes`` (S) the whole buffer; the reduction arithmetic
is free (γ = 0), as in nccl-tests' bus-bandwidth view. One participant has nothing to
exchange and costs 0 s.

:func:`pattern_s` prices a :class:`~simdist.collectives.pattern.Pattern` on links given
per scope (the collective's one network, or the intra- and inter-host links of a
hierarchical one), each rank with a port of its own — a non-blocking switch — except that
the lines of an ``inter`` stage share their host's port:

* a round costs α plus its busiest port's bytes over B, so ``r`` rounds alike cost
  ``r·(α + v·S/B)`` (a ring: 2(n−1)(α + S/(n·B)), Patarasuk & Yuan 2009), and rounds of
  different sizes ``r·α + (Σ v)·S/B`` (recursive halving: log2 p·α + (p−1)/p·S/B,
  Thakur, Rabenseifner & Gropp 2005);
* a streamed (pipelined) phase costs its depth in α plus the trees' shares together over
  B (the double binary tree: ⌈log2 n⌉·α + S/B, Sanders, Speck & Träff 2009);
* a stage's phases add up in time order, then the stages in order.

The sums are written in the order the published formulas (:mod:`~simdist.collectives.
formulas`) write them, so the derived times equal those formulas bit for bit; the tests
check it over every collective, algorithm and many n.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

from collections.abc import Mapping

from simdist.collectives.pattern import FLAT, INTER, INTRA, Cost, Pattern
from simdist.collectives.registry import pattern
from simdist.errors import SimdistError

#: Links per scope: (α in s, B in bytes/s).
Links = Mapping[str, tuple[float, float]]

#: The topology keywords :func:`collective_s` takes.
TOPOLOGY_KEYS: frozenset[str] = frozenset(
    {"devices_per_host", "intra_latency_s", "intra_bandwidth_Bps", "x", "y"}
)


def check(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> None:
    """Raise ValueError unless n ≥ 1 is whole, nbytes ≥ 0, latency ≥ 0 and bandwidth > 0."""
    if int(n) != n or n < 1:
        raise ValueError(f"participants must be a positive integer, got {n}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if latency_s < 0:
        raise ValueError(f"latency_s must be >= 0, got {latency_s}")
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0, got {bandwidth_Bps}")


def phase_s(cost: Cost, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Seconds of one phase priced as ``cost`` (see the module's pricing rules)."""
    if not cost.rounds:
        return 0.0
    if cost.per_round:
        v = cost.numerator * nbytes / (cost.denominator * bandwidth_Bps)
        return cost.rounds * (latency_s + v)
    return cost.rounds * latency_s + cost.in_all * nbytes / bandwidth_Bps


def pattern_s(p: Pattern, nbytes: float, links: Links) -> float:
    """Seconds for ``p`` on a buffer of ``nbytes``, each stage on its scope's (α, B)."""
    total = 0.0
    for stage in p.stages:
        latency_s, bandwidth_Bps = links[stage.scope]
        seconds = 0.0
        for cost in stage.costs:
            seconds += phase_s(cost, nbytes, latency_s, bandwidth_Bps)
        total += seconds
    return total


def collective_s(
    op: str,
    algo: str,
    n: int,
    nbytes: float,
    latency_s: float,
    bandwidth_Bps: float,
    **topology: float | int | None,
) -> float:
    """Seconds for collective ``op`` of ``nbytes`` over ``n`` participants with ``algo``.

    ``latency_s`` / ``bandwidth_Bps`` are the network (inter-host) link. Topology keywords,
    ignored by patterns that do not need them:

    - hierarchical: ``devices_per_host`` (required, must divide n), ``intra_latency_s``
      and ``intra_bandwidth_Bps`` (default: the network values);
    - torus2d: ``x`` and ``y`` (x·y = n); without them, ``square_factors(n)``.
    """
    unknown = set(topology) - TOPOLOGY_KEYS
    if unknown:
        raise ValueError(
            f"unknown topology keyword(s) {sorted(unknown)}; expected {sorted(TOPOLOGY_KEYS)}"
        )
    check(n, nbytes, latency_s, bandwidth_Bps)
    d = topology.get("devices_per_host")
    intra_latency_s = topology.get("intra_latency_s")
    intra_bandwidth_Bps = topology.get("intra_bandwidth_Bps")
    intra = (
        latency_s if intra_latency_s is None else float(intra_latency_s),
        bandwidth_Bps if intra_bandwidth_Bps is None else float(intra_bandwidth_Bps),
    )
    check(n, nbytes, *intra)
    links = {FLAT: (latency_s, bandwidth_Bps), INTRA: intra, INTER: (latency_s, bandwidth_Bps)}
    x, y = topology.get("x"), topology.get("y")
    if (x is not None or y is not None) and (x is None or y is None or x * y != n):
        raise SimdistError(f"a torus needs x*y == n={n}, got x={x}, y={y}")
    grid = (0, 0) if x is None or y is None else (int(x), int(y))
    # Only the patterns with stages inside hosts read devices_per_host (0: not given).
    per_host = 0 if d is None or d < 1 or n % d else int(d)
    return pattern_s(pattern(op, algo, n, per_host, grid), nbytes, links)


def allreduce_s(
    algo: str,
    n: int,
    nbytes: float,
    latency_s: float,
    bandwidth_Bps: float,
    **topology: float | int | None,
) -> float:
    """Seconds for an all-reduce (:func:`collective_s` with ``op="all_reduce"``)."""
    return collective_s("all_reduce", algo, n, nbytes, latency_s, bandwidth_Bps, **topology)
