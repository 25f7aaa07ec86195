"""``pull: on_update``: each variable shard is pulled as soon as every worker's gradient for it
has arrived at its PS, not at the start of the next step.

tf_cnn_benchmarks' ``variable_update=distributed_replicated`` puts a barrier per variable:
each worker applies its gradient of variable *i* to the PS copy, waits on a sync queue for
every other worker's, then reads variable *i* back into its GPUs' copies
(``VariableMgrDistributedReplicated.append_apply_gradients_ops``, tensorflow/benchmarks
scripts/tf_cnn_benchmarks/variable_mgr.py, May 2017), while the other variables are still
being pushed. BytePS does the same per partition: a partition is pulled once its summation
is done (Jiang et al., OSDI 2020, §4). Pulls then overlap the rest of the pushes, using the
NICs' other direction, where ``step_start`` (tf_cnn_benchmarks' ``parameter_server``:
every variable read when the next ``session.run`` starts) first finishes every push.

Timing only: the values a worker computes on are still the ones of its step start (every
gradient of the step has been applied by then), so the numerics do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class PullOnUpdate:
    """Counts each shard's gradients of a step; once all ``n_workers`` are in, starts every
    worker's pull of it for the next step, kept until that step asks for it."""

    def __init__(
        self, n_workers: int, total_steps: int, pull: Callable[[int, int, int], list[Any]]
    ) -> None:
        self.n_workers = n_workers
        self.total_steps = total_steps
        self._pull = pull  # (worker, step, shard) -> that pull's moves, started now
        self._arrived: dict[tuple[int, int], int] = {}
        self._started: dict[tuple[int, int], dict[int, list[Any]]] = {}

    def landed(self, step: int, shard: int) -> None:
        """Worker gradients of ``shard`` for ``step``: one more has arrived at its PS."""
        key = (step, shard)
        count = self._arrived.get(key, 0) + 1
        if count < self.n_workers:
            self._arrived[key] = count
            return
        self._arrived.pop(key, None)
        if step + 1 >= self.total_steps:
            return
        for w in range(self.n_workers):
            self._started.setdefault((w, step + 1), {})[shard] = self._pull(w, step + 1, shard)

    def pulls(self, w: int, step: int, shards: Sequence[int]) -> list[Any]:
        """Worker ``w``'s pulls of ``shards`` for ``step``: started on update, or now (the
        first step, or a shard whose pull has not started)."""
        started = self._started.get((w, step), {})
        moves = []
        for i in shards:
            if i not in started:
                moves.extend(self._pull(w, step, i))
                continue
            # An arrived pull has nothing left to wait for; left out, a join cannot count
            # it a second time (its arrival, maybe this very instant, was counted alone).
            moves.extend(move for move in started.pop(i) if not move.done.triggered)
        if not started:
            self._started.pop((w, step), None)
        return moves
