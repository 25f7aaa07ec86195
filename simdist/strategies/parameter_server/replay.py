"""The numerics of an asynchronous run, replayed from its dataflow in large XLA programs.

The SimPy pass recorded every gradient (its batch, the PS states it pulled) and
every op in order (:mod:`.dataflow`). The replay walks the ops; whenever the
next applied shard needs a gradient not yet computed, it computes every
gradient whose pulled states exist — a *wave* — in ``vmap`` calls of exactly
:data:`BUCKET` parameter versions, then applies every shard it can, each PS's
shards :data:`~simdist.numerics.chains.CHAIN` at a time in one fused program
(:func:`~simdist.numerics.chains.apply_chain_fn`).

Bit for bit what the step-by-step loop computed: a gradient's lane of the
8-wide program does not depend on the other lanes (which gradients share a
call depends on timing in either design), the versions and batches are the
same arrays, and the fused updates equal the per-update calls. States live on
the host (NumPy) between calls: one transfer per call and per array, free
slicing; a state is kept only while a later gradient, update or evaluation
still reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from simdist.numerics.chains import CHAIN, apply_chain_fn
from simdist.strategies.parameter_server.dataflow import Apply, Dataflow, Evaluate
from simdist.strategies.parameter_server.servers import ParameterServers

#: Parameter versions per gradient call: the vmap width whose lanes the step-by-step loop used.
BUCKET = 8


class State(NamedTuple):
    """One PS's state: its value shards, its optimizer state, its model-state shards."""

    values: dict[str, Any]
    opt_state: Any
    model_state: dict[str, Any]


class Outcome(NamedTuple):
    """What the replay computed: losses by ticket, evaluations in order, the final parameters.

    ``cut`` is the number of shards applied before the first one whose gradient's
    loss is not finite (None when training did not diverge); the replay stops there.
    """

    losses: dict[int, float]
    evaluations: list[dict[str, float]]
    final: Any
    cut: int | None


class Replay:
    """Replays one run's :class:`~.dataflow.Dataflow` on the values of ``servers``.

    ``servers`` holds the initial values (a :class:`~.servers.ParameterServers`
    with the workload); a gradient's batch is global batch ``Ticket.batch`` of
    ``global_batch`` examples of ``workload.batches``.
    """

    def __init__(
        self,
        servers: ParameterServers,
        workload: Any,
        global_batch: int,
        replicas: int = 1,
    ) -> None:
        assert servers.values is not None and servers.opt_states is not None
        assert servers.states is not None
        self.servers = servers
        self.workload = workload
        self.global_batch = int(global_batch)
        self.n_ps = servers.n_ps
        self.n_leaves = servers.treedef.num_leaves
        self.grad_fn = workload._stacked_fn(int(global_batch), int(replicas), prestacked=True)
        self.chain_fn = apply_chain_fn(workload)
        self.calls = 0  # gradient calls, for benchmarks
        self.chains = 0  # update chains, for benchmarks
        self.store: list[dict[int, State]] = [
            {0: State(servers.values[ps], servers.opt_states[ps], servers.states[ps])}
            for ps in range(self.n_ps)
        ]

    # -- assembling parameters from shards -----------------------------------------

    def _flat(self, ids: Sequence[int], model_state: bool = False) -> dict[str, Any]:
        flat: dict[str, Any] = {}
        for ps, i in enumerate(ids):
            state = self.store[ps][i]
            flat.update(state.model_state if model_state else state.values)
        return flat

    def _leaves(self, flat: dict[str, Any], keys: Sequence[Sequence[str]]) -> list[np.ndarray]:
        leaves = []
        for parts in keys:
            arrays = [np.asarray(flat[key]) for key in parts]
            leaves.append(arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0))
        return leaves

    def params(self, ids: Sequence[int]) -> list[np.ndarray]:
        """The parameter leaves (tree order) the PS tasks hold at state ``ids``."""
        return self._leaves(self._flat(ids), self.servers._leaf_keys[: self.n_leaves])

    def variables(self, ids: Sequence[int]) -> Any:
        """Parameters and model state at ``ids`` as one tree (what ``evaluate`` takes)."""
        s = self.servers
        params = jax.tree_util.tree_unflatten(s.treedef, self.params(ids))
        if not s.state_treedef.num_leaves:
            return params
        keys = s._leaf_keys[self.n_leaves :]
        state = jax.tree_util.tree_unflatten(
            s.state_treedef, self._leaves(self._flat(ids, True), keys)
        )
        return self.workload.variables(params, state)

    # -- the walk -----------------------------------------------------------------

    def run(self, flow: Dataflow, final_ids: Sequence[int]) -> Outcome:
        """Compute every applied gradient, update and evaluation of ``flow`` in order."""
        tickets, ops = flow.tickets, flow.ops
        uses: dict[tuple[int, int], int] = {}

        def use(ps: int, i: int, n: int = 1) -> None:
            uses[(ps, i)] = uses.get((ps, i), 0) + n

        needed = sorted({op.ticket for op in ops if isinstance(op, Apply)})
        for t in needed:
            for ps, i in enumerate(tickets[t].pulled):
                use(ps, i)
        for op in ops:
            if isinstance(op, Apply):
                use(op.ps, op.source)
            else:
                for ps, i in enumerate(op.ids):
                    use(ps, i)
        for ps, i in enumerate(final_ids):
            use(ps, i, 1 << 40)  # kept to the end
        self.uses = uses

        produced = [0] * self.n_ps  # the newest state id of each PS computed so far
        results: dict[int, tuple[float, Any, Any]] = {}
        losses: dict[int, float] = {}
        evaluations: list[dict[str, float]] = []
        waiting = list(needed)  # tickets not computed yet, in ticket order
        applied = 0  # shards applied so far
        i, n = 0, len(ops)
        while i < n:
            # Every op from i on whose gradient is known, up to a divergence.
            j, stop = i, False
            while j < n:
                op = ops[j]
                if isinstance(op, Apply):
                    if op.ticket not in results:
                        break
                    if not np.isfinite(losses[op.ticket]):
                        stop = True
                        break
                j += 1
            applied += self._execute(ops[i:j], results, evaluations, produced)
            i = j
            if stop:
                return Outcome(losses, evaluations, None, applied)
            if i == n:
                break
            blocked = ops[i].ticket  # type: ignore[union-attr]
            ready = self._ready(waiting, blocked, tickets, produced)
            done: set[int] = set()
            for start in range(0, len(ready), BUCKET):
                chunk = ready[start : start + BUCKET]
                if len(chunk) < BUCKET and blocked in done:
                    break  # a partial wave waits for more gradients
                self._gradients(chunk, tickets, results, losses)
                done.update(chunk)
            waiting = [t for t in waiting if t not in done]
        final = jax.device_put(self.variables(final_ids))
        return Outcome(losses, evaluations, final, None)

    @staticmethod
    def _ready(
        waiting: list[int], blocked: int, tickets: Sequence[Any], produced: list[int]
    ) -> list[int]:
        """The waiting gradients whose pulled states exist, ``blocked`` among them.

        Tickets are numbered in pull order and a later pull reads newer states, so
        the scan stops at the first one not ready (after a rollback an older state
        may be pulled later: such a ticket waits for the next wave).
        """

        def ready(t: int) -> bool:
            return all(p <= produced[ps] for ps, p in enumerate(tickets[t].pulled))

        out = []
        for t in waiting:
            if not ready(t):
                break
            out.append(t)
        if blocked not in out:
            assert ready(blocked), "a gradient is applied before the states it pulled exist"
            out.append(blocked)
            out.sort()
        return out

    def _release(self, ps: int, i: int) -> None:
        key = (ps, i)
        self.uses[key] -= 1
        if self.uses[key] == 0:
            del self.uses[key]
            self.store[ps].pop(i, None)

    def _gradients(
        self,
        chunk: list[int],
        tickets: Sequence[Any],
        results: dict[int, tuple[float, Any, Any]],
        losses: dict[int, float],
    ) -> None:
        """One ``vmap`` call over the gradients of ``chunk`` (padded to :data:`BUCKET`)."""
        padded = chunk + [chunk[-1]] * (BUCKET - len(chunk))
        lanes = [self.params(tickets[t].pulled) for t in padded]
        stacked = [np.stack(leaves) for leaves in zip(*lanes, strict=True)]
        params = jax.tree_util.tree_unflatten(self.servers.treedef, stacked)
        # The lanes' batches in one gather: BatchStream.batch's rows, all at once.
        stream = self.workload.batches
        rows = np.concatenate([stream.indices(tickets[t].batch, self.global_batch) for t in padded])
        data = stream.dataset
        xs = data.x_train[rows].reshape(BUCKET, self.global_batch, *data.x_train.shape[1:])
        ys = data.y_train[rows].reshape(BUCKET, self.global_batch, *data.y_train.shape[1:])
        out = jax.device_get(self.grad_fn(params, xs, ys))
        self.calls += 1
        loss, grads, moments = out
        grad_leaves = jax.tree_util.tree_leaves(grads)
        moment_leaves = jax.tree_util.tree_leaves(moments)
        for lane, t in enumerate(chunk):
            losses[t] = float(loss[lane])
            results[t] = (
                losses[t],
                [a[lane] for a in grad_leaves],
                [a[lane] for a in moment_leaves],
            )
            for ps, p in enumerate(tickets[t].pulled):
                self._release(ps, p)

    def _execute(
        self,
        ops: Sequence[Apply | Evaluate],
        results: dict[int, tuple[float, Any, Any]],
        evaluations: list[dict[str, float]],
        produced: list[int],
    ) -> int:
        """Run ``ops`` (their gradients known): each PS's updates in chains, then evaluations."""
        runs: list[list[Apply]] = [[] for _ in range(self.n_ps)]
        for op in ops:
            if isinstance(op, Apply):
                runs[op.ps].append(op)
        for ps, run in enumerate(runs):
            start = 0
            while start < len(run):
                # A chain continues from its previous state (a restore starts another) ...
                stop = start + 1
                while (
                    stop < len(run)
                    and stop - start < CHAIN
                    and run[stop].source == run[stop - 1].target
                ):
                    stop += 1
                self._chain(ps, run[start:stop], results)
                produced[ps] = run[stop - 1].target
                start = stop
        count = 0
        for op in ops:
            if isinstance(op, Apply):
                count += 1
            else:
                evaluations.append(self.workload.evaluate(self.variables(op.ids)))
                for ps, i in enumerate(op.ids):
                    self._release(ps, i)
        return count

    def _chain(self, ps: int, run: list[Apply], results: dict[int, tuple]) -> None:
        """Apply ``run`` (consecutive updates of ``ps``) in one call where that is exact."""
        s = self.servers
        first = self.store[ps][run[0].source]
        padded = run + [run[-1]] * (CHAIN - len(run))
        grads = {
            key: np.stack([_rows(results[op.ticket][1][leaf], rows) for op in padded])
            for key, leaf, rows in s._ps_slices[ps]
        }
        moments = {
            key: np.stack(
                [_rows(results[op.ticket][2][leaf - self.n_leaves], rows) for op in padded]
            )
            for key, leaf, rows in s._ps_state_slices[ps]
        }
        scales = np.array([op.scale for op in padded], dtype=np.float32)
        states = self.chain_fn(*first, grads, scales, moments, len(run))
        self.chains += 1
        for op, state in zip(run, states, strict=True):
            if (ps, op.target) in self.uses:
                self.store[ps][op.target] = State(*state)
            self._release(ps, op.source)


def _rows(array: Any, rows: slice | None) -> Any:
    """``array``, or the rows of it a shard holds."""
    return array if rows is None else array[rows]
