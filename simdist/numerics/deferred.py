"""Gradients of replicas on different parameter versions, evaluated together in buckets.

Parameter-server workers each compute on the version they pulled; a JAX call per worker would
cost the engine one dispatch per replica. :class:`DeferredGradients` queues them and
evaluates one ``vmap`` per bucket. It is ``mode: sync``'s one gradient program: a run alone
fills a step's waves with its workers' gradients, runs computed together
(:mod:`simdist.strategies.parameter_server.sync_seeds`) with all of theirs; a lane does not
depend on the others. (Asynchronous runs replay their dataflow instead:
:mod:`simdist.strategies.parameter_server.replay`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from simdist.errors import SimdistError

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload


class DeferredGradients:
    """Queue (params, x, y) at pull time; evaluate all pending ones together when needed.

    Asynchronous workers each compute on their own (stale) parameter version.
    Instead of one JAX call per worker, submissions wait until some result is
    asked for; then every pending one is evaluated in buckets of exactly
    ``bucket`` with one jitted ``vmap`` over stacked params and batches. The
    last bucket is padded by repeating its last entry, so shapes never change:
    one compilation, and a given submission always runs in the same program,
    which makes results bit-identical between reruns. Results are numpy arrays.

    ``replicas``: each submitted batch is computed as that many replicas (a
    worker's devices), which matters only to BatchNormalization, whose
    statistics are per replica. ``with_moments``: results are ``(loss, grads,
    moments)``, the batch moments for ``Workload.update_state``.
    """

    def __init__(
        self,
        workload: Workload,
        global_batch: int,
        bucket: int = 8,
        *,
        replicas: int = 1,
        with_moments: bool = False,
    ) -> None:
        if bucket < 1:
            raise SimdistError(f"DeferredGradients bucket must be >= 1, got {bucket}")
        self.workload = workload
        self.global_batch = int(global_batch)
        self.bucket = int(bucket)
        self.with_moments = with_moments
        #: The jitted program a bucket runs (:meth:`Workload.stacked_fn`): the same object
        #: for every Workload differing only in seed, so runs that share it may share waves.
        self.program = workload.stacked_fn(self.global_batch, int(replicas))
        self._next = 0
        self._pending: list[tuple[int, Any, Any, Any]] = []
        self._done: dict[int, tuple] = {}
        self.calls = 0  # number of bucket evaluations, for benchmarks

    def submit(self, params: Any, x: Any, y: Any) -> int:
        """Queue one gradient evaluation; return its ticket."""
        ticket = self._next
        self._next += 1
        self._pending.append((ticket, params, x, y))
        return ticket

    @property
    def pending(self) -> int:
        """Number of submitted tickets not yet evaluated."""
        return len(self._pending)

    def result(self, ticket: int) -> tuple:
        """``(loss, grads)`` of ``ticket`` (``(loss, grads, moments)`` with ``with_moments``);
        evaluates every pending ticket first if needed.

        Each ticket's result can be fetched once; it is then forgotten.
        """
        if ticket not in self._done:
            if not any(t == ticket for t, *_ in self._pending):
                raise SimdistError(f"gradient ticket {ticket} is unknown or already collected")
            self.flush()
        return self._done.pop(ticket)

    def discard(self, ticket: int) -> None:
        """Forget ``ticket`` (its gradient was lost): skip it, or drop its result."""
        self._pending = [item for item in self._pending if item[0] != ticket]
        self._done.pop(ticket, None)

    def flush(self) -> None:
        """Evaluate all pending tickets, in submission order, bucket by bucket."""
        pending, self._pending = self._pending, []
        # Tickets with different batch shapes cannot share a vmap: group them, keeping order.
        groups: dict[tuple, list] = {}
        for item in pending:
            groups.setdefault((np.shape(item[2]), np.shape(item[3])), []).append(item)
        k = self.bucket
        for items in groups.values():
            for start in range(0, len(items), k):
                chunk = items[start : start + k]
                padded = chunk + [chunk[-1]] * (k - len(chunk))
                _, ps, xs, ys = zip(*padded, strict=True)
                out = jax.device_get(self.program(ps, np.stack(xs), np.stack(ys)))
                losses, trees = out[0], out[1:] if self.with_moments else out[1:2]
                self.calls += 1
                for i, (ticket, *_) in enumerate(chunk):
                    picked = tuple(jax.tree.map(lambda a, i=i: a[i], t) for t in trees)
                    self._done[ticket] = (losses[i], *picked)
