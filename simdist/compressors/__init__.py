"""Gradient compressors, one object per method: a registry by ``strategy.compression.method``.

Each :class:`~simdist.compressors.base.Compressor` says what it puts on the wire (a group's
collectives, or one tensor's pushed bytes), what it computes to do so, and its reduction
(JAX, imported when called). The synchronous strategies' compressed all-reduces
(:mod:`simdist.strategies.compression`), the parameter server's compressed pushes
(:mod:`simdist.strategies.parameter_server.push_compression`) and the numerics
(:mod:`simdist.numerics.compression`) all take theirs from :func:`compressor`.
"""

from __future__ import annotations

from functools import cache

from simdist.compressors.base import DEFAULT_RANK, DEFAULT_RATIO, Compressor
from simdist.compressors.methods import Bf16, Fp16, NoCompression, PowerSGD, Sign, TopK

__all__ = ["COMPRESSORS", "METHODS", "Compressor", "compressor"]

#: Every method by name, in the order the scenario's ``method`` lists them.
COMPRESSORS: dict[str, type[Compressor]] = {
    cls.method: cls for cls in (NoCompression, Fp16, Bf16, TopK, PowerSGD, Sign)
}
METHODS = tuple(COMPRESSORS)


@cache
def compressor(
    method: str,
    *,
    ratio: float = DEFAULT_RATIO,
    rank: int = DEFAULT_RANK,
    error_feedback: bool = True,
) -> Compressor:
    """The compressor of ``method`` with its parameters (one object per set of them)."""
    if method not in COMPRESSORS:
        raise ValueError(f"compression method {method!r}: expected one of {METHODS}")
    return COMPRESSORS[method](ratio=ratio, rank=rank, error_feedback=error_feedback)
