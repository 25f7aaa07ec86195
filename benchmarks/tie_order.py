"""How much the order of simultaneous events matters: the same runs with ties broken at random.

SimPy processes the events of one simulated instant (and one priority) in the order
they were scheduled, and simdist keeps that order wherever it saves events
(``links.Countdown``, ``FairShare.later``): the reports' bytes depend on it. Is that
order only a matter of bytes, or part of the model? This script runs a few scenarios
with SimPy's rule as it is, then again with ties broken by a seeded random key
(time and priority still first), and prints what changed: the simulated time, the
steps and, for parameter_server, the staleness of the applied shards (and the final
loss and accuracy when the run computes them). An engine that ordered simultaneous
events by some other rule would change these figures, not only row order.

    python benchmarks/tie_order.py [--seeds N]
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import simpy.core
from common import ps_scenario, sync_scenario

from simdist import engine
from simdist.network.fair import FairShare
from simdist.scenario import Scenario, load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

CASES: dict[str, Callable[[], Scenario]] = {
    "ps_4w2s (numerics)": lambda: load_scenario(SCENARIOS / "ps_4w2s.yaml"),
    "parameter_server, 64 workers, timing-only": lambda: ps_scenario(64, 4000, numerics=False),
    "central_storage, 64 devices, timing-only": lambda: sync_scenario(
        "central_storage", 64, 50, numerics=False
    ),
}


@contextmanager
def random_ties(seed: int) -> Iterator[None]:
    """SimPy with events of equal time and priority taken in a seeded random order.

    Arrivals batched in one event (``FairShare.later``) get a timeout each again: a
    batch keeps the order of its members, which is what is being varied here.
    """
    rng = random.Random(seed)

    def schedule(
        env: simpy.core.Environment, event: Any, priority: int = simpy.core.NORMAL, delay: float = 0
    ) -> None:
        key = (rng.random(), next(env._eid))  # type: ignore[attr-defined]
        heapq.heappush(env._queue, (env._now + delay, priority, key, event))  # type: ignore[attr-defined]

    original = simpy.core.Environment.schedule, FairShare.later
    simpy.core.Environment.schedule = schedule  # type: ignore[method-assign]
    FairShare.later = lambda self, delay, call: self.env.timeout(delay).callbacks.append(call)  # type: ignore[method-assign]
    try:
        yield
    finally:
        simpy.core.Environment.schedule, FairShare.later = original  # type: ignore[method-assign]


def figures(result: engine.Result) -> dict[str, Any]:
    """What a user reads off a run: simulated time, steps, staleness, final loss/accuracy."""
    out: dict[str, Any] = {
        "simulated_s": result.summary["simulated_time_s"],
        "steps": result.summary["steps"],
    }
    updates = result.tables.get("updates")
    if updates is not None and len(updates):
        out["staleness_mean"] = float(updates["staleness"].mean())
        out["staleness_max"] = int(updates["staleness"].max())
    for name in ("train_loss", "test_accuracy"):
        values = result.metrics[result.metrics["metric"] == name]["value"]
        if len(values):
            out[name] = float(values.iloc[-1])
    return out


def run(seeds: int = 3) -> list[dict[str, Any]]:
    """Each case as it is, then with ``seeds`` random tie orders."""
    rows = []
    for name, make in CASES.items():
        base = engine.run(make())
        rows.append({"case": name, "ties": "as scheduled", **figures(base)})
        for seed in range(seeds):
            with random_ties(seed):
                result = engine.run(make())
            same = result.events.reset_index(drop=True).equals(base.events.reset_index(drop=True))
            rows.append(
                {"case": name, "ties": f"random {seed}", **figures(result), "same_events": same}
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    for row in run(parser.parse_args().seeds):
        print(row)


if __name__ == "__main__":
    main()
