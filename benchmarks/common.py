"""Shared pieces of the benchmarks: the scenarios, timers and counters.

Every benchmark reports ratios of two wall times taken in the same process,
interleaved and repeated (the best of each side is kept), so the figures
describe simdist, not the machine or whatever else runs on it.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import simpy

from simdist.scenario import Scenario, scenario_from_dict

#: The model and data of scenarios/ps_4w2s.yaml: digits, MLP 64-128-10, batch 32, SGD.
WORKLOAD: dict[str, Any] = {
    "model": {"name": "mlp", "hidden": [128]},
    "dataset": "digits",
    "batch_size": 32,
    "optimizer": {"name": "sgd", "learning_rate": 0.1},
    "eval_every": 0,
}


def ps_scenario(
    workers: int,
    gradients: int,
    *,
    numerics: bool = True,
    hidden: tuple[int, ...] = (128,),
    batch: int = 32,
) -> Scenario:
    """``workers`` asynchronous workers and 2 PS tasks, ``gradients`` applied gradients."""
    workload = {**WORKLOAD, "model": {"name": "mlp", "hidden": list(hidden)}, "batch_size": batch}
    return scenario_from_dict(
        {
            "name": f"bench_ps_{workers}w",
            "numerics": numerics,
            "cluster": {"hosts": workers, "ps": 2, "device": {"profile": "cpu"}},
            "workload": {**workload, "steps": gradients},
            "strategy": {"kind": "parameter_server"},
        }
    )


#: pipeline's layout: scenarios/pipeline_gpipe.yaml's model (8 layers of width 64) and
#: schedule (4 stages, 8 micro-batches of 8 examples), copied ``devices / 4`` times.
PIPELINE_STAGES = 4


def sync_scenario(kind: str, devices: int, steps: int, *, numerics: bool = True) -> Scenario:
    """A synchronous strategy on ``devices`` devices (laid out as the strategy needs)."""
    cluster: dict[str, Any] = {"device": {"profile": "cpu"}}
    strategy: dict[str, Any] = {"kind": kind, "execution": "batched"}
    workload = WORKLOAD
    if kind in ("mirrored", "central_storage"):
        cluster["devices_per_host"] = devices
    elif kind == "multi_worker_mirrored":
        per_host = min(8, devices)
        cluster.update(hosts=devices // per_host, devices_per_host=per_host)
    elif kind == "tpu":
        side = 2 ** (int(math.log2(devices)) // 2)
        strategy["topology"] = [side, devices // side]
    elif kind == "parameter_server":
        cluster.update(hosts=devices, ps=2)
        strategy = {"kind": kind}
    elif kind == "pipeline":
        per_host = min(8, devices)
        cluster.update(hosts=devices // per_host, devices_per_host=per_host)
        strategy = {
            "kind": kind,
            "stages": PIPELINE_STAGES,
            "micro_batches": 8,
            "replicas": devices // PIPELINE_STAGES,
        }
        workload = {**WORKLOAD, "model": {"name": "mlp", "hidden": [64] * 7}, "batch_size": 64}
    elif kind not in ("one_device", "default"):
        raise ValueError(f"no benchmark layout for {kind}")
    if kind in ("one_device", "default"):
        strategy = {"kind": kind}
    return scenario_from_dict(
        {
            "name": f"bench_{kind}_{devices}",
            "numerics": numerics,
            "cluster": cluster,
            "workload": {**workload, "steps": steps},
            "strategy": strategy,
        }
    )


def wall(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``fn()`` took, and what it returned."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def best_interleaved(
    sides: dict[str, Callable[[], Any]], repeat: int
) -> dict[str, tuple[float, Any]]:
    """Run every side ``repeat`` times, alternating; keep each side's fastest wall time.

    Alternation exposes both sides to the same background load; the minimum
    is the run least disturbed by it.
    """
    best: dict[str, tuple[float, Any]] = {}
    for _ in range(repeat):
        for name, fn in sides.items():
            seconds, out = wall(fn)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, out)
    return best


@contextmanager
def counting_simpy_events() -> Iterator[list[int]]:
    """Count ``simpy.Environment.step`` calls (events processed) inside the block."""
    count = [0]
    original = simpy.Environment.step

    def step(self: simpy.Environment) -> None:
        count[0] += 1
        original(self)

    simpy.Environment.step = step  # type: ignore[method-assign]
    try:
        yield count
    finally:
        simpy.Environment.step = original  # type: ignore[method-assign]


def parse_args(doc: str) -> argparse.Namespace:
    """``--repeat N`` and ``--quick``, the options every benchmark script takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    return parser.parse_args()
