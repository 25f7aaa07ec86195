"""Benchmark 0: this machine against the one the issues' absolute figures were written on.

The targets in seconds and in events per second (a report in 3 s, 300,000
timing-only events/s) are absolute, so how fast the machine is counts. The mission text
gives three facts "measured on this kind of machine (2 cores)" — SimPy alone about
650,000 events/s, one jitted ``value_and_grad`` of a 64-128-10 MLP on 32 examples about
95 µs, ``vmap`` over 8 parameter versions about 40 µs per gradient — and this benchmark
measures the same three here, so a page can say how its machine compares.

Definitions (ours: the mission text does not give its code): SimPy alone is ten
processes each waiting on ``env.timeout(1)`` in a loop, 200,000 timeouts in all, events
processed per second of wall time, best of 3. The MLP is flax ``Dense(128)``, ReLU,
``Dense(10)`` on 64 inputs, softmax cross-entropy with integer labels (optax), jitted,
each call waited for (``block_until_ready``), the median of 2,000 calls after a warm-up.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from common import parse_args

#: The mission text's facts for the machine the issues were written on.
ISSUE_MACHINE = {"simpy_events_per_s": 650_000.0, "mlp_grad_us": 95.0, "vmap8_grad_us": 40.0}


def simpy_events_per_s(processes: int = 10, events: int = 200_000, repeat: int = 3) -> float:
    """SimPy's raw rate: ``processes`` loops of ``env.timeout(1)``, ``events`` in all."""
    import simpy

    def loop(env: simpy.Environment) -> Any:
        while True:
            yield env.timeout(1)

    best = float("inf")
    for _ in range(repeat):
        env = simpy.Environment()
        for _ in range(processes):
            env.process(loop(env))
        start = time.perf_counter()
        env.run(until=events // processes)
        best = min(best, time.perf_counter() - start)
    return events / best


def mlp_grad_us(calls: int = 2000) -> tuple[float, float]:
    """Median µs of one jitted value_and_grad of the 64-128-10 MLP on 32 examples, and per
    gradient of a jitted ``vmap`` of it over 8 parameter versions (8 batches)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.Dense(10)(nn.relu(nn.Dense(128)(x)))

    model = MLP()
    x = jax.random.normal(jax.random.PRNGKey(1), (32, 64))
    y = jnp.arange(32) % 10
    params = model.init(jax.random.PRNGKey(0), x)

    def loss(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()

    one = jax.jit(jax.value_and_grad(loss))
    eight = jax.jit(jax.vmap(jax.value_and_grad(loss)))
    versions = jax.tree.map(lambda a: jnp.stack([a + 1e-3 * k for k in range(8)]), params)
    xs, ys = jnp.stack([x] * 8), jnp.stack([y] * 8)

    def median_us(call: Any, n: int) -> float:
        jax.block_until_ready(call())
        times = []
        for _ in range(n):
            start = time.perf_counter()
            jax.block_until_ready(call())
            times.append(time.perf_counter() - start)
        return 1e6 * statistics.median(times)

    return median_us(lambda: one(params, x, y), calls), median_us(
        lambda: eight(versions, xs, ys), calls // 4
    ) / 8


def run() -> dict[str, float]:
    """The three figures of :data:`ISSUE_MACHINE`, measured here."""
    grad_us, vmap8_us = mlp_grad_us()
    return {
        "simpy_events_per_s": simpy_events_per_s(),
        "mlp_grad_us": grad_us,
        "vmap8_grad_us": vmap8_us,
    }


def main() -> None:
    parse_args(__doc__)
    facts = run()
    for name, value in facts.items():
        text = ISSUE_MACHINE[name]
        print(f"{name:>20}: {value:>12,.1f} here, {text:>10,.1f} in the mission text")


if __name__ == "__main__":
    main()
