"""Optax optimizers and learning-rate schedules built from the scenario.

Besides the plain builders, :func:`apply_updates` takes an ``lr_scale`` so the
parameter-server strategy can apply a staleness-aware learning rate
(lr / staleness, Zhang et al. 2016, "Staleness-aware Async-SGD",
arXiv:1511.05950) per applied gradient without rebuilding the optimizer.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from simdist.catalog import OPTIMIZERS, SCHEDULES
from simdist.compile_cache import configure as _configure_compile_cache
from simdist.errors import SimdistError

# JAX's persistent compilation cache, before anything compiles (simdist.compile_cache).
_configure_compile_cache(jax)


def make_schedule(spec: Any, learning_rate: float, total_steps: int) -> optax.ScalarOrSchedule:
    """The learning rate (a float, or an optax schedule of the step count) for ``spec``.

    ``spec`` is a ScheduleSpec or ``None`` (constant rate). ``decay_steps`` of
    ``None`` means the whole run, ``total_steps``.
    """
    if spec is None:
        return learning_rate
    kind = spec.kind
    decay_steps = getattr(spec, "decay_steps", None) or max(int(total_steps), 1)
    alpha = float(getattr(spec, "alpha", 0.0) or 0.0)
    if kind == "constant":
        return optax.constant_schedule(learning_rate)
    if kind == "cosine":
        return optax.cosine_decay_schedule(learning_rate, decay_steps, alpha=alpha)
    if kind == "exponential":
        transition = getattr(spec, "transition_steps", None) or decay_steps
        rate = getattr(spec, "decay_rate", None)
        if rate is None:
            raise SimdistError("schedule exponential needs decay_rate, e.g. decay_rate: 0.96")
        return optax.exponential_decay(learning_rate, int(transition), float(rate))
    if kind == "warmup_cosine":
        warmup = int(getattr(spec, "warmup_steps", 0) or 0)
        # optax counts decay_steps including the warm-up phase.
        return optax.warmup_cosine_decay_schedule(
            0.0,
            learning_rate,
            warmup,
            max(decay_steps, warmup + 1),
            end_value=learning_rate * alpha,
        )
    if kind == "piecewise_constant":
        boundaries = list(getattr(spec, "boundaries", None) or [])
        scales = list(getattr(spec, "scales", None) or [])
        if len(boundaries) != len(scales):
            raise SimdistError(
                f"schedule piecewise_constant: {len(boundaries)} boundaries but "
                f"{len(scales)} scales; give one scale per boundary"
            )
        return optax.piecewise_constant_schedule(
            learning_rate, {int(b): float(s) for b, s in zip(boundaries, scales, strict=True)}
        )
    raise SimdistError(f"unknown schedule {kind!r}; expected one of {', '.join(SCHEDULES)}")


def make_optimizer(spec: Any, total_steps: int) -> optax.GradientTransformation:
    """The optax transformation named by ``spec.name``, with its schedule."""
    lr = make_schedule(getattr(spec, "schedule", None), float(spec.learning_rate), total_steps)
    name = spec.name
    if name == "sgd":
        return optax.sgd(lr)
    if name == "momentum":
        return optax.sgd(lr, momentum=float(getattr(spec, "momentum", 0.9)))
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
