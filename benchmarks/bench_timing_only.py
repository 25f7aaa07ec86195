"""Benchmark 2: simulated events per second of wall time in timing-only runs, 64–1024 devices.

An *event* here is one row of ``events.csv``: one interval of simulated
time on one device or host (a compute, a transfer, an all-reduce, a wait).
That is what a user gets out of the simulator, and what per-device
recording costs.  Alongside, SimPy events processed per second
(``Environment.step`` calls, counted in a separate, untimed run: the counter
itself costs time) show the engine's raw rate; the two differ because
one SimPy timeout can stand for a step of 1024 devices, while one transfer
between a worker and a PS takes several SimPy events.

Wall time is ``simdist.runtime.engine.run`` (simulation, tables, summary; report
files not written), best of a few runs after a warm-up run.
"""

from __future__ import annotations

from typing import Any

from common import best_interleaved, counting_simpy_events, parse_args, sync_scenario

from simdist.runtime import engine
from simdist.strategies import STRATEGY_CLASSES

SIZES = (64, 256, 1024)
KINDS = (
    "mirrored",
    "parameter_server",
    "multi_worker_mirrored",
    "central_storage",
    "tpu",
    "pipeline",
)
#: Rows to aim for per run, so that fixed costs (cluster set-up, tables) are amortised.
TARGET_ROWS = 200_000


def _work(kind: str, devices: int, rows: int) -> int:
    """Steps (sync) or gradients (parameter_server) giving about ``rows`` events."""
    if kind == "parameter_server":
        return max(4 * devices, rows // 7)
    if kind == "pipeline":  # 41 rows per device and step (common.sync_scenario's layout)
        return max(2, rows // (41 * devices))
    return max(5, rows // (2 * devices))


def measure(kind: str, devices: int, repeat: int, rows: int = TARGET_ROWS) -> dict[str, Any]:
    """One row of the table: ``kind`` on ``devices`` devices, timing-only."""
    scenario = sync_scenario(kind, devices, _work(kind, devices, rows), numerics=False)
    engine.run(scenario)
    best = best_interleaved({"run": lambda: engine.run(scenario)}, repeat)
    seconds, result = best["run"]
    with counting_simpy_events() as simpy_events:
        engine.run(scenario)
    return {
        "strategy": kind,
        "devices": devices,
        "steps": result.summary["steps"],
        "events": len(result.events),
        "simpy_events": simpy_events[0],
        "wall_s": seconds,
        "events_per_s": len(result.events) / seconds,
        "simpy_events_per_s": simpy_events[0] / seconds,
    }


def run(repeat: int = 3, quick: bool = False) -> list[dict[str, Any]]:
    """Every implemented strategy at every size."""
    rows = TARGET_ROWS // 4 if quick else TARGET_ROWS
    kinds = [k for k in KINDS if k in STRATEGY_CLASSES]
    return [measure(kind, n, repeat, rows) for kind in kinds for n in SIZES]


#: The scale rows: (strategy, devices, PS tasks, steps or gradients).
SCALE: tuple[tuple[str, int, int, int], ...] = (
    ("multi_worker_mirrored", 1024, 0, 20),
    ("multi_worker_mirrored", 2048, 0, 20),
    ("multi_worker_mirrored", 4096, 0, 20),
    ("parameter_server", 256, 64, 1024),
    ("parameter_server", 1024, 64, 1024),
)


def scale(repeat: int = 2, quick: bool = False) -> list[dict[str, Any]]:
    """The big timing-only runs: wall time per simulated step and per device, events/s.

    The cost per simulated step should grow at most linearly with the devices, so the
    wall time per step and device stays flat across a strategy's rows.
    """
    rows = []
    for kind, devices, ps, work in SCALE[:2] + SCALE[3:4] if quick else SCALE:
        scenario = sync_scenario(kind, devices, work, numerics=False)
        if ps:
            cluster = scenario.cluster.model_copy(
                update={"ps": ps, "ps_names": [f"ps{i}" for i in range(ps)]}
            )
            scenario = scenario.model_copy(update={"cluster": cluster})
        engine.run(scenario)
        seconds, result = best_interleaved({"run": lambda s=scenario: engine.run(s)}, repeat)["run"]
        steps = result.summary["steps"]
        rows.append(
            {
                "strategy": kind,
                "devices": devices,
                "ps": ps,
                "steps": steps,
                "events": len(result.events),
                "wall_s": seconds,
                "ms_per_step": 1e3 * seconds / steps,
                "us_per_step_device": 1e6 * seconds / steps / devices,
                "events_per_s": len(result.events) / seconds,
            }
        )
    return rows


#: The PS scaling rows (issue 39): workers, 30 gradients each, variability on and off.
PS_WORKERS = (16, 64, 256, 1024)
GRADIENTS_PER_WORKER = 30


def ps_scenario(workers: int, variability: bool) -> Any:
    """``common.ps_scenario``'s layout, timing-only, 30 gradients per worker; with
    ``variability`` False the steps are exact (``cluster.device.variability: 0``)."""
    from common import WORKLOAD

    from simdist.scenario import scenario_from_dict

    device: dict[str, Any] = {"profile": "cpu"}
    if not variability:
        device["variability"] = 0
    return scenario_from_dict(
        {
            "name": f"bench_ps_{workers}w",
            "numerics": False,
            "cluster": {"hosts": workers, "ps": 2, "device": device},
            "workload": {**WORKLOAD, "steps": GRADIENTS_PER_WORKER * workers},
            "strategy": {"kind": "parameter_server"},
        }
    )


def ps_scaling(repeat: int = 2, quick: bool = False) -> dict[str, Any]:
    """Wall time per gradient of asynchronous parameter_server runs, timing-only, from 16
    to 1,024 workers, variability on (the default) and off, and the two guards: per
    gradient at 256 workers over 16 (target ≤ 1.5) and on over off at 256 (target ≤ 2).

    Fair sharing's cost per event must not grow with the flows in flight: variability
    makes every message start and end alone, so each one changes the shares of all
    flows on its PS link (quadratic before issue 39)."""
    sizes = PS_WORKERS[:3] if quick else PS_WORKERS
    rows = []
    for workers in sizes:
        sides = {
            name: (lambda v=on, w=workers: engine.run(ps_scenario(w, v)))
            for name, on in (("on", True), ("off", False))
        }
        engine.run(ps_scenario(min(workers, 16), True))  # warm: imports, caches
        best = best_interleaved(sides, 1 if workers >= 1024 else repeat)
        gradients = GRADIENTS_PER_WORKER * workers
        on_s, off_s = best["on"][0], best["off"][0]
        rows.append(
            {
                "workers": workers,
                "gradients": gradients,
                "on_s": on_s,
                "off_s": off_s,
                "on_ms_per_gradient": 1e3 * on_s / gradients,
                "off_ms_per_gradient": 1e3 * off_s / gradients,
                "on_over_off": on_s / off_s,
            }
        )
    by = {r["workers"]: r for r in rows}
    return {
        "rows": rows,
        "per_gradient_256_over_16": by[256]["on_ms_per_gradient"] / by[16]["on_ms_per_gradient"],
        "on_over_off_256": by[256]["on_over_off"],
    }


_BEFORE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench_timing_only import ps_scenario
from simdist.runtime import engine
engine.run(ps_scenario(16, True))
out = {}
for workers in json.loads(sys.argv[2]):
    for on in (True, False):
        start = time.perf_counter()
        engine.run(ps_scenario(workers, on))
        out[f"{workers} {'on' if on else 'off'}"] = time.perf_counter() - start
print(json.dumps(out))
"""


def ps_scaling_before(tree: str, workers: tuple[int, ...] = (16, 64, 128)) -> dict[str, float]:
    """:func:`ps_scaling`'s runs (once each) with the code of another checkout ``tree``
    (``PYTHONPATH=tree``), in a process of its own: the before side of an A/B."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-c", _BEFORE, here, json.dumps(list(workers))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args(__doc__)
    scaling = ps_scaling(args.repeat, args.quick)
    for r in scaling["rows"]:
        print(
            f"parameter_server {r['workers']:>5} workers: {r['on_s']:7.2f} s on, "
            f"{r['off_s']:6.2f} s off; {r['on_ms_per_gradient']:.3f} ms / gradient on, "
            f"{r['off_ms_per_gradient']:.3f} off; on/off {r['on_over_off']:.2f}"
        )
    print(
        f"per gradient 256 / 16 workers: {scaling['per_gradient_256_over_16']:.2f} (target ≤ 1.5); "
        f"on / off at 256: {scaling['on_over_off_256']:.2f} (target ≤ 2)"
    )
    for row in run(args.repeat, args.quick):
        print(
            f"{row['strategy']:>22} {row['devices']:>5}: {row['events']:>8} events "
            f"in {row['wall_s']:.3f}s = {row['events_per_s']:>10,.0f}/s "
            f"(SimPy {row['simpy_events_per_s']:>10,.0f}/s)"
        )


if __name__ == "__main__":
    main()
