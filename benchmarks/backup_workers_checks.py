"""The checks behind notebooks/stragglers_and_backup_workers.ipynb's text, outside the notebook.

The notebook's setting: ps_4w2s on 16 workers, 1 ms of compute per step, each worker
hiccuping at a step with probability 0.1 by a Pareto(1.5) factor, 2000 gradients
(asynchronous) or 125 steps of 16 (synchronous), 50 evaluations. Two checks its text cites:

* ``seeds``: seeds 3-10 at the notebook's rates (momentum: sync 0.32, async 0.005; plain
  SGD: sync 1.6, async 0.1), with 0, 1, 2 and 4 backup workers and async;
* ``rates``: seeds 0-2 at half the plain-SGD rates (sync 0.8, async 0.05), at double
  (sync 3.2, async 0.2) and async 0.15, and momentum async at 0.0025 and 0.01.

Prints each run's time to 95% test accuracy per seed (ms, first evaluation at or above it).

    python benchmarks/backup_workers_checks.py seeds|rates
"""

from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path
from typing import Any

import yaml

import simdist.api

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 16
ASYNC_STEPS = 2000
SYNC_STEPS = ASYNC_STEPS // WORKERS
EVALS = 50
HICCUPS = [{"probability": 0.1, "slowdown": {"kind": "pareto", "alpha": 1.5}}]


def scenario(optimizer: str, rate: float, backups: int | None = None) -> dict[str, Any]:
    """The notebook's scenario: synchronous with ``backups`` backup workers, or asynchronous
    when ``backups`` is None."""
    s = yaml.safe_load((ROOT / "scenarios" / "ps_4w2s.yaml").read_text())
    s["cluster"]["worker"] = [f"w{i}:2222" for i in range(WORKERS)]
    s["cluster"]["device"]["compute_time"] = "1ms"
    s["faults"] = {"stragglers": copy.deepcopy(HICCUPS)}
    opt: dict[str, Any] = {"name": optimizer, "learning_rate": rate}
    if optimizer == "momentum":
        opt["momentum"] = 0.9
    steps = ASYNC_STEPS if backups is None else SYNC_STEPS
    s["workload"].update(steps=steps, eval_every=max(1, steps // EVALS), optimizer=opt)
    if backups is not None:
        s["strategy"].update(mode="sync", backup_workers=backups)
    s["name"] = f"{'async' if backups is None else f'sync_b{backups}'}_{optimizer}_{rate:g}"
    return s


def time_to_ms(result: Any, target: float = 0.95) -> float:
    """Simulated ms at the first evaluation at or above ``target`` (NaN: never)."""
    m = result.metrics
    hit = m[(m["metric"] == "test_accuracy") & (m["value"] >= target)]
    return float(hit["time_s"].iloc[0]) * 1e3 if len(hit) else math.nan


def report(label: str, s: dict[str, Any], seeds: list[int]) -> None:
    """One line: the run's label and its time to 95% per seed."""
    runs = simdist.api.run_seeds(s, seeds, parallel=False)
    print(label, [round(time_to_ms(r), 1) for r in runs], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=["seeds", "rates"])
    check = parser.parse_args().check
    if check == "seeds":
        seeds = list(range(3, 11))
        for optimizer, sync_rate, async_rate in (("momentum", 0.32, 0.005), ("sgd", 1.6, 0.1)):
            for b in (0, 1, 2, 4):
                report(f"{optimizer} sync b{b}", scenario(optimizer, sync_rate, b), seeds)
            report(f"{optimizer} async", scenario(optimizer, async_rate), seeds)
        return
    seeds = [0, 1, 2]
    for b in (0, 1, 2, 4):
        report(f"sgd sync b{b} 0.8", scenario("sgd", 0.8, b), seeds)
    report("sgd async 0.05", scenario("sgd", 0.05), seeds)
    for b in (0, 2, 4):
        report(f"sgd sync b{b} 3.2", scenario("sgd", 3.2, b), seeds)
    for rate in (0.15, 0.2):
        report(f"sgd async {rate}", scenario("sgd", rate), seeds)
    for rate in (0.0025, 0.01):
        report(f"momentum async {rate}", scenario("momentum", rate), seeds)


if __name__ == "__main__":
    main()
