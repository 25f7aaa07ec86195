"""Does any shipped scenario depend on the order of simultaneous events? Rerun with ties at random.

SimPy processes the events of one simulated instant (and one priority) in the order
they were scheduled, and simdist keeps that order wherever it saves events
(``links.Countdown``, ``FairShare.later``). That order is the engine's, not the
cluster's: no result may depend on it. This script runs every scenario shipped in
scenarios/ (sweep files skipped; a ``jobs:`` scenario is read through its first job),
plus two large timing-only layouts, with SimPy's rule as it is, then again with ties
broken by a seeded random key (:func:`simdist.runtime.ties.random_ties`), and compares what a
user reads off a run: simulated time, steps, the staleness of the applied gradients
(parameter_server), the final train loss and test accuracy.

With step-time variability on (the default, ``cluster.device.variability``) no two
devices finish at one instant, and every figure must agree within :data:`TOLERANCE`.
Measured (3 tie orders, 25 cases: the 23 shipped scenarios and the two large layouts):
every figure of all 75 reruns equal to the last bit. ``--variability 0`` reruns the same
with variability off: identical devices then move in lock-step, and ps_4w2s's staleness
depends on the tie order (mean 1.50, max 3 as scheduled; 1.86-1.88 and 6 at random; its
final train loss 0.019 against 0.019-0.052): the artefact that made variability the
default.

The script sets up the JAX devices it needs itself: before JAX starts it pins the CPU
backend (``JAX_PLATFORMS=cpu`` unless set) and asks for as many emulated CPU devices as the
most demanding shipped scenario runs on (:func:`devices_needed`: 4, tensor_parallel_4dev and
zero3_4dev), so no ``XLA_FLAGS`` is needed by hand. Each case's lines are printed as soon as
it finishes. ``--quick`` runs :data:`QUICK`, three short cases (an asynchronous PS, a
4-device tensor-parallel run, 64 timing-only workers) with two tie orders each, in a few
seconds; tests/test_tie_order.py runs it in CI.

    python benchmarks/tie_order.py [--seeds 3] [--variability 0] [--only ps_4w2s] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from common import ps_scenario, sync_scenario

import simdist
from simdist.runtime.ties import random_ties
from simdist.scenario.load import is_sweep_file, load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

#: How far a figure may move when only the order of simultaneous events changes, relative
#: to its value as scheduled: the sums of one instant's floats in another order (fair
#: sharing adds and removes the rates of flows that start or end together; a parameter
#: server sums gradients that land together) differ in the last bits, about 1e-16 each,
#: and a run of thousands of steps carries them forward. 1e-9 is far above that and far
#: below any effect a user could read. Steps and the staleness maximum must be equal.
TOLERANCE = 1e-9


def shipped_paths() -> list[Path]:
    """The scenario files of scenarios/ that are not sweeps."""
    return [
        path
        for path in sorted(SCENARIOS.glob("*.yaml"))
        if not is_sweep_file(yaml.safe_load(path.read_text()))
    ]


def devices_needed(paths: list[Path]) -> int:
    """The most JAX devices any of these scenarios (or any job of one) runs its numerics on.

    Loading a scenario imports no JAX, so this can run before JAX starts.
    """
    needed = 1
    for path in paths:
        scenario = load_scenario(path)
        for one in scenario.job_scenarios or [scenario]:
            if one.runs_on_devices:
                needed = max(needed, one.numeric_devices)
    return needed


def set_up_devices(n: int) -> int:
    """Pin the CPU backend (unless ``JAX_PLATFORMS`` is set) and ask for ``n`` emulated CPU
    devices; return how many devices JAX then has.

    Must run before anything starts JAX's backend: the device count is fixed from then on.
    """
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from simdist.numerics import ensure_devices

    return ensure_devices(n)


def _scenario_case(path: Path, steps: int | None = None) -> Callable[[list[str]], Any]:
    """Run ``path`` with the overrides (and ``workload.steps``, when given)."""
    extra = [] if steps is None else [f"workload.steps={steps}"]
    return lambda overrides: simdist.run(path, overrides=[*extra, *overrides])


def shipped() -> dict[str, Callable[[list[str]], Any]]:
    """Every scenario file of scenarios/ that is not a sweep, and two large timing-only runs."""
    cases: dict[str, Callable[[list[str]], Any]] = {
        path.stem: _scenario_case(path) for path in shipped_paths()
    }
    cases["parameter_server, 64 workers, timing-only"] = lambda overrides: simdist.run(
        ps_scenario(64, 4000, numerics=False), overrides=overrides
    )
    cases["central_storage, 64 devices, timing-only"] = lambda overrides: simdist.run(
        sync_scenario("central_storage", 64, 50, numerics=False), overrides=overrides
    )
    return cases


def quick() -> dict[str, Callable[[list[str]], Any]]:
    """Three short cases for CI: asynchronous staleness, real devices, many workers."""
    return {
        "ps_4w2s, 400 gradients": _scenario_case(SCENARIOS / "ps_4w2s.yaml", 400),
        "tensor_parallel_4dev, 20 steps": _scenario_case(
            SCENARIOS / "tensor_parallel_4dev.yaml", 20
        ),
        "parameter_server, 64 workers, timing-only, 300 gradients": lambda overrides: simdist.run(
            ps_scenario(64, 300, numerics=False), overrides=overrides
        ),
    }


#: Tie orders per case in the quick form.
QUICK_SEEDS = 2


def figures(result: Any) -> dict[str, Any]:
    """What a user reads off a run: simulated time, steps, staleness, final loss/accuracy."""
    if hasattr(result, "jobs"):  # several jobs: the first job's run in company
        result = next(iter(result.jobs.values()))
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


def deviation(base: dict[str, Any], other: dict[str, Any]) -> float:
    """The largest relative change of a figure from ``base`` to ``other`` (inf: a count moved)."""
    worst = 0.0
    for key, value in base.items():
        moved = other.get(key)
        if key in ("steps", "staleness_max"):
            worst = max(worst, 0.0 if moved == value else math.inf)
        elif value != moved:
            scale = abs(value) or 1.0
            worst = max(worst, abs(moved - value) / scale if moved == moved else math.inf)
    return worst


def run(
    seeds: int = 3,
    overrides: list[str] | None = None,
    only: str | None = None,
    cases: dict[str, Callable[[list[str]], Any]] | None = None,
) -> Iterator[dict[str, Any]]:
    """Each case as scheduled, then with ``seeds`` random tie orders; one row per run, each
    yielded as soon as it is known (``cases``: :func:`shipped` unless given)."""
    overrides = overrides or []
    for name, make in (shipped() if cases is None else cases).items():
        if only is not None and only not in name:
            continue
        base = figures(make(overrides))
        yield {"case": name, "ties": "as scheduled", **base}
        for seed in range(seeds):
            with random_ties(seed):
                found = figures(make(overrides))
            change = deviation(base, found)
            yield {
                "case": name,
                "ties": f"random {seed}",
                **found,
                "max_change": change,
                "within": change <= TOLERANCE,
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="tie orders per case (3)")
    parser.add_argument("--variability", help="e.g. 0: cluster.device.variability for all")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--quick", action="store_true", help="three short cases, 2 orders each")
    args = parser.parse_args()
    overrides = (
        [] if args.variability is None else [f"cluster.device.variability={args.variability}"]
    )
    needed = devices_needed(shipped_paths())
    have = set_up_devices(needed)
    print(f"JAX devices: {have} (the shipped scenarios need up to {needed})", flush=True)
    cases = quick() if args.quick else shipped()
    seeds = args.seeds if args.seeds is not None else (QUICK_SEEDS if args.quick else 3)
    moved = reruns = 0
    for row in run(seeds, overrides, args.only, cases):
        print({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        reruns += "within" in row
        moved += row.get("within") is False
    print(f"{moved} of {reruns} reruns moved beyond {TOLERANCE:g}", flush=True)
    raise SystemExit(1 if moved and args.variability is None else 0)


if __name__ == "__main__":
    main()
