"""The metric rows a run whose numerics are deferred reserves, step by step.

Under :func:`simdist.runtime.engine.run_batch` a strategy that defers its numerics
(:mod:`simdist.batched_runs`) still ends every step with
:meth:`~simdist.strategies.base.Strategy.end_step`, giving it :data:`DEFERRED` for a loss:
the rows that step would write (its loss, an evaluation when one is due) are reserved in
the same order with the same stamps (:meth:`simdist.runtime.recorder.Recorder.metric_later`), so
the metrics frame is the one of a run that computed as it went once they are filled in.
No JAX here: the evaluation's metric names come from the workload
(:meth:`~simdist.numerics.executor.Workload.metric_names`) only when an evaluation is reserved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload
    from simdist.runtime.recorder import Recorder

__all__ = ["DEFERRED", "ReservedStep", "reserve_step"]

#: The loss a deferring run gives :meth:`Strategy.end_step`: its value comes later.
DEFERRED = "deferred"


class ReservedStep(NamedTuple):
    """The metric rows a deferring run reserved at the end of step ``step``: its loss's,
    and each evaluation metric's by name."""

    step: int
    loss_row: int
    eval_rows: tuple[tuple[str, int], ...]


def reserve_step(
    recorder: Recorder, workload: Workload, now: float, done: int, eval_stamp: float | None
) -> ReservedStep:
    """The rows :meth:`Strategy.end_step` would write for step ``done`` at ``now``: its
    loss, then, when the step ends with an evaluation stamped ``eval_stamp``, each metric of
    ``workload``'s evaluation, reserved in order."""
    loss_row = recorder.metric_later(now, done, "train_loss")
    if eval_stamp is None:
        return ReservedStep(done, loss_row, ())
    rows = tuple(
        (name, recorder.metric_later(eval_stamp, done, name)) for name in workload.metric_names()
    )
    return ReservedStep(done, loss_row, rows)
