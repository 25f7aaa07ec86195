"""Fused optimizer updates: one jitted program applies up to K updates of one PS in a row.

An asynchronous parameter server applies every gradient shard on arrival, one
optimizer step each. Replayed from the dataflow (``strategies/parameter_server/
replay.py``), the shards a PS applies between two gradient waves are known at
once, so one program applies K of them in order and returns every intermediate
state (a pulled version may be any of them).

Bit for bit the same as K calls of ``Workload.apply`` (and ``update_state``):
the K steps are *unrolled* — the per-step program is traced K times in one
function — and a step past the chain's length is masked with ``where``, which
selects without arithmetic. A ``lax.scan`` over the steps is not: XLA:CPU
compiles Adam's bias correction in a loop body differently (checked on JAX
0.10.2: sgd and momentum equal, Adam differs in the last bit from step 2 on),
while the unrolled chain equals the calls for sgd, momentum and Adam, with
learning-rate scales and masks (tests/test_ps_dataflow.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from simdist.numerics.models import update_moving_stats

#: Updates per chain call: the replay pads shorter runs with masked steps.
CHAIN = 8


def apply_chain_fn(workload: Any, length: int = CHAIN) -> Callable:
    """Jitted ``(values, opt_state, state, grads, scales, moments, valid) -> (values [K],
    opt_states [K], states [K])``: ``length`` optimizer steps of one PS in a row.

    ``grads``/``moments`` have a leading axis of ``length`` (``moments`` is ``{}``
    for a PS without model state), ``scales`` float32 [K], ``valid`` bool [K]: a
    step with ``valid`` False leaves everything as it was. Step i's outputs are
    the state after step i. Cached on the workload, one trace per PS structure.
    """
    cache = workload.__dict__.setdefault("_chain_fns", {})
    fn = cache.get(length)
    if fn is not None:
        return fn
    momentum = getattr(workload.model, "batch_norm_momentum", None)

    def keep(valid: jax.Array, new: Any, old: Any) -> Any:
        return jax.tree.map(lambda a, b: jnp.where(valid, a, b), new, old)

    def chain(
        values: Any,
        opt_state: Any,
        state: Any,
        grads: Any,
        scales: jax.Array,
        moments: Any,
        valid: jax.Array,
    ) -> tuple:
        out_values, out_opt, out_state = [], [], []
        for i in range(length):
            grad = jax.tree.map(lambda a, i=i: a[i], grads)
            new_values, new_opt = workload._apply_impl(values, opt_state, grad, scales[i])
            values = keep(valid[i], new_values, values)
            opt_state = keep(valid[i], new_opt, opt_state)
            if moments:
                step = jax.tree.map(lambda a, i=i: a[i], moments)
                state = keep(valid[i], update_moving_stats(state, step, momentum), state)
            out_values.append(values)
            out_opt.append(opt_state)
            out_state.append(state)

        def stack(trees: list) -> Any:
            return jax.tree.map(lambda *a: jnp.stack(a), *trees)

        return stack(out_values), stack(out_opt), stack(out_state)

    fn = jax.jit(chain)
    cache[length] = fn
    return fn
