"""gpipe and 1f1b runs whose numerics are computed together (:mod:`simdist.batched_runs`).

A pipeline step's clock does not depend on its values, so with ``strategy.defer`` the
simulation only reserves where each step's values go — its ``train_loss`` row and, at an
evaluation point, the test metrics' rows (:func:`~simdist.strategies.reserved_rows.reserve_step`,
as :meth:`Strategy.end_step` records them) — and :meth:`DeferredPipeline.execute` computes
the runs step by step afterwards with the step a run alone takes
(:meth:`simdist.numerics.stages.PipelineTrainer.step`), up to :data:`WIDTH` runs as lanes of
each stage program. Each run's report is then the one of that run alone
(tests/test_batched_pipeline.py); a run whose loss is not finite asks for its second pass
(``rerun_with``), as the synchronous loop does, so it stops there.

Which runs defer is the strategy's to say (:meth:`PipelineStrategy.defers
<simdist.strategies.pipeline.strategy.PipelineStrategy.defers>`); this module does not know it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from simdist.batched_runs import DeferredRun
from simdist.strategies.base import Replayed

if TYPE_CHECKING:
    from simdist.strategies.base import Strategy

__all__ = ["WIDTH", "DeferredPipeline"]

#: Most runs side by side in one stage program (more are computed in several groups of
#: near-equal sizes): bounds the programs' size and compile time.
WIDTH = 8
#: Steps whose losses are fetched from the device in one transfer.
FETCH_STEPS = 32


class DeferredPipeline(DeferredRun):
    """One gpipe / 1f1b run's reserved metric rows, filled by :meth:`execute`.

    ``strategy`` is a :class:`~simdist.strategies.pipeline.strategy.PipelineStrategy`: its
    ``trainer`` (a :class:`~simdist.numerics.stages.PipelineTrainer`), its ``state``, which
    the computed run's final one replaces, and its shape (``counts``, ``R``, ``M``)."""

    #: A group fills one program's copies (nothing computes while the next runs are simulated).
    group_runs = WIDTH

    def __init__(self, strategy: Strategy) -> None:
        self.strategy: Any = strategy
        self.reserved = list(strategy.reserved_steps)

    @property
    def key(self) -> Hashable:
        """Runs of equal workload section (but their seeds), partition, copies and
        micro-batches run the same stage programs."""
        s = self.strategy
        spec = json.dumps(s.scenario.workload.model_dump(mode="json"), sort_keys=True)
        return (spec, s.counts, s.R, s.M, s.total_steps)

    @classmethod
    def execute(cls, members: Sequence[DeferredRun]) -> None:
        runs = [m for m in members if isinstance(m, DeferredPipeline)]
        groups = -(-len(runs) // WIDTH)
        for g in range(groups):
            # Near-equal groups: at most two widths to compile.
            _compute(runs[g * len(runs) // groups : (g + 1) * len(runs) // groups])


def _compute(runs: Sequence[DeferredPipeline]) -> None:
    """Train ``runs`` (of one key) together, step by step; fill in each one's rows and final
    state, or ask for its second pass when a loss is not finite."""
    trainer = runs[0].strategy.trainer
    states = [r.strategy.state for r in runs]
    steps = len(runs[0].reserved)
    pending: list[list[Any]] = [[] for _ in runs]  # per run, per step: micro-batch losses
    for step in range(steps):
        states, losses = trainer.step(states, [r.strategy.trainer.batch(step) for r in runs])
        for k, run in enumerate(runs):
            pending[k].append(losses[k])
            rows = run.reserved[step].eval_rows
            if rows:
                workload, state = run.strategy.workload, states[k]
                values = workload.evaluate(workload.variables(state.params, state.model_state))
                _fill(run, rows, values)
        if (step + 1) % FETCH_STEPS == 0 or step + 1 == steps:
            _settle(runs, pending, step + 1)
    for run, state in zip(runs, states, strict=True):
        if run.strategy.rerun_with is None:
            run.strategy.state = state


def _fill(run: DeferredPipeline, rows: Sequence[tuple[str, int]], values: dict[str, float]) -> None:
    """An evaluation's values into the rows reserved for them."""
    if [name for name, _ in rows] != list(values):
        raise AssertionError(f"evaluation metrics {list(values)} differ from the reserved {rows}")
    for (_, row), value in zip(rows, values.values(), strict=True):
        run.strategy.recorder.fill_metric(row, value)


def _settle(runs: Sequence[DeferredPipeline], pending: list[list[Any]], done: int) -> None:
    """Fetch the losses of the steps up to ``done`` left pending and fill their rows; a
    run whose loss is not finite gets its second pass, stopping at that step (the
    rows of a run that is simulated again do not matter)."""
    import jax

    from simdist.numerics.stages import loss_sum

    first_step = done - len(pending[0]) + 1
    fetched = jax.device_get(pending)  # one transfer for every run's pending steps
    for run, steps, values in zip(runs, pending, fetched, strict=True):
        for i, micro in enumerate(values):
            step = first_step + i
            total = loss_sum(micro)  # as PipelineTrainer.update adds them
            run.strategy.recorder.fill_metric(run.reserved[step - 1].loss_row, total)
            if run.strategy.rerun_with is None and not math.isfinite(total):
                run.strategy.rerun_with = Replayed(run.strategy.workload, step)
        steps.clear()
