"""The metric rows a run whose numerics are deferred reserves, step by step.

Under :func:`simdist.engine.run_batch` a strategy that defers its numerics
(:mod:`simdist.batched_runs`) still ends every step with
:meth:`~simdist.strategies.base.Strategy.end_step`, giving it :data:`DEFERRED` for a loss:
the rows that step would write (its loss, an evaluation when one is due) are reserved in
the same order with the same stamps (:meth:`simdist.recorder.Recorder.metric_later`), so
the metrics frame is the one of a run that computed as it went once they are filled in.
No JAX here: the evaluation's metric names come from :mod:`simdist.numerics.seed_batch`
only when an evaluation is reserved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from simdist.strategies.base import Strategy

__all__ = ["DEFERRED", "ReservedStep", "reserve_step"]

#: The loss a deferring run gives :meth:`Strategy.end_step`: its value comes later.
DEFERRED = "deferred"


class ReservedStep(NamedTuple):
    """The metric rows a deferring run reserved at the end of step ``step``: its loss's,
    and each evaluation metric's by name."""

    step: int
    loss_row: int
    eval_rows: tuple[tuple[str, int], ...]


def reserve_step(strategy: Strategy, now: float, done: int) -> ReservedStep:
    """The rows :meth:`Strategy.end_step` would write for step ``done`` at ``now`` (its
    loss; the evaluation of :meth:`Strategy.evaluate` when one is due), reserved in order."""
    recorder = strategy.recorder
    loss_row = recorder.metric_later(now, done, "train_loss")
    if strategy.eval_due(done):
        stamp = now + strategy.eval_delay_s
    elif done == strategy.total_steps and strategy.scenario.workload.eval_every == 0:
        stamp = now
    else:
        return ReservedStep(done, loss_row, ())
    from simdist.numerics.seed_batch import metric_names

    names = metric_names(strategy.workload)  # type: ignore[arg-type]
    rows = tuple((name, recorder.metric_later(stamp, done, name)) for name in names)
    return ReservedStep(done, loss_row, rows)
