"""Gradient compressors as pure JAX reductions over parameter trees: N replica gradients in,
their (decompressed) sum out, and the state each replica keeps between steps.

Optax-style (``init`` / ``update`` with an immutable state), but a *reduction*: ``update``
takes the replicas' gradients stacked on a leading axis ``[N, ...]`` and returns the
gradient every replica applies, the sum of what the wire delivered. Each tensor is reduced
by the method's :class:`~simdist.compressors.base.Compressor` (:mod:`simdist.compressors`,
where the methods and their sources are). No SimPy.

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

from simdist.compressors import compressor
from simdist.compressors.base import DEFAULT_RANK, DEFAULT_RATIO

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload

__all__ = ["Compression", "CompressionState", "compressed_replica_step", "compression"]


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


@functools.cache
def compression(
    method: str,
    *,
    ratio: float = DEFAULT_RATIO,
    rank: int = DEFAULT_RANK,
    error_feedback: bool = True,
) -> Compression:
    """The reduction of ``method`` (one of :data:`simdist.compressors.METHODS`) with its
    parameters; one object per set of parameters, so the programs built on it are shared
    (it holds no state). A ValueError names the methods for an unknown one."""
    comp = compressor(method, ratio=ratio, rank=rank, error_feedback=error_feedback)

    def init(params: Any, replicas: int, seed: np.random.SeedSequence) -> CompressionState:
        error = jax.tree.map(lambda p: jnp.zeros((replicas, *p.shape), p.dtype), params)
        leaves, tree = jax.tree.flatten(params)
        rng = np.random.default_rng(seed)  # one draw per tensor that needs one, in tree order
        qs = [comp.init_q(tuple(leaf.shape), leaf.dtype, rng) for leaf in leaves]
        return CompressionState(error, jax.tree.unflatten(tree, qs))

    def update(grads: Any, state: CompressionState) -> tuple[Any, CompressionState]:
        leaves, tree = jax.tree.flatten(grads)
        errors = tree.flatten_up_to(state.error)
        qs = tree.flatten_up_to(state.q)
        out, new_e, new_q = [], [], []
        for g, e, q in zip(leaves, errors, qs, strict=True):
            s, e, q = comp.reduce(g, e, q)
            out.append(s)
            new_e.append(e)
            new_q.append(q)
        state = CompressionState(tree.unflatten(new_e), tree.unflatten(new_q))
        return tree.unflatten(out), state

    return Compression(init, update)


def compressed_replica_step(workload: Workload, global_batch: int, method: Compression) -> Callable:
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
