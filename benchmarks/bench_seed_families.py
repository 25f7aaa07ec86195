"""Do the seed-batched numerics earn their keep? (issue 39) Per family, in one process:
a batch of seeds computed together (:func:`simdist.studies.runs.run_many` in this process, as
``simdist compare --seeds`` runs them on two cores: :func:`simdist.runtime.engine.run_batch`)
against the same seeds one by one (:func:`simdist.studies.runs.run`, each seed alone).

    python benchmarks/bench_seed_families.py                   # prints JSON
    python benchmarks/bench_seed_families.py --seeds 8 --repeat 3 --only ps_async mirrored

For each family a shipped scenario, ``seeds`` seeds: one untimed pass of each side first
(both sides then find every program compiled and every Workload cached), then ``repeat``
rounds, each timing both sides in turn, the side that goes first alternating, so that
background load on a shared machine touches both alike; the best time of each side. The
ratio is one-by-one / batched: above 1 batching is faster. A family whose batched path was
removed (below :data:`KEEP_RATIO`) runs its seeds one by one either way and shows about 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Batching must be at least this much faster than one by one to keep its code (issue 39).
KEEP_RATIO = 1.2
#: Family → (scenario, overrides): a small shipped scenario of each family with a batched
#: path (docs/seeds_and_sweeps.md, "Seeds for the price of one").
FAMILIES: dict[str, tuple[str, list[str]]] = {
    "ps_async": ("scenarios/ps_4w2s.yaml", []),
    "ps_ssp": ("scenarios/ps_4w2s.yaml", ["strategy.staleness_bound=1"]),
    "ps_sync": ("scenarios/ps_4w2s.yaml", ["strategy.mode=sync", "workload.steps=500"]),
    "one_device": ("scenarios/one_device_digits.yaml", []),
    "mirrored": ("scenarios/mirrored_4dev.yaml", []),
    "central_storage": ("scenarios/central_storage_4dev.yaml", []),
    "tpu": ("scenarios/tpu_2x2.yaml", []),
    "multi_worker_mirrored": ("scenarios/mwm_2x4_ring.yaml", []),
    "pipeline_gpipe": ("scenarios/pipeline_gpipe.yaml", []),
    "pipeline_1f1b": ("scenarios/pipeline_1f1b.yaml", []),
}


def _scenarios(name: str, seeds: int) -> list[Any]:
    from simdist.runtime.preflight import preflight
    from simdist.scenario.load import resolve_scenario

    path, overrides = FAMILIES[name]
    out = [resolve_scenario(str(ROOT / path), [*overrides, f"seed={k}"]) for k in range(seeds)]
    for scenario in out:
        preflight(scenario)
    return out


def _batched(scenarios: list[Any]) -> tuple[float, float]:
    """Wall and CPU seconds (this process, XLA's threads included) of the batch."""
    from simdist.studies.runs import run_many

    wall, cpu = time.perf_counter(), time.process_time()
    run_many(scenarios, parallel=False)
    return time.perf_counter() - wall, time.process_time() - cpu


def _one_by_one(scenarios: list[Any]) -> tuple[float, float]:
    """Wall and CPU seconds of the runs, one after another."""
    from simdist.studies.runs import run

    wall, cpu = time.perf_counter(), time.process_time()
    for scenario in scenarios:
        run(scenario)
    return time.perf_counter() - wall, time.process_time() - cpu


def family(name: str, seeds: int, repeat: int) -> dict[str, Any]:
    """Best-of-``repeat`` seconds of both sides for ``name``'s scenario, and their ratio."""
    scenarios = _scenarios(name, seeds)
    sides = {"batched": _batched, "one_by_one": _one_by_one}
    for side in sides.values():
        side(scenarios)  # warm: programs compiled, Workloads cached
    walls: dict[str, list[float]] = {side: [] for side in sides}
    cpus: dict[str, list[float]] = {side: [] for side in sides}
    order = list(sides)
    for _ in range(repeat):
        for side in order:
            wall, cpu = sides[side](scenarios)
            walls[side].append(wall)
            cpus[side].append(cpu)
        order.reverse()
    ratio = min(walls["one_by_one"]) / min(walls["batched"])
    # Each round's two sides ran back to back: their ratio sees one load; the median of
    # the rounds' ratios is less swayed by a shared machine's swings than the best times.
    paired = median(o / b for o, b in zip(walls["one_by_one"], walls["batched"], strict=True))
    return {
        "scenario": " ".join([FAMILIES[name][0], *(f"--set {o}" for o in FAMILIES[name][1])]),
        "seeds": seeds,
        "batched_s": min(walls["batched"]),
        "one_by_one_s": min(walls["one_by_one"]),
        "ratio": ratio,
        "paired_ratio": paired,
        # CPU seconds are steadier than wall seconds on a shared machine.
        "cpu_ratio": min(cpus["one_by_one"]) / min(cpus["batched"]),
        "walls_s": walls,
        "cpus_s": cpus,
        "keep": min(ratio, paired) >= KEEP_RATIO,
    }


def run(seeds: int = 10, repeat: int = 3, names: list[str] | None = None) -> dict[str, Any]:
    """Every family's row, in this process, and the load averages before and after."""
    before = os.getloadavg()
    rows = {}
    for name in names or list(FAMILIES):
        print(f"  {name} …", file=sys.stderr, flush=True)
        rows[name] = family(name, seeds, repeat)
        print(json.dumps({name: rows[name]}), file=sys.stderr, flush=True)
    return {
        "seeds": seeds,
        "repeat": repeat,
        "load_before": before,
        "load_after": os.getloadavg(),
        "families": rows,
    }


def render(data: dict[str, Any]) -> str:
    """A markdown table of the families: seconds of both sides, ratio, kept or not."""
    lines = [
        f"Seed-batched numerics per family (`benchmarks/bench_seed_families.py`): "
        f"{data['seeds']} seeds in one process, batched (`run_batch`) against one by one "
        f"(`run` per seed), warm, best of {data['repeat']} alternated rounds (load average "
        f"{data['load_before'][0]:.1f} before, {data['load_after'][0]:.1f} after).\n",
        "| family | scenario | batched (s) | one by one (s) | one by one / batched | "
        "median of the rounds' ratios | same, CPU seconds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in data["families"].items():
        lines.append(
            f"| {name} | `{row['scenario']}` | {row['batched_s']:.2f} | "
            f"{row['one_by_one_s']:.2f} | {row['ratio']:.2f} | "
            f"{row['paired_ratio']:.2f} | {row['cpu_ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=list(FAMILIES), help="these families")
    parser.add_argument("--markdown", action="store_true", help="a table instead of JSON")
    args = parser.parse_args()
    data = run(args.seeds, args.repeat, args.only)
    print(render(data) if args.markdown else json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
