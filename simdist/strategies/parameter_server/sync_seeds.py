"""``mode: sync`` runs computed together: their workers' gradients in shared waves.

Which workers' gradients a synchronous parameter-server step applies, and in which order,
is decided by the clock alone (the first N−b arrivals, ties drawn from the seed), and
every worker of step k computes at version k. So under
:func:`simdist.runtime.engine.run_batch` a ``mode: sync`` run simulates with timing-only
parameter servers, noting each step's accepted workers, and leaves a
:class:`PsSyncSeedRun`. The runs are then computed step by step together: every run's
accepted gradients of step k go into the same 8-wide
:class:`~simdist.numerics.deferred.DeferredGradients` program a run alone uses (a gradient's
lane does not depend on its neighbours or its place: checked), then each run averages and
applies them on its own parameter servers with the update a run alone applies
(:func:`.sync_mean.apply_step`). tests/test_batched_sync.py checks the reports byte for byte.

Which runs defer is the strategy's to say (:meth:`.workers.ParameterServerWorkers.defers`);
this module does not know it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from simdist.batched_runs import DeferredRun
from simdist.strategies.base import Replayed
from simdist.strategies.parameter_server.servers import ParameterServers
from simdist.strategies.parameter_server.sync_mean import apply_step

if TYPE_CHECKING:
    from simdist.strategies.parameter_server.workers import ParameterServerWorkers


class PsSyncSeedRun(DeferredRun):
    """A ``mode: sync`` run simulated without its numerics: its parameter servers as they
    start, each step's accepted workers in the order they are averaged, and the ``updates``
    rows waiting for their loss.

    Made as the run starts, it keeps the run's numeric servers and gives the simulation
    timing-only ones (versions only); the numeric ones come back once computed."""

    def __init__(self, strategy: ParameterServerWorkers) -> None:
        self.strategy = strategy
        self.servers = strategy.servers
        strategy.servers = ParameterServers(strategy.shards, strategy.n_ps)
        self.accepted: list[list[int]] = []
        self.rows: list[dict[str, Any]] = []
        self.losses: list[float] = []
        self.evaluations: dict[int, dict[str, float]] = {}

    @property
    def key(self) -> Hashable:
        """Runs whose workers' gradients share one program."""
        s = self.strategy
        return (s.deferred.program, s.worker_batch)  # type: ignore[union-attr]

    @classmethod
    def execute(cls, members: Sequence[DeferredRun]) -> None:
        """Every run's steps, the gradients of each step of all runs in shared waves."""
        runs = [m for m in members if isinstance(m, PsSyncSeedRun)]
        waves = runs[0].strategy.deferred  # the first run's own, empty: it computed nothing
        going = list(runs)
        k = 0
        while going:
            going = [run for run in going if k < len(run.accepted)]
            tickets = [run.submit(waves, k) for run in going]
            for run, mine in zip(going, tickets, strict=True):
                run.apply(k, [waves.result(t) for t in mine])
            going = [run for run in going if math.isfinite(run.losses[-1])] if going else []
            k += 1
        for run in runs:
            run.finish()

    def submit(self, waves: Any, k: int) -> list[int]:
        """Queue the gradients of step ``k``'s accepted workers, at version k."""
        s = self.strategy
        params = self.servers.assemble(self.servers.values)  # type: ignore[arg-type]
        return [waves.submit(params, *s.batch_of(w, k)) for w in self.accepted[k]]

    def apply(self, k: int, results: list[tuple]) -> None:
        """Average and apply step ``k``'s gradients; evaluate when step ``k`` reserved it."""
        loss = apply_step(self.servers, [(float(r[0]), r[1], r[2]) for r in results])
        self.losses.append(loss)
        if math.isfinite(loss) and self.strategy.reserved_steps[k].eval_rows:
            workload = self.strategy.workload
            self.evaluations[k] = workload.evaluate(self.servers.current())  # type: ignore[union-attr]

    def finish(self) -> None:
        """Write the values the run waited for, or ask for a second pass stopping at the
        step whose loss was not finite (a run alone stops there)."""
        s = self.strategy
        if not math.isfinite(self.losses[-1]):
            s.rerun_with = Replayed(s.workload, len(self.losses))  # type: ignore[arg-type]
            return
        recorder = s.recorder
        rows = iter(self.rows)
        for k, (reserved, loss) in enumerate(zip(s.reserved_steps, self.losses, strict=True)):
            recorder.fill_metric(reserved.loss_row, loss)
            for name, row in reserved.eval_rows:
                recorder.fill_metric(row, self.evaluations[k][name])
            for _ in self.accepted[k]:
                recorder.row("updates", **next(rows), loss=loss)
        s.servers = self.servers
