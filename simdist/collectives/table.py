"""The teaching table of ``simdist collectives``: time, algbw and busbw per algorithm.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from simdist.collectives.closed_form import collective_s
from simdist.collectives.figures import algbw_Bps, busbw_Bps
from simdist.collectives.registry import algorithms, canonical, square_factors, why_not
from simdist.errors import SimdistError

#: One row: algo, n, nbytes, time_s, algbw_Bps, busbw_Bps (None when skipped), note.
Row = dict[str, str | int | float | None]


def skip_reason(op: str, algo: str, n: int, devices_per_host: int | None) -> str | None:
    """Why a table row is skipped (:func:`~simdist.collectives.registry.why_not`), or None."""
    reason = why_not(op, algo, n, devices_per_host)
    if reason is not None and n < 2 and canonical(op) == "all_reduce":
        return "one participant: nothing to reduce"
    return reason


def shape_note(op: str, algo: str, n: int, devices_per_host: int | None) -> str:
    """The shape a row used: hosts x devices, the x × y torus, the extra steps of a fold."""
    if algo == "hierarchical" and devices_per_host is not None:
        return f"{n // devices_per_host} hosts x {devices_per_host} devices"
    if algo == "torus2d":
        x, y = square_factors(n)
        return f"{x}x{y} torus"
    if algo == "halving_doubling" and n & (n - 1) and canonical(op) == "all_reduce":
        return "n not a power of two: +2 full-buffer steps"
    return ""


def check_algorithms(op: str, algos: Iterable[str]) -> list[str]:
    """``algos`` as a list, each one ``op`` has (else one clear error)."""
    known = algorithms(op)
    names = list(algos)
    for algo in names:
        if algo not in known:
            raise SimdistError(
                f"unknown {canonical(op).replace('_', '-')} algorithm {algo!r}; "
                f"expected one of {known}"
            )
    return names


def collectives_table(
    algos: Iterable[str],
    ns: Iterable[int],
    sizes: Iterable[float],
    bandwidth_Bps: float,
    latency_s: float,
    devices_per_host: int | None = None,
    *,
    intra_bandwidth_Bps: float | None = None,
    intra_latency_s: float | None = None,
    op: str = "all_reduce",
) -> list[Row]:
    """Time, algbw and busbw of collective ``op`` for every (size, n, algo), closed forms.

    Rows are ordered by size, then n, then algorithm as given, so that algorithms sit
    next to each other. Each row: ``algo, n, nbytes, time_s, algbw_Bps, busbw_Bps,
    note``. A combination the algorithm cannot do (n < 2, hierarchical without a
    devices_per_host dividing n, torus2d on a prime n, halving-doubling reduce-scatter on
    n not a power of two) is kept as a row whose three numbers are ``None`` and whose
    ``note`` says why; otherwise ``note`` names the shape used (hosts x devices, the
    x x y torus). Hierarchical uses the intra-host link values when given, else the
    network values for both levels. busbw is nccl-tests' for ``op``.
    """
    algos, ns, sizes = check_algorithms(op, algos), list(ns), list(sizes)
    rows: list[Row] = []
    for nbytes in sizes:
        for n in ns:
            for algo in algos:
                row: Row = {"algo": algo, "n": n, "nbytes": nbytes}
                reason = skip_reason(op, algo, n, devices_per_host)
                if reason is not None:
                    row |= {"time_s": None, "algbw_Bps": None, "busbw_Bps": None}
                    row["note"] = f"skipped: {reason}"
                    rows.append(row)
                    continue
                topology: dict[str, float | int | None] = {}
                if algo == "hierarchical":
                    topology = {
                        "devices_per_host": devices_per_host,
                        "intra_bandwidth_Bps": intra_bandwidth_Bps,
                        "intra_latency_s": intra_latency_s,
                    }
                t = collective_s(op, algo, n, nbytes, latency_s, bandwidth_Bps, **topology)
                row["time_s"] = t
                row["algbw_Bps"] = algbw_Bps(nbytes, t) if t > 0 else math.inf
                row["busbw_Bps"] = busbw_Bps(nbytes, t, n, op) if t > 0 else math.inf
                row["note"] = shape_note(op, algo, n, devices_per_host)
                rows.append(row)
    return rows
