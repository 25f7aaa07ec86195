"""The compression methods: none, fp16/bf16, top-k, sign and PowerSGD.

Wire bytes (:meth:`~simdist.compressors.base.Compressor.collectives` for a group's
collectives, ``push_nbytes`` for one tensor pushed alone):

- ``none``: one all-reduce of 4 bytes per entry; ``fp16``/``bf16``: 2 bytes per entry.
- ``topk``: an all-gather of every replica's k values (4 bytes) and k int32 indices
  (4 bytes) per tensor: sparse parts cannot be summed by an all-reduce (their indices
  differ), so DGC and Horovod gather them (Lin et al. 2018, arXiv:1712.01887; Renggli et
  al. 2019, SparCML, arXiv:1802.08021, on sparse all-gathers).
- ``sign``: an all-gather of every replica's ⌈d/8⌉ bytes of signs and one 4-byte scale
  per tensor (majority vote or a sum of scaled signs both need every replica's signs:
  Bernstein et al. 2018, signSGD with majority vote, arXiv:1810.05291).
- ``powersgd``: three all-reduces (powerSGD_hook.py: the uncompressed tensors, then the
  P's, then the Q's): ``4·d`` bytes of the tensors it leaves whole, ``4·m·r`` of the
  P's, ``4·n·r`` of the Q's.

An all-gather's bytes are those gathered in all (each replica holds 1/N of them).

Work (``work``): the roofline's passes over the tensors — PowerSGD's three matmuls
(M Q, Mᵀ P̂, P̂ Qᵀ: 2·m·n·r FLOPs each) and its Gram–Schmidt (≈ 4·m·r² FLOPs); the others
memory-bound passes (top-k's selection reads the tensor, error feedback reads and writes
the residual).

Reductions (``reduce``, JAX, imported when called):

* ``fp16`` / ``bf16``: each replica casts its gradient to half precision, the sum is taken in
  half precision (NCCL reduces in the buffer's type), the result cast back.
* ``topk``: each replica sends the ``k = max(1, ⌊ratio·d⌋)`` entries of largest magnitude;
  the sparse parts are gathered and summed (DGC). With error feedback the entries not sent
  are kept and added to the next step's gradient (Stich, Cordonnier & Jaggi 2018,
  "Sparsified SGD with memory", arXiv:1809.07599, Algorithm 1: ``m ← m + g − top_k(m + g)``).
* ``sign``: each replica sends ``(‖p‖₁/d)·sign(p)`` of ``p = g + e`` — one bit per element
  and one scale — and keeps ``e ← p − (‖p‖₁/d)·sign(p)`` (EF-signSGD, Karimireddy et al.
  2019, arXiv:1901.09847, Algorithm 1); the replicas' scaled signs are gathered and summed
  (1-bit Adam's compressed communication, Tang et al. 2021, arXiv:2102.02888, also sends
  one scale with the signs).
* ``powersgd``: Vogels, Karimireddy & Jaggi 2019 (arXiv:1905.13727), Algorithm 1, rank r,
  one power iteration, warm-started Q: per tensor of ≥ 2 dimensions, reshaped to
  ``M: m × n`` (the last axis is n: a flax kernel's output channels), ``P = Σ_w M_w Q``,
  ``P̂ = orthogonalise(P)`` (Gram–Schmidt), ``Q = Σ_w M_wᵀ P̂``, ``M̂ = P̂ Qᵀ``; error
  feedback ``e_w ← M_w − P̂ (M_wᵀ P̂)ᵀ`` (Algorithm 2: the residual of the replica's own
  compressed gradient). As PyTorch's hook (pytorch/pytorch
  torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py: ``_should_compress``,
  ``min_compression_rate = 2``), 1-D tensors and tensors whose factors would not be at
  least twice smaller than the tensor are summed uncompressed; Q starts as a Gaussian draw
  (a named seed stream), and keeps the aggregated Q of the last step (warm start).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from simdist.compressors.base import (
    ENTRY_NBYTES,
    HALF_NBYTES,
    INDEX_NBYTES,
    Compressor,
    Shape,
    WirePart,
    powersgd_factors,
    topk_count,
)

if TYPE_CHECKING:
    import jax
    import numpy as np

__all__ = [
    "ORTHOGONALISE_EPS",
    "Bf16",
    "Fp16",
    "NoCompression",
    "PowerSGD",
    "Sign",
    "TopK",
    "orthogonalise",
    "powersgd_round",
]

#: Added to a column's norm before dividing, so a vanishing column does not divide by zero
#: (powerSGD_hook.py ``_orthogonalize``'s ``epsilon``).
ORTHOGONALISE_EPS = 1e-8


def _residual_traffic(shape: Shape) -> float:
    """Error feedback's bytes for a tensor: p = g + e reads both and writes p, and the
    residual is written back."""
    return 4.0 * ENTRY_NBYTES * math.prod(shape)


class NoCompression(Compressor):
    """``none``: the gradient as it is."""

    method = "none"

    def reduce(self, g: Any, e: Any, q: Any) -> tuple[Any, Any, Any]:
        return g.sum(0), e, q


class Fp16(Compressor):
    """``fp16``: cast down, summed in half precision, cast back."""

    method = "fp16"
    #: The JAX dtype's name the sum is taken in.
    dtype_name: ClassVar[str] = "float16"

    def collectives(self, shapes: Sequence[Shape], replicas: int) -> list[WirePart]:
        d = sum(math.prod(s) for s in shapes)
        return [WirePart("allreduce", HALF_NBYTES * d, self.method)]

    def push_nbytes(self, shape: Shape) -> int:
        return HALF_NBYTES * math.prod(shape)

    def work(self, shape: Shape) -> tuple[float, float]:
        d = math.prod(shape)
        return 0.0, 2.0 * (ENTRY_NBYTES * d + HALF_NBYTES * d)  # cast down; the sum cast up

    def reduce(self, g: Any, e: Any, q: Any) -> tuple[Any, Any, Any]:
        import jax.numpy as jnp

        dtype = getattr(jnp, self.dtype_name)
        return jnp.sum(g.astype(dtype), axis=0, dtype=dtype).astype(g.dtype), e, q


class Bf16(Fp16):
    """``bf16``: as fp16, in bfloat16."""

    method = "bf16"
    dtype_name = "bfloat16"


class TopK(Compressor):
    """``topk``: the k entries of largest magnitude, values and indices gathered."""

    method = "topk"
    size_option = "ratio"
    keeps_residuals = True

    def _sent_nbytes(self, d: int) -> int:
        return topk_count(self.ratio, d) * (ENTRY_NBYTES + INDEX_NBYTES)

    def collectives(self, shapes: Sequence[Shape], replicas: int) -> list[WirePart]:
        per_replica = sum(self._sent_nbytes(math.prod(s)) for s in shapes)
        return [WirePart("all_gather", replicas * per_replica, "top-k values+indices")]

    def push_nbytes(self, shape: Shape) -> int:
        return self._sent_nbytes(math.prod(shape))

    def work(self, shape: Shape) -> tuple[float, float]:
        ef = _residual_traffic(shape) if self.feedback else 0.0
        return 0.0, ef + 2.0 * ENTRY_NBYTES * math.prod(shape)  # select; scatter the sum

    def reduce(self, g: Any, e: Any, q: Any) -> tuple[Any, Any, Any]:
        import jax
        import jax.numpy as jnp

        n = g.shape[0]
        acc = (g + e).reshape(n, -1)
        k = topk_count(self.ratio, acc.shape[1])
        _, idx = jax.lax.top_k(jnp.abs(acc), k)
        rows = jnp.arange(n)[:, None]
        sparse = jnp.zeros_like(acc).at[rows, idx].set(acc[rows, idx])
        residual = acc - sparse if self.error_feedback else jnp.zeros_like(acc)
        return sparse.sum(0).reshape(g.shape[1:]), residual.reshape(g.shape), q


class Sign(Compressor):
    """``sign``: one bit per entry and one scale per tensor, gathered."""

    method = "sign"
    keeps_residuals = True

    def collectives(self, shapes: Sequence[Shape], replicas: int) -> list[WirePart]:
        per_replica = sum(self.push_nbytes(s) for s in shapes)
        return [WirePart("all_gather", replicas * per_replica, "signs+scales")]

    def push_nbytes(self, shape: Shape) -> int:
        return math.ceil(math.prod(shape) / 8) + ENTRY_NBYTES

    def work(self, shape: Shape) -> tuple[float, float]:
        d = math.prod(shape)
        ef = _residual_traffic(shape) if self.feedback else 0.0
        return 0.0, ef + 2.0 * ENTRY_NBYTES * d + math.ceil(d / 8)  # read p, write bits; decode

    def reduce(self, g: Any, e: Any, q: Any) -> tuple[Any, Any, Any]:
        import jax.numpy as jnp

        n = g.shape[0]
        p = (g + e).reshape(n, -1)
        scale = jnp.mean(jnp.abs(p), axis=1, keepdims=True)
        sent = scale * jnp.where(p >= 0, 1.0, -1.0).astype(p.dtype)
        residual = p - sent if self.error_feedback else jnp.zeros_like(p)
        return sent.sum(0).reshape(g.shape[1:]), residual.reshape(g.shape), q


def orthogonalise(p: jax.Array, eps: float = ORTHOGONALISE_EPS) -> jax.Array:
    """Gram–Schmidt on the columns of ``p`` (m × r), in order, as powerSGD_hook.py does."""
    import jax.numpy as jnp

    cols = []
    for i in range(p.shape[1]):
        col = p[:, i]
        for prev in cols:
            col = col - jnp.dot(prev, col) * prev
        cols.append(col / (jnp.linalg.norm(col) + eps))
    return jnp.stack(cols, axis=1)


def powersgd_round(
    ms: jax.Array, q: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One PowerSGD round on the replicas' matrices ``ms`` [N, m, n] from ``q`` [n, r]:
    ``(P̂, Q, M̂, residuals)`` — the orthogonalised summed P, the summed Q (next step's warm
    start), the decompressed sum P̂ Qᵀ and each replica's ``M_w − P̂ (M_wᵀ P̂)ᵀ``."""
    import jax.numpy as jnp

    p_hat = orthogonalise(jnp.einsum("wmn,nr->mr", ms, q))
    qs = jnp.einsum("wmn,mr->wnr", ms, p_hat)
    q_sum = qs.sum(0)
    residual = ms - jnp.einsum("mr,wnr->wmn", p_hat, qs)
    return p_hat, q_sum, p_hat @ q_sum.T, residual


class PowerSGD(Compressor):
    """``powersgd``: rank-r factors P and Q all-reduced; small tensors sent whole."""

    method = "powersgd"
    size_option = "rank"
    keeps_residuals = True

    def collectives(self, shapes: Sequence[Shape], replicas: int) -> list[WirePart]:
        whole, p_entries, q_entries = 0, 0, 0
        for shape in shapes:
            f = powersgd_factors(shape, self.rank)
            if f is None:
                whole += math.prod(shape)
            else:
                m, n, r = f
                p_entries += m * r
                q_entries += n * r
        out = [
            WirePart("allreduce", ENTRY_NBYTES * whole, "uncompressed"),
            WirePart("allreduce", ENTRY_NBYTES * p_entries, "P"),
            WirePart("allreduce", ENTRY_NBYTES * q_entries, "Q"),
        ]
        return [c for c in out if c.nbytes > 0]

    def push_nbytes(self, shape: Shape) -> int:
        f = powersgd_factors(shape, self.rank)
        if f is None:
            return ENTRY_NBYTES * math.prod(shape)
        m, n, r = f
        return ENTRY_NBYTES * (m + n) * r

    def work(self, shape: Shape) -> tuple[float, float]:
        f = powersgd_factors(shape, self.rank)
        if f is None:  # tensors sent whole cost nothing to compress
            return 0.0, 0.0
        m, n, r = f
        ef = _residual_traffic(shape) if self.feedback else 0.0
        flops = 3 * 2.0 * m * n * r + 4.0 * m * r * r
        full = ENTRY_NBYTES * math.prod(shape)
        return flops, ef + 3 * full + ENTRY_NBYTES * 2 * (m + n) * r

    def init_q(self, shape: Shape, dtype: Any, rng: np.random.Generator) -> Any:
        import jax.numpy as jnp

        f = powersgd_factors(shape, self.rank)
        return None if f is None else jnp.asarray(rng.standard_normal((f[1], f[2])), dtype)

    def reduce(self, g: Any, e: Any, q: Any) -> tuple[Any, Any, Any]:
        if q is None:
            return g.sum(0), e, None
        import jax.numpy as jnp

        ms = (g + e).reshape(g.shape[0], -1, g.shape[-1])
        _, q_sum, m_hat, residual = powersgd_round(ms, q)
        if not self.error_feedback:
            residual = jnp.zeros_like(residual)
        return m_hat.reshape(g.shape[1:]), residual.reshape(g.shape), q_sum
