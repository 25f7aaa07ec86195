"""Runs of optimizer updates of one PS, applied by one jitted program where that is exact.

An asynchronous parameter server applies every gradient shard on arrival, one
optimizer step each. Replayed from the dataflow (``strategies/parameter_server/
replay.py``), the shards a PS applies between two gradient waves are known at
once: a ``lax.scan`` over them applies up to :data:`CHAIN` in one call and
returns every intermediate state (a pulled version may be any of them).

Bit for bit the same as one ``Workload.apply`` call per update only where XLA
compiles the update the same way inside a loop body: plain SGD and momentum
with a constant learning rate (checked on JAX 0.10.2, with learning-rate scales,
in tests/test_ps_dataflow.py). Adam, and any learning-rate schedule, evaluate a
power or a cosine of the step count, which XLA:CPU compiles differently in a
loop body (Adam: the last bit differs from the second step on); unrolling the
steps instead is exact but compiles for 1–3 s per PS, more than a short run
takes. So those runs apply one call per update, as the step-by-step loop did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from simdist.numerics.models import update_moving_stats

#: Updates per chain call: the replay pads shorter runs (padded steps are computed, ignored).
CHAIN = 8

#: Optimizers whose update is exact inside ``lax.scan`` (with a constant learning rate).
SCAN_EXACT = ("sgd", "momentum")


def scan_exact(optimizer_spec: Any) -> bool:
    """Whether ``optimizer_spec``'s updates may be fused in a ``lax.scan`` bit for bit."""
    schedule = getattr(optimizer_spec, "schedule", None)
    constant = schedule is None or getattr(schedule, "kind", None) == "constant"
    return getattr(optimizer_spec, "name", None) in SCAN_EXACT and constant


#: One state of a PS: (value shards, optimizer state, model-state shards).
State = tuple[dict[str, Any], Any, dict[str, Any]]


def apply_chain_fn(workload: Any, length: int = CHAIN) -> Callable[..., list[State]]:
    """``fn(values, opt_state, model_state, grads, scales, moments, count) -> states``:
    ``count`` optimizer steps of one PS in a row, the state after each (NumPy).

    ``grads``/``moments`` are dicts of ``[length, ...]`` arrays (``moments`` is ``{}``
    for a PS without model state), ``scales`` float32 ``[length]``; entries past
    ``count`` are padding. Cached on the workload.
    """
    cache = workload.__dict__.setdefault("_chain_fns", {})
    fn = cache.get(length)
    if fn is None:
        fn = _scan_chain(workload, length) if workload.scan_updates else _call_chain(workload)
        cache[length] = fn
    return fn


def _scan_chain(workload: Any, length: int) -> Callable[..., list[State]]:
    momentum = getattr(workload.model, "batch_norm_momentum", None)

    def body(carry: tuple, step: tuple) -> tuple:
        values, opt_state, state = carry
        grad, scale, moments = step
        values, opt_state = workload._apply_impl(values, opt_state, grad, scale)
        if moments:
            state = update_moving_stats(state, moments, momentum)
        out = (values, opt_state, state)
        return out, out

    @jax.jit
    def chain(values: Any, opt_state: Any, state: Any, grads: Any, scales: Any, moments: Any):
        return jax.lax.scan(body, (values, opt_state, state), (grads, scales, moments))[1]

    def run(values, opt_state, state, grads, scales, moments, count) -> list[State]:
        v, o, m = jax.device_get(chain(values, opt_state, state, grads, scales, moments))
        opt_leaves, opt_def = jax.tree_util.tree_flatten(o)
        return [
            (
                {key: a[i] for key, a in v.items()},
                jax.tree_util.tree_unflatten(opt_def, [a[i] for a in opt_leaves]),
                {key: a[i] for key, a in m.items()},
            )
            for i in range(count)
        ]

    return run


def _call_chain(workload: Any) -> Callable[..., list[State]]:
    def run(values, opt_state, state, grads, scales, moments, count) -> list[State]:
        out = []
        for i in range(count):
            grad = {key: a[i] for key, a in grads.items()}
            values, opt_state = workload.apply(values, opt_state, grad, float(scales[i]))
            if moments:
                state = workload.update_state(state, {key: a[i] for key, a in moments.items()})
            out.append((values, opt_state, state))
        return jax.device_get(out)

    return run
