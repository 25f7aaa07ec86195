"""What each gradient compressor keeps of a tensor, from its shape alone (no JAX, no NumPy).

Shared by the compressors (:mod:`simdist.numerics.compression`) and the wire's byte counts
(:mod:`simdist.strategies.compression`), so the bytes priced are the entries computed.
"""

from __future__ import annotations

import math

#: PyTorch PowerSGDState's ``min_compression_rate`` default (powerSGD_hook.py).
MIN_COMPRESSION_RATE = 2.0


def topk_count(ratio: float, size: int) -> int:
    """Entries top-k sends of a tensor of ``size`` entries: ``max(1, ⌊ratio · size⌋)``."""
    return max(1, min(size, math.floor(ratio * size)))


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The ``m × n`` matrix PowerSGD views a tensor as: the last axis is n."""
    n = int(shape[-1])
    return int(math.prod(shape[:-1])), n


def powersgd_factors(shape: tuple[int, ...], rank: int) -> tuple[int, int, int] | None:
    """``(m, n, r)`` when PowerSGD factors a tensor of ``shape``, else None (sent whole).

    1-D tensors are never factored; others only when ``m·n > 2·(m + n)·r`` (PyTorch's
    ``_should_compress`` with ``min_compression_rate = 2``); r is at most min(m, n).
    """
    if len(shape) < 2:
        return None
    m, n = matrix_shape(shape)
    r = min(rank, m, n)
    if not m * n > MIN_COMPRESSION_RATE * (m + n) * r:
        return None
    return m, n, r
