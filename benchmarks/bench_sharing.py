"""Benchmark: what max-min fair sharing and full-duplex NICs cost the simulator.

Fair sharing is held to this: timing-only runs on a non-blocking switch keep their
event rates within 10% of the one-transfer-at-a-time model. Each row runs the same
timing-only scenario twice in one process, interleaved, best of ``repeat``:
``fifo`` + ``half`` duplex (the model before fair sharing) and the new defaults,
``fair`` + ``full``. Two figures per side: wall time per simulated step (or per
applied gradient), which compares the same simulated work; and rows of
``events.csv`` per second. The row counts differ (under ``fifo`` a transfer that
waits for a link also records an ``idle`` row; under ``fair`` it starts at once),
so the wall-time ratio is the fair comparison.

    python benchmarks/bench_sharing.py [--quick]
    python benchmarks/bench_sharing.py --checkout /tmp/wt_base   # another checkout's code

``--checkout DIR`` measures the same rows with the simdist of another checkout (e.g. a
``git worktree`` of commit d8b723f, before fair sharing), in a subprocess, with that code's
own network model: the "before" column of docs/PERFORMANCE.md §5 came from it.
"""

from __future__ import annotations

from typing import Any

from common import best_interleaved, sync_scenario

from simdist.runtime import engine
from simdist.scenario import Scenario

ROWS: tuple[tuple[str, int], ...] = (
    ("mirrored", 64),
    ("multi_worker_mirrored", 256),
    ("multi_worker_mirrored", 1024),
    ("central_storage", 64),
    ("tpu", 256),
    ("parameter_server", 64),
    ("parameter_server", 256),
)
MODELS = {"fifo_half": ("fifo", "half"), "fair_full": ("fair", "full")}


def _with_network(scenario: Scenario, sharing: str, duplex: str) -> Scenario:
    net = scenario.cluster.network.model_copy(update={"sharing": sharing, "duplex": duplex})
    cluster = scenario.cluster.model_copy(update={"network": net})
    return scenario.model_copy(update={"cluster": cluster})


def measure(kind: str, devices: int, repeat: int, quick: bool) -> dict[str, Any]:
    """One row: ``kind`` on ``devices`` devices under both models."""
    rows = 20_000 if quick else 100_000
    work = (
        max(4 * devices, rows // 7) if kind == "parameter_server" else max(5, rows // (2 * devices))
    )
    base = sync_scenario(kind, devices, work, numerics=False)
    scenarios = {name: _with_network(base, *model) for name, model in MODELS.items()}
    for scenario in scenarios.values():
        engine.run(scenario)  # warm-up
    best = best_interleaved(
        {name: (lambda s=scenario: engine.run(s)) for name, scenario in scenarios.items()},
        repeat,
    )
    row: dict[str, Any] = {"strategy": kind, "devices": devices}
    for name, (seconds, result) in best.items():
        steps = result.summary["steps"]
        row[f"{name}_ms_per_step"] = 1e3 * seconds / steps
        row[f"{name}_events_per_s"] = len(result.events) / seconds
        row[f"{name}_sim_s"] = result.summary["simulated_time_s"]
    row["wall_ratio"] = row["fair_full_ms_per_step"] / row["fifo_half_ms_per_step"]
    row["events_rate_ratio"] = row["fair_full_events_per_s"] / row["fifo_half_events_per_s"]
    return row


def run(repeat: int = 3, quick: bool = False) -> list[dict[str, Any]]:
    """Every row of :data:`ROWS`."""
    rows = ROWS[:5] if quick else ROWS
    return [measure(kind, devices, repeat, quick) for kind, devices in rows]


_CHECKOUT_SCRIPT = """
import json, sys, time
sys.path.insert(0, sys.argv[1] + "/benchmarks")
from common import sync_scenario
from simdist.runtime import engine
rows = []
for kind, devices in json.loads(sys.argv[2]):
    work = max(4 * devices, 100_000 // 7) if kind == "parameter_server" else max(
        5, 100_000 // (2 * devices))
    scenario = sync_scenario(kind, devices, work, numerics=False)
    engine.run(scenario)
    times = []
    for _ in range(int(sys.argv[3])):
        t = time.perf_counter()
        result = engine.run(scenario)
        times.append(time.perf_counter() - t)
    rows.append([kind, devices, 1e3 * min(times) / result.summary["steps"]])
print(json.dumps(rows))
"""


def measure_checkout(checkout: str, repeat: int) -> list[list[Any]]:
    """``[kind, devices, ms per step]`` of every row with the simdist of ``checkout``."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": checkout}
    out = subprocess.run(
        [sys.executable, "-c", _CHECKOUT_SCRIPT, checkout, json.dumps(ROWS), str(repeat)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--checkout", help="measure another checkout's simdist instead")
    args = parser.parse_args()
    if args.checkout:
        for kind, devices, ms in measure_checkout(args.checkout, args.repeat):
            print(f"{kind:>22} {devices:>5}  {ms:8.4f} ms/step ({args.checkout})")
        return
    for row in run(args.repeat, args.quick):
        print(
            f"{row['strategy']:>22} {row['devices']:>5}  "
            f"fifo/half {row['fifo_half_ms_per_step']:8.3f} ms/step "
            f"{row['fifo_half_events_per_s']:9.0f} ev/s   "
            f"fair/full {row['fair_full_ms_per_step']:8.3f} ms/step "
            f"{row['fair_full_events_per_s']:9.0f} ev/s   "
            f"wall x{row['wall_ratio']:.2f}  events/s x{row['events_rate_ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
