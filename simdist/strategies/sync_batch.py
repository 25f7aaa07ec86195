"""Synchronous runs computed together: the seeds of one scenario, step by step in one program.

A synchronous run's clock does not depend on its values, so under
:func:`simdist.engine.run_batch` a run of the synchronous family simulates without
computing (``Strategy.defer``): each step reserves the metric rows its loss and
evaluation would fill (:meth:`~simdist.strategies.base.Strategy.reserve_step`) and the
run leaves a :class:`SyncSeedRun`. Runs with the same programs are then computed
:data:`WIDTHS` at a time, each step of all of them in one dispatch per program
(:class:`~simdist.numerics.seed_batch.SeedPrograms`), and every run gets its losses,
evaluations and final state exactly as it would have computed them alone
(tests/test_batched_sync.py), or, if its loss stops being finite, a second pass that stops
there (``Strategy.rerun_with``), as a run alone does.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from simdist.batched_runs import DeferredRun
from simdist.strategies.base import Replayed
from simdist.strategies.sync_trainer import SyncState, SyncTrainer

if TYPE_CHECKING:
    from simdist.strategies.sync import SynchronousStrategy

#: How many runs one program computes, largest first: a group of runs is cut into these.
#: Each width is a program of its own, compiled once per process. The engine computes
#: :attr:`~simdist.batched_runs.DeferredRun.group_runs` (4) runs at a time, so 10 seeds are
#: 4 + 4 + 2 and the 8-wide program is not used. 10 seeds of mirrored_4dev in one warm
#: process: run_batch 1.46x faster than one by one (benchmarks/bench_seed_families.py, issue
#: 39; issue 32 measured 1.7x with 8 + 2, 1.3x with 4 and 2).
WIDTHS = (8, 4, 2)


def can_defer(strategy: SynchronousStrategy) -> bool:
    """Whether ``strategy``'s run can leave its numerics to :class:`SyncSeedRun`: plain
    data-parallel steps (:class:`SyncTrainer`, ``batched``, no compression) that follow
    one another from the first to the last (no failures, no checkpoints to restore)."""
    trainer, scenario = strategy.trainer, strategy.scenario
    return (
        type(trainer) is SyncTrainer
        and strategy.state is not None
        and trainer.compression is None
        and trainer.execution == "batched"
        and not scenario.faults.failures
        and scenario.checkpoint is None
        and strategy.stop_at is None
        and strategy.may_rerun
    )


class SyncSeedRun(DeferredRun):
    """A synchronous run simulated without its numerics: its trainer, its initial state and
    the metric rows each step reserved."""

    def __init__(self, strategy: SynchronousStrategy) -> None:
        self.strategy = strategy
        self.trainer: SyncTrainer = strategy.trainer  # type: ignore[assignment]
        self.reserved = list(strategy.reserved_steps)

    @property
    def key(self) -> Hashable:
        """Runs of the same programs (model, task, optimizer, schedule), global batch,
        replicas and number of steps."""
        from simdist.numerics.seed_batch import program_key

        return (*program_key(self.trainer), len(self.reserved))

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
        strategy.state = final


def computed(group: list[SyncSeedRun]) -> None:
    """Train every run of ``group`` step by step together; fill in each one's values."""
    import jax

    from simdist.numerics.seed_batch import seed_programs

    programs = seed_programs(group[0].trainer, len(group)) if len(group) > 1 else None
    states = [run.strategy.state for run in group]
    current = [(s.params, s.opt_state, s.model_state) for s in states]  # type: ignore[union-attr]
    losses: list[list[Any]] = []
    evaluations: list[dict[int, Any]] = [{} for _ in group]
    for k in range(len(group[0].reserved)):
        batches = [run.trainer.batch(k) for run in group]
        if programs is None:
            state, loss = group[0].trainer.dispatch(SyncState(*current[0]), batches[0])
            current, step_losses = [(state.params, state.opt_state, state.model_state)], [loss]
        else:
            current, step_losses = programs.step(current, batches)
        losses.append(step_losses)
        for i, run in enumerate(group):
            if run.reserved[k].eval_rows:
                workload = run.strategy.workload
                params = workload.variables(current[i][0], current[i][2])  # type: ignore[union-attr]
                evaluations[i][k] = workload.evaluate_async(params)  # type: ignore[union-attr]
    values = jax.device_get(losses)
    for i, run in enumerate(group):
        run.finish([float(v[i]) for v in values], evaluations[i], SyncState(*current[i]))
