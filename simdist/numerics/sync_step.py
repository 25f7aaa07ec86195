"""A synchronous step's programs over runs' lanes: a run alone is one lane, seeds are k.

A synchronous step is three programs: the replicas' gradients, the optimizer update, the
moving statistics (:meth:`simdist.strategies.sync_trainer.SyncTrainer.step`). Each is built
here once, as a program over lanes (:func:`~simdist.numerics.lanes.side_by_side`): k copies
of the one-run program side by side, each on its own run's parameters and batch. A run
alone takes its steps with one lane; the seeds of a batch (:mod:`simdist.strategies.sync_batch`)
take theirs together, one dispatch per part for k runs, each lane equal bit for bit to the
run alone (checked for mlp, cnn and resnet; sgd, momentum and adam; one to eight replicas:
tests/test_batched_sync.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from simdist.numerics.lanes import side_by_side
from simdist.numerics.optim import apply_updates

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload

__all__ = ["SyncStep"]


class SyncStep:
    """The programs of a synchronous step over lanes.

    ``gradients(params, batches)``: each lane's ``(loss, grads, moments)`` (``gradients`` of
    one run, given); ``apply(params, opt_states, grads, scales)``: each lane's new
    ``(params, opt_state)``; ``update(model_states, moments)``: each lane's moving statistics
    (None for a model without any). Every argument is a tuple with one value per lane.
    """

    def __init__(self, workload: Workload, gradients: Callable[[Any, Any], tuple]) -> None:
        optimizer = workload.optimizer
        self.gradients = side_by_side(gradients)
        self.apply = side_by_side(
            lambda params, opt_state, grads, scale: apply_updates(
                optimizer, params, opt_state, grads, scale
            )
        )
        self.update = side_by_side(workload.update_state) if workload.stateful else None
        #: The learning-rate scale of a synchronous step (1), an argument of the update's
        #: program as it is of :meth:`Workload.apply`'s.
        self.scale = jnp.asarray(np.float32(1.0))
