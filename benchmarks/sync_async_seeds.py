"""The main job's sync/async lesson across seeds: docs/strategies.md's "Sync or async?" figures.

ps_4w2s (4 workers, 2 PS tasks, the digits MLP) trained asynchronously at its learning
rate 0.1, and synchronously (``mode: sync``) at 4 × 0.1 (linear scaling for the 4-fold
batch), both over 2000 gradients and evaluated every 100 gradients, so that the two are
read at the same amounts of work. Per run: time and gradients to 95% test accuracy (first
evaluation at or above it), gradients per second, test accuracy after 200, 500 and 1000
gradients (what staleness costs per gradient), final accuracy, mean staleness; then the
mean (min–max) over seeds. With ``--variability 0`` the same without step-time variability:
the lock-step world in which async equalled sync.

    python benchmarks/sync_async_seeds.py [--seeds 5] [--variability 0] [--compute-time 1ms]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import simdist.api
from simdist.report.compare import time_to_target

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "ps_4w2s.yaml"
TARGET = 0.95
AT_GRADIENTS = (200, 500, 1000)
RUNS = {
    "async": ["workload.steps=2000", "workload.eval_every=100"],
    "sync, lr x4": [
        "strategy.mode=sync",
        "workload.optimizer.learning_rate=0.4",
        "workload.steps=500",
        "workload.eval_every=25",
    ],
}


def rows(seeds: int, extra: list[str]) -> pd.DataFrame:
    """One row per (run, seed)."""
    out = []
    for name, overrides in RUNS.items():
        gradients_per_update = 4 if name.startswith("sync") else 1
        for seed, result in enumerate(
            simdist.api.run_seeds(SCENARIO, seeds, [*overrides, *extra], parallel=False)
        ):
            s = result.summary
            reached = time_to_target(result.metrics, TARGET)
            time_s, updates = reached if reached is not None else (float("nan"), float("nan"))
            evals = result.metrics[result.metrics["metric"] == "test_accuracy"]
            accuracy = dict(zip(evals["step"] * gradients_per_update, evals["value"], strict=True))
            out.append(
                {
                    "run": name,
                    "seed": seed,
                    "time_to_95_ms": time_s * 1e3,
                    "gradients_to_95": updates * gradients_per_update,
                    "gradients_per_s": s["examples"] / 32 / s["simulated_time_s"],
                    **{f"accuracy_at_{g}": accuracy.get(g) for g in AT_GRADIENTS},
                    "final_accuracy": s["final_test_accuracy"],
                    "staleness_mean": (s.get("staleness") or {}).get("mean", 0.0),
                }
            )
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--variability", help="e.g. 0: cluster.device.variability")
    parser.add_argument("--compute-time", help="e.g. 1ms: cluster.device.compute_time")
    args = parser.parse_args()
    extra = [] if args.variability is None else [f"cluster.device.variability={args.variability}"]
    if args.compute_time:
        extra.append(f"cluster.device.compute_time={args.compute_time}")
    table = rows(args.seeds, extra)
    pd.set_option("display.width", 160)
    print(table.round(4).to_string(index=False))
    summary = table.groupby("run").agg(["mean", "min", "max"]).drop(columns="seed")
    print(summary.round(4).T.to_string())


if __name__ == "__main__":
    main()
