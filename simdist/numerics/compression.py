"""Gradient compressors with error feedback, as pure JAX reductions: N replica gradients in,
their (decompressed) sum out, and the state each replica keeps between steps.

Optax-style (``init`` / ``update`` with an immutable state), but a *reduction*: ``update``
takes the replicas' gradients stacked on a leading axis ``[N, ...]`` and returns the
gradient every replica applies, the sum of what the wire delivered. No SimPy.

* ``fp16`` / ``bf16``: each replica casts its gradient to half precision, the sum is taken in
  half precision (NCCL reduces in the buffer's type), the result cast back.
* ``topk``: each replica sends the ``k = max(1, ⌊ratio·d⌋)`` entries of largest magnitude of
  each tensor (values and int32 indices); the sparse parts are gathered and summed (DGC,
  Lin et al. 2018, arXiv:1712.01887; Horovod/DGC gather the sparse parts, they cannot be
  summed by an all-reduce). With error feedback the entries not sent are kept and added to
  the next step's gradient (Stich, Cordonnier & Jaggi 2018, "Sparsified SGD with memory",
  arXiv:1809.07599, Algorithm 1: ``m ← m + g − top_k(m + g)``).
* ``sign``: each replica sends ``(‖p‖₁/d)·sign(p)`` of ``p = g + e`` per tensor — one bit
  per element and one scale — and keeps ``e ← p − (‖p‖₁/d)·sign(p)`` (EF-signSGD,
  Karimireddy et al. 2019, arXiv:1901.09847, Algorithm 1); the replicas' scaled signs are
  gathered and summed (1-bit Adam's compressed communication, Tang et al. 2021,
  arXiv:2102.02888, also sends one scale with the signs).
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

Summing instead of averaging changes nothing here: simdist's replica gradients are already
scaled by 1/global batch, so their sum is the mean gradient, and P̂ does not depend on the
scale of P.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from simdist.numerics.compressed_sizes import powersgd_factors, topk_count

if TYPE_CHECKING:
    from simdist.strategies.compression import CompressionSpec

METHODS = ("none", "fp16", "bf16", "topk", "powersgd", "sign")

#: Added to a column's norm before dividing, so a vanishing column does not divide by zero
#: (powerSGD_hook.py ``_orthogonalize``'s ``epsilon``).
ORTHOGONALISE_EPS = 1e-8


class CompressionState(NamedTuple):
    """What persists between steps: each replica's residual (a tree like the parameters,
    every leaf with a leading replica axis) and PowerSGD's warm-start Q per tensor (``None``
    for the tensors it does not factor)."""

    error: Any
    q: Any


class Compression(NamedTuple):
    """``init(params, replicas, seed) -> state``; ``update(stacked_grads, state) -> (sum,
    state)``. ``seed`` is a ``numpy.random.SeedSequence``."""

    init: Callable[..., CompressionState]
    update: Callable[[Any, CompressionState], tuple[Any, CompressionState]]


def orthogonalise(p: jax.Array, eps: float = ORTHOGONALISE_EPS) -> jax.Array:
    """Gram–Schmidt on the columns of ``p`` (m × r), in order, as powerSGD_hook.py does."""
    cols = []
    for i in range(p.shape[1]):
        col = p[:, i]
        for prev in cols:
            col = col - jnp.dot(prev, col) * prev
        cols.append(col / (jnp.linalg.norm(col) + eps))
    return jnp.stack(cols, axis=1)


def _sum_half(g: jax.Array, dtype: Any) -> jax.Array:
    return jnp.sum(g.astype(dtype), axis=0, dtype=dtype).astype(g.dtype)


def _topk(g: jax.Array, e: jax.Array, ratio: float, feedback: bool) -> tuple[jax.Array, jax.Array]:
    n = g.shape[0]
    acc = (g + e).reshape(n, -1)
    k = topk_count(ratio, acc.shape[1])
    _, idx = jax.lax.top_k(jnp.abs(acc), k)
    rows = jnp.arange(n)[:, None]
    sparse = jnp.zeros_like(acc).at[rows, idx].set(acc[rows, idx])
    residual = acc - sparse if feedback else jnp.zeros_like(acc)
    return sparse.sum(0).reshape(g.shape[1:]), residual.reshape(g.shape)


def _sign(g: jax.Array, e: jax.Array, feedback: bool) -> tuple[jax.Array, jax.Array]:
    n = g.shape[0]
    p = (g + e).reshape(n, -1)
    scale = jnp.mean(jnp.abs(p), axis=1, keepdims=True)
    sent = scale * jnp.where(p >= 0, 1.0, -1.0).astype(p.dtype)
    residual = p - sent if feedback else jnp.zeros_like(p)
    return sent.sum(0).reshape(g.shape[1:]), residual.reshape(g.shape)


def powersgd_round(
    ms: jax.Array, q: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One PowerSGD round on the replicas' matrices ``ms`` [N, m, n] from ``q`` [n, r]:
    ``(P̂, Q, M̂, residuals)`` — the orthogonalised summed P, the summed Q (next step's warm
    start), the decompressed sum P̂ Qᵀ and each replica's ``M_w − P̂ (M_wᵀ P̂)ᵀ``."""
    p_hat = orthogonalise(jnp.einsum("wmn,nr->mr", ms, q))
    qs = jnp.einsum("wmn,mr->wnr", ms, p_hat)
    q_sum = qs.sum(0)
    residual = ms - jnp.einsum("mr,wnr->wmn", p_hat, qs)
    return p_hat, q_sum, p_hat @ q_sum.T, residual


def _powersgd(
    g: jax.Array, e: jax.Array, q: jax.Array | None, feedback: bool
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    if q is None:
        return g.sum(0), e, None
    ms = (g + e).reshape(g.shape[0], -1, g.shape[-1])
    _, q_sum, m_hat, residual = powersgd_round(ms, q)
    if not feedback:
        residual = jnp.zeros_like(residual)
    return m_hat.reshape(g.shape[1:]), residual.reshape(g.shape), q_sum


@functools.cache
def compression(
    method: str, *, ratio: float = 0.01, rank: int = 1, error_feedback: bool = True
) -> Compression:
    """The reduction of ``method`` (one of :data:`METHODS`) with its parameters; one object
    per set of parameters, so the programs built on it are shared (it holds no state)."""
    if method not in METHODS:
        raise ValueError(f"compression method {method!r}: expected one of {METHODS}")

    def init(params: Any, replicas: int, seed: np.random.SeedSequence) -> CompressionState:
        error = jax.tree.map(lambda p: jnp.zeros((replicas, *p.shape), p.dtype), params)
        leaves, tree = jax.tree.flatten(params)
        qs: list[Any] = []
        if method == "powersgd":
            rng = np.random.default_rng(seed)
            for leaf in leaves:  # one draw per factored tensor, in tree order
                f = powersgd_factors(tuple(leaf.shape), rank)
                qs.append(
                    None
                    if f is None
                    else jnp.asarray(rng.standard_normal((f[1], f[2])), leaf.dtype)
                )
        else:
            qs = [None] * len(leaves)
        return CompressionState(error, jax.tree.unflatten(tree, qs))

    def update(grads: Any, state: CompressionState) -> tuple[Any, CompressionState]:
        leaves, tree = jax.tree.flatten(grads)
        errors = tree.flatten_up_to(state.error)
        qs = tree.flatten_up_to(state.q)
        out, new_e, new_q = [], [], []
        for g, e, q in zip(leaves, errors, qs, strict=True):
            if method == "none":
                s = g.sum(0)
            elif method in ("fp16", "bf16"):
                s = _sum_half(g, jnp.float16 if method == "fp16" else jnp.bfloat16)
            elif method == "topk":
                s, e = _topk(g, e, ratio, error_feedback)
            elif method == "sign":
                s, e = _sign(g, e, error_feedback)
            else:
                s, e, q = _powersgd(g, e, q, error_feedback)
            out.append(s)
            new_e.append(e)
            new_q.append(q)
        state = CompressionState(tree.unflatten(new_e), tree.unflatten(new_q))
        return tree.unflatten(out), state

    return Compression(init, update)


def compressed_replica_step(workload: Any, global_batch: int, method: Compression) -> Callable:
    """Jitted ``(params, state, xs, ys) -> (loss, gradient, moments, state)``: the replicas'
    gradients of ``xs``/``ys`` (leading replica axis) as one ``vmap``, each compressed by
    ``method`` before their sum; the loss summed, the batch moments averaged (as
    :meth:`~simdist.numerics.executor.Workload.replica_grads` does uncompressed)."""
    from simdist.numerics.device_allreduce import REPLICA_AXIS

    def build() -> Callable:
        one = workload.replica_loss_and_grad(global_batch)
        axis = REPLICA_AXIS if workload.sync_batch_norm else None

        def step(params: Any, state: CompressionState, xs: Any, ys: Any) -> tuple:
            loss, grads, moments = jax.vmap(one, (None, 0, 0), axis_name=axis)(params, xs, ys)
            summed, state = method.update(grads, state)
            return loss.sum(0), summed, jax.tree.map(lambda a: a.mean(0), moments), state

        return jax.jit(step)

    # The seed enters only the state (PowerSGD's first Q), an argument: Workloads differing
    # only in seed share the program (tests/test_compile_sharing.py).
    return workload.shared_program(("compressed", int(global_batch), method), build)


def compression_of(spec: CompressionSpec | None, replicas: int) -> Compression | None:
    """The compressor ``strategy.compression`` names (None without one, or with one replica:
    nothing goes on the wire)."""
    if spec is None or not spec.active or replicas == 1:
        return None
    return compression(
        spec.method, ratio=spec.topk_ratio, rank=spec.powersgd_rank, error_feedback=spec.feedback
    )
