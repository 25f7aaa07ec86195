"""Benchmark 1: a full run's wall time over the bare JAX arithmetic it must do anyway.

For a strategy and a size, the *full run* is ``simdist.runtime.engine.run`` of the
scenario (simulation, numerics, optimizer updates, tables, summary); the
*bare loop* computes the same number of gradients of the same model on
batches of the same size in a plain jitted ``vmap`` loop, inputs already on
the device, nothing else:

* parameter_server: buckets of 8 gradients, each on its own parameter
  version (as the run's dataflow replay evaluates them), ceil(G / 8) calls;
* mirrored: one call per step, ``vmap`` over the N replicas sharing the
  parameters.

Both sides are compiled before timing (the run's Workload is reused from a
first, untimed run), alternated and repeated; the best of each is kept.  The
timing-only run of the same scenario (``numerics: false``) shows how much of
the full run is the simulation itself.
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from common import best_interleaved, parse_args, ps_scenario, sync_scenario

from simdist.runtime import engine
from simdist.strategies.parameter_server.dataflow import Journal
from simdist.strategies.parameter_server.plan import Plan
from simdist.strategies.parameter_server.replay import Replay

BUCKET = 8


def _loss_grad(model: Any, batch_divisor: int) -> Any:
    def lag(params: Any, x: jax.Array, y: jax.Array) -> Any:
        def loss(p: Any) -> jax.Array:
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).sum() / batch_divisor

        return jax.value_and_grad(loss)(params)

    return lag


def _batches(workload: Any, count: int, size: int) -> tuple[jax.Array, jax.Array]:
    xs, ys = zip(*(workload.batches.batch(i, size) for i in range(count)), strict=True)
    return jnp.asarray(np.stack(xs)), jnp.asarray(np.stack(ys))


def bare_ps_loop(workload: Any, gradients: int, batch: int) -> Any:
    """ceil(G / 8) calls of a jitted vmap over 8 parameter versions and 8 batches."""
    fn = jax.jit(jax.vmap(_loss_grad(workload.model, batch)))
    versions = jax.tree.map(
        lambda a: jnp.stack([a + 1e-3 * k for k in range(BUCKET)]), workload.params
    )
    inputs = [_batches(workload, BUCKET, batch) for _ in range(4)]
    jax.block_until_ready(fn(versions, *inputs[0]))
    calls = math.ceil(gradients / BUCKET)

    def loop() -> None:
        for i in range(calls):
            jax.block_until_ready(fn(versions, *inputs[i % len(inputs)]))

    return loop


def bare_mirrored_loop(workload: Any, replicas: int, steps: int, batch: int) -> Any:
    """One call per step: a jitted vmap over N replicas sharing one parameter version."""
    fn = jax.jit(jax.vmap(_loss_grad(workload.model, batch * replicas), (None, 0, 0)))
    inputs = [_batches(workload, replicas, batch) for _ in range(4)]
    jax.block_until_ready(fn(workload.params, *inputs[0]))

    def loop() -> None:
        for i in range(steps):
            jax.block_until_ready(fn(workload.params, *inputs[i % len(inputs)]))

    return loop


class _BucketCounter:
    """Counts the gradient calls (8-wide buckets) of the dataflow replays during a run."""

    def __init__(self) -> None:
        self.instances: list[Any] = []
        self._original = Replay.__init__

    def __enter__(self) -> _BucketCounter:
        instances, original = self.instances, self._original

        def init(obj: Any, *args: Any, **kwargs: Any) -> None:
            original(obj, *args, **kwargs)
            instances.append(obj)

        Replay.__init__ = init  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        Replay.__init__ = self._original  # type: ignore[method-assign]

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.instances)


def measure(
    kind: str,
    size: int,
    work: int,
    repeat: int,
    hidden: tuple[int, ...] = (128,),
    batch: int = 32,
) -> dict[str, Any]:
    """One row: ``kind`` at ``size`` workers/devices, ``work`` gradients (PS) or steps."""
    if kind == "parameter_server":
        scenario = ps_scenario(size, work, hidden=hidden, batch=batch)
        timing = ps_scenario(size, work, numerics=False, hidden=hidden, batch=batch)
        gradients = work
    else:
        scenario = sync_scenario(kind, size, work)
        timing = sync_scenario(kind, size, work, numerics=False)
        gradients = work * size
    engine.run(scenario)  # compiles everything; the Workload is then reused
    engine.run(timing)
    workload = engine.cached_workload(scenario)
    batch = scenario.workload.batch_size
    bare = (
        bare_ps_loop(workload, work, batch)
        if kind == "parameter_server"
        else bare_mirrored_loop(workload, size, work, batch)
    )
    with _BucketCounter() as buckets:
        best = best_interleaved(
            {
                "full": lambda: engine.run(scenario),
                "bare": bare,
                "timing": lambda: engine.run(timing),
            },
            repeat,
        )
    full_s, bare_s, timing_s = best["full"][0], best["bare"][0], best["timing"][0]
    model = "mlp " + "-".join(str(h) for h in hidden)
    row: dict[str, Any] = {
        "strategy": kind,
        "size": size,
        "model": f"{model}, batch {batch}",
        "gradients": gradients,
        "full_s": full_s,
        "bare_s": bare_s,
        "timing_only_s": timing_s,
        "ratio": full_s / bare_s,
        "simulation_share": timing_s / full_s,
        "overhead_us_per_gradient": (full_s - bare_s) / gradients * 1e6,
        "gradients_per_bucket": None,
    }
    if kind == "parameter_server":
        row["gradients_per_bucket"] = gradients * repeat / max(1, buckets.calls)
    return row


#: What the breakdown times (nested: the replay includes its plan).
PARTS: list[tuple[str, tuple[Any, str]]] = [
    ("plan", (Plan, "add")),
    ("replay", (Replay, "advance")),  # during the simulation, every few applied shards
    ("replay", (Replay, "run")),  # after it: the rest, then the wait for XLA
    ("journal", (Journal, "flush")),
]


def breakdown(workers: int = 8, gradients: int = 1024, repeat: int = 3) -> dict[str, float]:
    """Microseconds per applied gradient in each numeric piece of a parameter_server run.

    Timers wrap the methods (adding well under a microsecond per call); the
    simulation's own share is the timing-only run of the same scenario, and
    ``bare`` is the bare loop's time per gradient.
    """
    scenario = ps_scenario(workers, gradients)
    timing = ps_scenario(workers, gradients, numerics=False)
    engine.run(scenario)
    engine.run(timing)
    spent: dict[str, float] = {}
    targets = [(cls, name, label) for (label, (cls, name)) in PARTS]
    originals = [(cls, name, getattr(cls, name)) for cls, name, _ in targets]

    def timed(fn: Any, label: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - start

        return wrapper

    best_total, best_spent = math.inf, {}
    try:
        for (cls, name, label), (_, _, fn) in zip(targets, originals, strict=True):
            setattr(cls, name, timed(fn, label))
        for _ in range(repeat):
            spent.clear()
            start = time.perf_counter()
            engine.run(scenario)
            total = time.perf_counter() - start
            if total < best_total:
                best_total, best_spent = total, dict(spent)
    finally:
        for cls, name, fn in originals:
            setattr(cls, name, fn)
    timing_s = best_interleaved({"timing": lambda: engine.run(timing)}, repeat)["timing"][0]
    loop = bare_ps_loop(engine.cached_workload(scenario), gradients, 32)
    bare_s = best_interleaved({"bare": loop}, repeat)["bare"][0]
    us = {label: seconds / gradients * 1e6 for label, seconds in best_spent.items()}
    plan, replay, journal = (us.get(label, 0.0) for label in ("plan", "replay", "journal"))
    simulation = timing_s / gradients * 1e6
    total = best_total / gradients * 1e6
    per = {
        "simulation (timing-only run)": simulation,
        "replay (Replay.advance and run: plan, dispatch, waiting for XLA)": replay,
        "  of which the plan (Plan, host only)": plan,
        "writing the journal (Journal.flush)": journal,
        "rest (SimPy pass beyond timing-only, tables, glue)": total - simulation - replay - journal,
        "full run": total,
        "bare loop (same gradients)": bare_s / gradients * 1e6,
    }
    return per


CASES: list[tuple[str, int, int, tuple[int, ...], int]] = [
    *[("parameter_server", n, 1024, (128,), 32) for n in (4, 8, 64)],
    ("parameter_server", 8, 128, (512, 512), 128),
    *[("mirrored", n, 100, (128,), 32) for n in (4, 8, 64)],
]


def run(repeat: int = 3, quick: bool = False) -> list[dict[str, Any]]:
    """Every case of benchmark 1."""
    cases = [(k, n, max(32, w // 4), h, b) for k, n, w, h, b in CASES] if quick else CASES
    return [measure(k, n, w, repeat, hidden=h, batch=b) for k, n, w, h, b in cases]


def main() -> None:
    args = parse_args(__doc__)
    for row in run(args.repeat, args.quick):
        print(
            f"{row['strategy']:>16} {row['size']:>4} ({row['model']}): full {row['full_s']:.3f}s "
            f"bare {row['bare_s']:.3f}s ratio {row['ratio']:.2f} "
            f"(simulation {row['simulation_share']:.0%} of the full run)"
        )
    for label, us in breakdown(repeat=args.repeat).items():
        print(f"{label:>45}: {us:8.1f} µs per gradient")


if __name__ == "__main__":
    main()
