"""A synchronous step of several runs (seeds) as one program per part, each run bit-exact.

A synchronous run's step is three jitted programs
(:class:`~simdist.strategies.sync_trainer.SyncTrainer`): the replicas' gradients, the
optimizer update, the moving statistics. :class:`SeedPrograms` holds each of them for
``width`` runs at once: one program made of ``width`` copies of the one-run program, side
by side, each on its own run's parameters and batch. Runs that share their programs (seeds
of one scenario: :class:`~simdist.numerics.executor.Workload` shares them) then take their
steps together, one dispatch per part instead of one per run.

Why copies and not a ``vmap`` over the runs: a lane of a ``vmap`` is a different program
from the one-run's (its dots and reductions get other shapes), and XLA:CPU picks kernels
and summation orders by shape, so lanes differed from one-run results in the last bit for
some models, widths and batch sizes (a cnn at 2 replicas × 2 runs, an mlp at 4 × 4, any
one-replica run's loss; an adam step even at one run). A copy has the one-run program's
shapes, hence its kernels (checked for mlp, cnn and resnet; sgd, momentum and adam; one to
eight replicas; tests/test_batched_sync.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from simdist.numerics.optim import apply_updates

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload
    from simdist.strategies.sync_trainer import SyncTrainer


class SeedPrograms:
    """The three programs of a synchronous step, each over ``width`` runs.

    ``step(states, batches)`` takes each run's ``(params, opt_state, model_state)`` and
    global batch ``(x, y)`` and returns the new states and each run's loss, as
    :meth:`SyncTrainer.dispatch` does for one run (without compression).
    """

    def __init__(self, trainer: SyncTrainer, width: int) -> None:
        self.width = width
        workload = trainer.workload
        optimizer = workload.optimizer
        lanes = range(width)

        def grads(params: list, batches: list) -> list:
            return [trainer.gradients(params[i], batches[i]) for i in lanes]

        def apply(params: list, opt_states: list, grads: list, scale: Any) -> list:
            return [
                apply_updates(optimizer, params[i], opt_states[i], grads[i], scale) for i in lanes
            ]

        def update(model_states: list, moments: list) -> list:
            return [workload.update_state(model_states[i], moments[i]) for i in lanes]

        self._grads = jax.jit(grads)
        self._apply = jax.jit(apply)
        self._update = jax.jit(update) if workload.stateful else None
        # Workload.apply's scale of 1 is an argument of its program; so it is here.
        self._scale = jnp.asarray(np.float32(1.0))

    def step(self, states: list[tuple], batches: list[tuple]) -> tuple[list[tuple], list]:
        """One step of every run: the new ``(params, opt_state, model_state)`` of each and
        its loss (device scalars, not waited for)."""
        params = [s[0] for s in states]
        out = self._grads(params, batches)
        applied = self._apply(params, [s[1] for s in states], [o[1] for o in out], self._scale)
        model_states = [s[2] for s in states]
        if self._update is not None:
            model_states = self._update(model_states, [o[2] for o in out])
        new = [(p, o, m) for (p, o), m in zip(applied, model_states, strict=True)]
        return new, [o[0] for o in out]


_PROGRAMS: dict[Hashable, SeedPrograms] = {}


def seed_programs(trainer: SyncTrainer, width: int) -> SeedPrograms:
    """The :class:`SeedPrograms` of ``trainer``'s programs, built once per process.

    Keyed by the workload's own (shared) gradient program, which Workloads differing
    only in seed have in common."""
    key = (*program_key(trainer), width)
    programs = _PROGRAMS.get(key)
    if programs is None:
        programs = _PROGRAMS[key] = SeedPrograms(trainer, width)
    return programs


def program_key(trainer: SyncTrainer) -> tuple:
    """What runs whose steps may share :class:`SeedPrograms` have in common: the
    workload's shared programs, the global batch and the replicas."""
    workload = trainer.workload
    return (workload.stacked_fn(trainer.global_batch, 1), trainer.global_batch, trainer.replicas)


_NAMES: dict[Hashable, tuple[str, ...]] = {}


def metric_names(workload: Workload) -> tuple[str, ...]:
    """The names :meth:`Workload.evaluate` returns, in its order, found without evaluating
    (a deferring run reserves their rows before it has parameters to evaluate)."""
    key = (workload.model, workload.task)
    names = _NAMES.get(key)
    if names is None:
        variables = workload.variables(workload.params, workload.model_state)
        names = _NAMES[key] = tuple(jax.eval_shape(workload.evaluate_async, variables))
    return names
