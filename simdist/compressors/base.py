"""A gradient compressor as one object: what it puts on the wire, what it computes to do so,
and its reduction (:class:`Compressor`); the sizes it keeps of a tensor, from its shape.

Pure at import (no JAX, no NumPy): the timing half prices a compressor without JAX; the
numeric half (:meth:`Compressor.reduce`, :meth:`Compressor.init_q`) imports JAX when called.
Compression is per tensor — each parameter tensor is compressed on its own (top-k's k,
PowerSGD's factors, sign's scale are per tensor, as in PyTorch's powerSGD_hook.py) — and the
bytes of a group of tensors (a DDP bucket, a Horovod fused buffer, the whole gradient)
travel together in the group's collectives (:meth:`Compressor.collectives`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_RANK",
    "DEFAULT_RATIO",
    "ENTRY_NBYTES",
    "HALF_NBYTES",
    "INDEX_NBYTES",
    "MIN_COMPRESSION_RATE",
    "Compressor",
    "Shape",
    "WirePart",
    "matrix_shape",
    "powersgd_factors",
    "topk_count",
]

Shape = tuple[int, ...]

#: Bytes of an entry as the replicas compute it (float32), of a top-k index (int32), of a
#: half-precision entry.
ENTRY_NBYTES = 4
INDEX_NBYTES = 4
HALF_NBYTES = 2
#: Top-k's default share of entries sent: a choice, not a published default (DGC, Lin et al.
#: 2018, sends 0.1 % after a warm-up of denser steps); at 1 % the digits MLP of
#: scenarios/powersgd_mwm.yaml reaches the uncompressed run's test accuracy.
DEFAULT_RATIO = 0.01
#: PyTorch PowerSGDState's default ``matrix_approximation_rank`` (powerSGD_hook.py).
DEFAULT_RANK = 1
#: PyTorch PowerSGDState's ``min_compression_rate`` default (powerSGD_hook.py).
MIN_COMPRESSION_RATE = 2.0


def topk_count(ratio: float, size: int) -> int:
    """Entries top-k sends of a tensor of ``size`` entries: ``max(1, ⌊ratio · size⌋)``."""
    return max(1, min(size, math.floor(ratio * size)))


def matrix_shape(shape: Shape) -> tuple[int, int]:
    """The ``m × n`` matrix PowerSGD views a tensor as: the last axis is n."""
    n = int(shape[-1])
    return int(math.prod(shape[:-1])), n


def powersgd_factors(shape: Shape, rank: int) -> tuple[int, int, int] | None:
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


class WirePart(NamedTuple):
    """One collective carrying a compressed group: ``op`` (``allreduce``, ``all_gather``), its
    bytes as :meth:`simdist.network.Network.collective` takes them, and what it carries."""

    op: str
    nbytes: int
    what: str


class Compressor(ABC):
    """One compression method with its parameters: wire bytes, work, and the reduction.

    ``reduce`` is a *reduction*: it takes one tensor's replica gradients stacked on a leading
    axis ``[N, ...]``, with each replica's residual ``e`` (same shape) and the method's
    warm-start state ``q``, and returns the sum the wire delivers, the new residuals and the
    new ``q`` (Optax-style: nothing mutated).
    """

    #: The ``strategy.compression.method`` this class answers to.
    method: ClassVar[str]
    #: The option sizing it (``ratio`` for top-k, ``rank`` for PowerSGD), if any.
    size_option: ClassVar[str | None] = None
    #: Whether it keeps residuals (error feedback) when ``error_feedback`` is on.
    keeps_residuals: ClassVar[bool] = False

    def __init__(
        self,
        ratio: float = DEFAULT_RATIO,
        rank: int = DEFAULT_RANK,
        error_feedback: bool = True,
    ) -> None:
        self.ratio = ratio
        self.rank = rank
        self.error_feedback = error_feedback

    @property
    def feedback(self) -> bool:
        """Whether residuals are kept: error feedback on, for a method that keeps them."""
        return self.error_feedback and self.keeps_residuals

    def collectives(self, shapes: Sequence[Shape], replicas: int) -> list[WirePart]:
        """The collectives that carry tensors of ``shapes`` from ``replicas`` replicas (default:
        one all-reduce of their float32 entries)."""
        return [WirePart("allreduce", ENTRY_NBYTES * sum(math.prod(s) for s in shapes), "gradient")]

    def push_nbytes(self, shape: Shape) -> int:
        """Bytes one worker sends for a tensor of ``shape`` on its own (a push to a parameter
        server; default: its float32 entries)."""
        return ENTRY_NBYTES * math.prod(shape)

    def work(self, shape: Shape) -> tuple[float, float]:
        """(FLOPs, bytes of memory traffic) one replica spends compressing and decompressing a
        tensor of ``shape`` (default: none)."""
        return 0.0, 0.0

    def init_q(self, shape: Shape, dtype: Any, rng: np.random.Generator) -> Any:
        """The warm-start state of a tensor of ``shape`` (default None; drawn from ``rng`` by a
        method that needs one, in tree order)."""
        return None

    @abstractmethod
    def reduce(self, g: Any, e: Any, q: Any) -> tuple[Any, Any, Any]:
        """``(sum, residuals, q)`` of the stacked replica gradients ``g`` (class docstring)."""
