"""Synchronous runs computed together: the seeds of one scenario, step by step, as lanes.

A synchronous run's clock does not depend on its values, so under
:func:`simdist.runtime.engine.run_batch` a run of the synchronous family simulates without
computing (``Strategy.defer``): each step reserves the metric rows its loss and
evaluation would fill (:func:`~simdist.strategies.reserved_rows.reserve_step`) and the
run leaves a :class:`SyncSeedRun`. Runs with the same programs are then computed
:data:`WIDTHS` at a time with the step a run alone takes
(:meth:`~simdist.strategies.sync_trainer.SyncTrainer.step`), one lane per run, and every
run gets its losses, evaluations and final state exactly as it computes them alone
(tests/test_batched_sync.py), or, if its loss stops being finite, a second pass that stops
there (``Strategy.rerun_with``), as a run alone does.

Which runs defer is the strategy's to say (:meth:`SynchronousStrategy.defers
<simdist.strategies.sync.SynchronousStrategy.defers>`); this module does not know it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from simdist.batched_runs import DeferredRun
from simdist.strategies.base import Replayed
from simdist.strategies.sync_trainer import SyncState, SyncTrainer

if TYPE_CHECKING:
    from simdist.strategies.base import Strategy

#: How many runs one program computes, largest first: a group of runs is cut into these
#: (a rest of one is a run's own lane). Each width is traced and compiled once per process.
#: The engine computes :attr:`~simdist.batched_runs.DeferredRun.group_runs` (4) runs at a
#: time, so 10 seeds are 4 + 4 + 2. 10 seeds of mirrored_4dev in one warm process: run_batch
#: 1.46x faster than one by one (benchmarks/bench_seed_families.py, issue 39); 1.20x once a run
#: alone took the same step (issue 40; 1.02x before it, measured in the same session).
WIDTHS = (4, 2)


class SyncSeedRun(DeferredRun):
    """A synchronous run simulated without its numerics: its trainer, its initial state and
    the metric rows each step reserved.

    ``strategy`` is a :class:`~simdist.strategies.sync.SynchronousStrategy`: its ``trainer``
    (a :class:`SyncTrainer`) and its ``state``, which :meth:`finish` replaces with the final one.
    """

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.trainer: SyncTrainer = strategy.trainer  # type: ignore[attr-defined]
        self.reserved = list(strategy.reserved_steps)

    @property
    def key(self) -> Hashable:
        """Runs of the same step programs (model, task, optimizer, schedule, global batch,
        replicas) and number of steps."""
        return (self.trainer.lanes, len(self.reserved))

    @classmethod
    def execute(cls, members: Sequence[DeferredRun]) -> None:
        """Compute the members in groups of :data:`WIDTHS`, then let each finish its run."""
        runs = [m for m in members if isinstance(m, SyncSeedRun)]
        start = 0
        while start < len(runs):
            width = next((w for w in WIDTHS if w <= len(runs) - start), 1)
            computed(runs[start : start + width])
            start += width

    def finish(self, losses: list[float], evaluations: dict[int, Any], final: SyncState) -> None:
        """Write this run's values in the rows it reserved (its losses, one per step; its
        evaluations, by step index) and its final state; or, when a loss is not finite,
        ask for a second pass that stops at that step, as a run alone ends up with."""
        from simdist.numerics.executor import Workload

        strategy = self.strategy
        for reserved, loss in zip(self.reserved, losses, strict=True):
            if not math.isfinite(loss):
                strategy.rerun_with = Replayed(strategy.workload, reserved.step)  # type: ignore[arg-type]
                return
        recorder = strategy.recorder
        for k, (reserved, loss) in enumerate(zip(self.reserved, losses, strict=True)):
            recorder.fill_metric(reserved.loss_row, loss)
            if reserved.eval_rows:
                values = Workload.evaluated(evaluations[k])
                for name, row in reserved.eval_rows:
                    recorder.fill_metric(row, values[name])
        strategy.state = final  # type: ignore[attr-defined]


def computed(group: list[SyncSeedRun]) -> None:
    """Train every run of ``group`` step by step together; fill in each one's values."""
    import jax

    trainer = group[0].trainer
    current: list[SyncState] = [run.strategy.state for run in group]  # type: ignore[attr-defined]
    losses: list[list[Any]] = []
    evaluations: list[dict[int, Any]] = [{} for _ in group]
    for k in range(len(group[0].reserved)):
        current, step_losses = trainer.step(current, [run.trainer.batch(k) for run in group])
        losses.append(step_losses)
        for i, run in enumerate(group):
            if run.reserved[k].eval_rows:
                workload = run.strategy.workload
                params = workload.variables(current[i].params, current[i].model_state)  # type: ignore[union-attr]
                evaluations[i][k] = workload.evaluate_async(params)  # type: ignore[union-attr]
    values = jax.device_get(losses)
    for i, run in enumerate(group):
        run.finish([float(v[i]) for v in values], evaluations[i], current[i])
