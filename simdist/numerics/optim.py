"""Optax optimizers and learning-rate schedules built from the scenario.

Besides the plain builders, :func:`apply_updates` takes an ``lr_scale`` so the
parameter-server strategy can apply a staleness-aware learning rate
(lr / staleness, Zhang et al. 2016, "Staleness-aware Async-SGD",
arXiv:1511.05950) per applied gradient without rebuilding the optimizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import optax

from simdist.catalog import OPTIMIZERS, SCHEDULES
from simdist.compile_cache import configure as _configure_compile_cache
from simdist.errors import SimdistError

if TYPE_CHECKING:
    from simdist.scenario.workload import OptimizerSpec, ScheduleSpec

# JAX's persistent compilation cache, before anything compiles (simdist.compile_cache).
_configure_compile_cache(jax)


def make_schedule(
    spec: ScheduleSpec | None, learning_rate: float, total_steps: int
) -> optax.ScalarOrSchedule:
    """The learning rate (a float, or an optax schedule of the step count) for ``spec``.

    ``spec`` is a ScheduleSpec or ``None`` (constant rate). ``decay_steps`` of
    ``None`` means the whole run, ``total_steps``.
    """
    if spec is None:
        return learning_rate
    kind = spec.kind
    decay_steps = spec.decay_steps or max(int(total_steps), 1)
    alpha = float(spec.alpha)
    if kind == "constant":
        return optax.constant_schedule(learning_rate)
    if kind == "cosine":
        return optax.cosine_decay_schedule(learning_rate, decay_steps, alpha=alpha)
    if kind == "exponential":
        return optax.exponential_decay(
            learning_rate, int(spec.transition_steps), float(spec.decay_rate)
        )
    if kind == "warmup_cosine":
        warmup = int(spec.warmup_steps)
        # optax counts decay_steps including the warm-up phase.
        return optax.warmup_cosine_decay_schedule(
            0.0,
            learning_rate,
            warmup,
            max(decay_steps, warmup + 1),
            end_value=learning_rate * alpha,
        )
    if kind == "piecewise_constant":
        # ScheduleSpec has checked that there is one scale per boundary.
        pieces = zip(spec.boundaries, spec.scales, strict=True)
        return optax.piecewise_constant_schedule(
            learning_rate, {int(b): float(s) for b, s in pieces}
        )
    raise SimdistError(f"unknown schedule {kind!r}; expected one of {', '.join(SCHEDULES)}")


def make_optimizer(spec: OptimizerSpec, total_steps: int) -> optax.GradientTransformation:
    """The optax transformation named by ``spec.name``, with its schedule."""
    lr = make_schedule(spec.schedule, float(spec.learning_rate), total_steps)
    name = spec.name
    if name == "sgd":
        return optax.sgd(lr)
    if name == "momentum":
        return optax.sgd(lr, momentum=float(spec.momentum))
    if name == "adam":
        return optax.adam(lr)
    raise SimdistError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}")


def apply_updates(
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    grads: Any,
    lr_scale: float | jax.Array = 1.0,
) -> tuple[Any, Any]:
    """One optimizer step; the final updates are multiplied by ``lr_scale``.

    Scaling the *updates* (``optax.scale``) equals scaling this step's learning
    rate for sgd, momentum and adam, whose updates are linear in the rate; the
    optimizer state (momentum trace, Adam moments, step count) is updated from
    the unscaled gradient, so a scaled step does not change later ones. With
    ``lr_scale == 1`` the result is bit-identical to an unscaled step.
    """
    updates, opt_state = optimizer.update(grads, opt_state, params)
    updates, _ = optax.scale(lr_scale).update(updates, optax.EmptyState())
    return optax.apply_updates(params, updates), opt_state
