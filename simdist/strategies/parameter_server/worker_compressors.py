"""The numerics of compressed PS pushes: each worker's compressor and error-feedback state.

What :mod:`.push_compression` prices, computed: worker ``w`` compresses the pieces of its
gradient (one per variable shard, :func:`.push_compression.piece_shape`) with
:func:`simdist.numerics.compression.compression` on one replica, keeping its residual (and
PowerSGD's warm-start Q) from one of its pushes to the next; the decompressed pieces are
put back together into the gradient tree the PS tasks apply. A worker's state depends only
on its own earlier gradients, so gradients computed out of order across workers (the
replay's waves, :mod:`.replay`) are compressed correctly as long as each worker's are
taken in its own order — :meth:`WorkerCompressors.compress_slot` checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from simdist.numerics.compression import compression
from simdist.seeds import stream
from simdist.strategies.compression import CompressionSpec
from simdist.strategies.parameter_server.partition import Shard


class WorkerCompressors:
    """One compressor state per worker over the pieces of ``params`` that ``shards`` cut."""

    def __init__(
        self,
        spec: CompressionSpec,
        shards: Sequence[Shard],
        params: Any,
        n_workers: int,
        seed: int,
    ) -> None:
        leaves, self.treedef = jax.tree.flatten(params)
        n = len(leaves)
        #: Each parameter leaf's row ranges, in row order (one piece per shard of it).
        self.rows: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for s in shards:
            if s.leaf < n:
                self.rows[s.leaf].append((s.start, s.stop))
        for ranges in self.rows:
            ranges.sort()
        comp = compression(
            spec.method,
            ratio=spec.topk_ratio,
            rank=spec.powersgd_rank,
            error_feedback=spec.feedback,
        )
        template = self._pieces(leaves)
        self.states = [
            comp.init(template, 1, stream(seed, "ps_compression", w)) for w in range(n_workers)
        ]
        self.last = [-1] * n_workers  # the last ticket each worker compressed

        def step(grads: Any, state: Any) -> tuple[Any, Any]:
            pieces = [p[None] for p in self._pieces(jax.tree.leaves(grads))]
            out, state = comp.update(pieces, state)
            return self._whole(out), state

        def slot(bank: list[Any], index: Any, state: Any) -> tuple[list[Any], Any]:
            grads = jax.tree.unflatten(self.treedef, [a[index] for a in bank[:n]])
            out, state = step(grads, state)
            new = [a.at[index].set(g) for a, g in zip(bank, jax.tree.leaves(out), strict=False)]
            return new + list(bank[n:]), state

        self._step = jax.jit(step)
        self._slot = jax.jit(slot, donate_argnums=(0,))

    def _pieces(self, leaves: Sequence[Any]) -> list[Any]:
        out = []
        for leaf, ranges in zip(leaves, self.rows, strict=True):
            if leaf.ndim == 0 or len(ranges) <= 1:
                out.append(leaf)
            else:
                out.extend(leaf[start:stop] for start, stop in ranges)
        return out

    def _whole(self, pieces: Sequence[Any]) -> Any:
        leaves, i = [], 0
        for ranges in self.rows:
            k = 1 if len(ranges) <= 1 else len(ranges)
            part = pieces[i : i + k]
            leaves.append(part[0] if k == 1 else jnp.concatenate(part, axis=0))
            i += k
        return jax.tree.unflatten(self.treedef, leaves)

    def compress(self, w: int, grads: Any) -> Any:
        """Worker ``w``'s next push, compressed and decompressed (its state moves on)."""
        out, self.states[w] = self._step(grads, self.states[w])
        return out

    def compress_slot(self, w: int, ticket: int, bank: list[Any], index: int) -> list[Any]:
        """Compress in place the gradient of ``ticket`` (worker ``w``'s) held at ``index`` of
        ``bank`` (one array per leaf, a leading slot axis; leaves past the parameters'
        untouched); return the new bank."""
        assert ticket > self.last[w], "a worker's gradients are compressed in push order"
        self.last[w] = ticket
        bank, self.states[w] = self._slot(bank, jnp.int32(index), self.states[w])
        return bank
