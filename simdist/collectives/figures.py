"""Bandwidth figures of a timed collective, as nccl-tests reports them.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

from simdist.collectives.registry import canonical


def algbw_Bps(nbytes: float, time_s: float) -> float:
    """Algorithm bandwidth: buffer size over elapsed time."""
    if not time_s > 0:
        raise ValueError(f"time_s must be > 0, got {time_s}")
    # NVIDIA nccl-tests, doc/PERFORMANCE.md, "Algorithm bandwidth": algbw = S / t.
    return nbytes / time_s


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw of collective ``op`` over ``n`` ranks (nccl-tests, PERFORMANCE.md).

    What a bandwidth-optimal algorithm moves per rank, per byte of S: 2(n−1)/n for an
    all-reduce, (n−1)/n for a reduce-scatter, all-gather or all-to-all, 1 for a broadcast
    or reduce; busbw then compares with the link speed whatever n is.
    """
    name = canonical(op)
    if name == "all_reduce":
        return 2 * (n - 1) / n
    if name in ("broadcast", "reduce"):
        return 1.0
    return (n - 1) / n


def busbw_Bps(nbytes: float, time_s: float, n: int, op: str = "all_reduce") -> float:
    """Bus bandwidth: algbw rescaled so it compares with link speed (default: all-reduce).

    A bandwidth-optimal all-reduce moves 2(n−1)/n·S per rank, so busbw reaches the link
    bandwidth whatever n is; it is the figure to hold against the hardware.
    """
    if canonical(op) == "all_reduce":
        # NVIDIA nccl-tests, doc/PERFORMANCE.md, "Bus bandwidth", AllReduce:
        # busbw = algbw · 2(n−1)/n.
        return algbw_Bps(nbytes, time_s) * 2 * (n - 1) / n
    return algbw_Bps(nbytes, time_s) * bus_factor(op, n)


def allreduce_figures(nbytes: float, time_s: float, n: int) -> dict[str, float | None]:
    """``allreduce_s``, ``algbw_Bps`` and ``busbw_Bps`` of one all-reduce, for summaries.

    The two bandwidths are ``None`` when nothing is exchanged (n = 1 or a zero time).
    """
    if n < 2 or not time_s > 0:
        return {"allreduce_s": time_s, "algbw_Bps": None, "busbw_Bps": None}
    return {
        "allreduce_s": time_s,
        "algbw_Bps": algbw_Bps(nbytes, time_s),
        "busbw_Bps": busbw_Bps(nbytes, time_s, n),
    }
