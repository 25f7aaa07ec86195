"""gpipe and 1f1b runs whose numerics are computed together (:mod:`simdist.batched_runs`).

A pipeline step's clock does not depend on its values, so with ``strategy.defer`` the
simulation only records where each step's values go — its ``train_loss`` row and, at an
evaluation point, the test metrics' rows, reserved in the order :meth:`Strategy.end_step`
records them — and :meth:`DeferredPipeline.execute` computes the runs step by step
afterwards: each micro-batch's stage programs once for up to :data:`WIDTH` runs side by
side (:class:`simdist.numerics.stage_batch.StageBatch`, equal bit for bit to the one-run
calls), each run's optimizer update, moving statistics and evaluation as its own call.
Each run's report is then the one of that run alone (tests/test_batched_pipeline.py); a
run whose loss is not finite asks for its second pass (``rerun_with``), as the
synchronous loop does, so it stops there.

Not deferred: pipedream (an update per micro-batch, as the schedule orders them), a
subclass with its own trainer (hybrid), models with BatchNormalization (not checked bit
for bit here), runs with failures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from simdist.batched_runs import DeferredRun
from simdist.strategies.base import Replayed

if TYPE_CHECKING:
    from simdist.strategies.pipeline.strategy import PipelineStrategy

__all__ = ["WIDTH", "DeferredPipeline", "can_defer"]

#: Most runs side by side in one stage program (more are computed in several groups of
#: near-equal sizes): bounds the programs' size and compile time.
WIDTH = 8
#: Steps whose losses are fetched from the device in one transfer.
FETCH_STEPS = 32


def can_defer(strategy: PipelineStrategy) -> bool:
    """Whether ``strategy``'s numerics may be deferred (see the module docstring)."""
    from simdist.numerics.stages import PipelineTrainer

    return (
        type(strategy.trainer) is PipelineTrainer
        and strategy.state is not None
        and not strategy.workload.stateful
        and not strategy.scenario.faults.failures
    )


class DeferredPipeline(DeferredRun):
    """One gpipe / 1f1b run's reserved metric rows, filled by :meth:`execute`."""

    #: A group fills one program's copies (nothing computes while the next runs are simulated).
    group_runs = WIDTH

    def __init__(self, strategy: PipelineStrategy) -> None:
        self.strategy = strategy
        self.loss_rows: list[int] = []  # step k's train_loss row at index k - 1
        self.eval_rows: dict[int, list[tuple[str, int]]] = {}  # step -> (metric, row)
        self._names: list[str] | None = None

    @property
    def key(self) -> Hashable:
        """Runs of equal workload section (but their seeds), partition, copies and
        micro-batches run the same stage programs."""
        s = self.strategy
        spec = json.dumps(s.scenario.workload.model_dump(mode="json"), sort_keys=True)
        return (spec, s.counts, s.R, s.M, s.total_steps)

    def end_step(self, start_s: float, done: int) -> None:
        """:meth:`Strategy.end_step` of step ``done`` with its values left for later: the
        same rows, in the same order, those that wait for values reserved."""
        s = self.strategy
        recorder, now = s.recorder, s.env.now
        rate = s.examples_per_step / (now - start_s) if now > start_s else math.inf
        recorder.metric(now, done, "examples_per_s", rate)
        s.steps_done = done
        self.loss_rows.append(recorder.metric_later(now, done, "train_loss"))
        if s.eval_due(done):
            self._reserve_eval(now + s.eval_delay_s, done)
        elif done == s.total_steps and s.scenario.workload.eval_every == 0:
            self._reserve_eval(now, done)
        s.on_step(done)

    def _reserve_eval(self, stamp: float, step: int) -> None:
        if self._names is None:
            import jax

            workload = self.strategy.workload
            self._names = list(jax.eval_shape(workload.evaluate_async, workload.params))
        self.eval_rows[step] = [
            (name, self.strategy.recorder.metric_later(stamp, step, name)) for name in self._names
        ]

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
    from simdist.numerics.stage_batch import stage_batch

    first = runs[0].strategy
    trainers = [r.strategy.trainer for r in runs]
    states = [r.strategy.state for r in runs]
    batch = stage_batch(runs[0].key, trainers[0].staged)
    pieces, scale = first.R * first.M, trainers[0].global_batch
    pending: list[list[Any]] = [[] for _ in runs]  # per run, per step: micro-batch losses
    for step in range(first.total_steps):
        params = [state.params for state in states]
        batches = [t.batch(step) for t in trainers]
        losses, grads, _ = batch.gradients(params, batches, pieces, scale)
        for k, run in enumerate(runs):
            workload, state = trainers[k].workload, states[k]
            new, opt_state = workload.apply(state.params, state.opt_state, grads[k])
            states[k] = state._replace(params=new, opt_state=opt_state)
            pending[k].append(losses[k])
            rows = run.eval_rows.get(step + 1)
            if rows:
                values = workload.evaluate(workload.variables(new, state.model_state))
                _fill(run, rows, values)
        if (step + 1) % FETCH_STEPS == 0 or step + 1 == first.total_steps:
            _settle(runs, pending, step + 1)
    for run, state in zip(runs, states, strict=True):
        if run.strategy.rerun_with is None:
            run.strategy.state = state


def _fill(run: DeferredPipeline, rows: list[tuple[str, int]], values: dict[str, float]) -> None:
    """An evaluation's values into the rows reserved for them."""
    if [name for name, _ in rows] != list(values):
        raise AssertionError(f"evaluation metrics {list(values)} differ from the reserved {rows}")
    for (_, row), value in zip(rows, values.values(), strict=True):
        run.strategy.recorder.fill_metric(row, value)


def _settle(runs: Sequence[DeferredPipeline], pending: list[list[Any]], done: int) -> None:
    """Fetch the losses of the steps up to ``done`` left pending and fill their rows; a
    run whose loss is not finite gets its second pass, stopping at that step (the
    rows of a run that is simulated again do not matter)."""
    from simdist.numerics.stage_batch import losses_of

    first_step = done - len(pending[0]) + 1
    fetched = losses_of([[x for micro in steps for x in micro] for steps in pending])
    for run, steps, values in zip(runs, pending, fetched, strict=True):
        per_step = len(steps[0]) if steps else 0
        for i in range(len(steps)):
            step = first_step + i
            total = 0.0
            for value in values[i * per_step : (i + 1) * per_step]:
                total += value  # PipelineTrainer.gradients: float(loss) summed in order
            run.strategy.recorder.fill_metric(run.loss_rows[step - 1], total)
            if run.strategy.rerun_with is None and not math.isfinite(total):
                run.strategy.rerun_with = Replayed(run.strategy.workload, step)
        steps.clear()
