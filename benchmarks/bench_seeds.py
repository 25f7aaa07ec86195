"""Seeds for the price of one (issue 32): a 10-seed compare and the default trade-off study
against one warm run, whole processes, and where the 10-seed compare's time goes.

    python benchmarks/bench_seeds.py                      # prints JSON
    python benchmarks/bench_seeds.py --before /work/wt/baseline --repeat 3

*Whole process*, warm (an untimed run of each command first fills the per-user caches),
best of ``repeat``, the commands alternated so that background load touches all alike:

* ``simdist run scenarios/ps_4w2s.yaml -q --out DIR`` — the unit;
* ``simdist compare scenarios/ps_4w2s.yaml --seeds 10 -q --out DIR`` — target ≤ 2 units;
* ``simdist tradeoff -q --out DIR`` (72 runs: 6 cells × 4 strategies × 3 seeds) — ≤ 4 units.

With ``--before TREE`` the same commands of another checkout (the code before this work)
run in the same alternation, from ``TREE`` (``PYTHONPATH=TREE``), so the two versions'
ratios come from one session.

*Breakdown* (one warm 10-seed compare inside an interpreter, ``--processes 1`` so that
every run is in it, timers around the phases):
imports, the runs' SimPy passes, their numerics (the parameter server's dataflow replay:
planning, dispatching and waiting for XLA; deferred or not), the rest of the runs (tables,
summaries, workloads, costs) and the comparison report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "scenarios/ps_4w2s.yaml"
COMMANDS = {
    "single": ["run", SCENARIO, "-q"],
    "compare10": ["compare", SCENARIO, "--seeds", "10", "-q"],
    "tradeoff": ["tradeoff", SCENARIO, "-q"],
}
TARGETS = {"compare10": 2.0, "tradeoff": 4.0}

_BREAKDOWN = r"""
import json, sys, time
from collections import Counter
spent = Counter()
t0 = time.perf_counter()
import simdist.cli, simdist.runtime.engine, simdist.studies.runs, simdist.numerics.executor
import simdist.report.compare, simdist.report.plots
from simdist.strategies.parameter_server import replay, strategy
spent["imports"] = time.perf_counter() - t0

def timed(owner, name, part):
    inner = getattr(owner, name, None)
    if inner is None:
        return
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - start
    setattr(owner, name, wrapper)

# numerics: the replay (planned and dispatched during the simulation, then at its end),
# the wait for its values; runs: everything engine.run(s) does; the report: the rest.
timed(replay.Replay, "advance", "numerics")
timed(replay.Replay, "run", "numerics")
timed(simdist.studies.runs, "run", "runs")
timed(simdist.studies.runs, "run_batch", "runs")
from simdist.cli import app
t1 = time.perf_counter()
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    total = time.perf_counter() - t1
    runs = spent.pop("runs", 0.0)
    print(json.dumps({"imports": spent["imports"], "numerics": spent["numerics"],
                      "runs_other": runs - spent["numerics"], "report": total - runs}))
"""


def _command(args: list[str], out: Path) -> list[str]:
    return [sys.executable, "-m", "simdist.cli", *args, "--out", str(out)]


def _time(tree: Path, args: list[str], scratch: Path) -> float:
    out = scratch / "out"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run(_command(args, out), cwd=tree, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def whole(trees: dict[str, Path], repeat: int, names: list[str]) -> dict[str, dict[str, float]]:
    """Best of ``repeat`` for every (tree, command), all alternated, after a warm-up each."""
    best: dict[str, dict[str, float]] = {side: {} for side in trees}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for tree in trees.values():
            for name in names:
                _time(tree, COMMANDS[name], scratch)  # warm: caches filled
        for _ in range(repeat):
            for name in names:
                for side, tree in trees.items():
                    wall = _time(tree, COMMANDS[name], scratch)
                    best[side][name] = min(best[side].get(name, float("inf")), wall)
    return best


def breakdown(tree: Path, repeat: int) -> dict[str, float]:
    """Phases of a warm 10-seed compare in ``tree``: the best total's split."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    best: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        # In this process in both versions (before, 10 runs went to Dask by default).
        args = [*COMMANDS["compare10"], "--processes", "1", "--out", str(Path(tmp) / "out")]
        for _ in range(repeat + 1):
            done = subprocess.run(
                [sys.executable, "-c", _BREAKDOWN, *args],
                cwd=tree,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            parts = json.loads(done.stdout.strip().splitlines()[-1])
            if best is None or sum(parts.values()) < sum(best.values()):
                best = parts
    assert best is not None
    return best


def families(repeat: int) -> dict[str, Any]:
    """bench_seed_families.py's rows (batched against one by one, per family, 10 seeds),
    measured in a process of its own."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_seed_families.py"),
            "--seeds",
            "10",
            "--repeat",
            str(repeat),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def run(
    repeat: int = 3,
    before: Path | None = None,
    names: list[str] | None = None,
    per_family: bool = True,
) -> dict[str, Any]:
    """Whole-process times and ratios (this tree, and ``before`` if given), breakdowns,
    and (``per_family``) each family's batched against one-by-one seeds in one process."""
    names = names or list(COMMANDS)
    trees = {"after": ROOT, **({"before": before} if before is not None else {})}
    times = whole(trees, repeat, names)
    ratios = {
        side: {name: t[name] / t["single"] for name in names if name != "single"}
        for side, t in times.items()
    }
    return {
        "repeat": repeat,
        "load": os.getloadavg()[0],
        "times_s": times,
        "ratios": ratios,
        "targets": TARGETS,
        "breakdown": {side: breakdown(tree, repeat) for side, tree in trees.items()},
        **({"families": families(repeat)} if per_family else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, timed alike")
    parser.add_argument("--only", nargs="*", choices=list(COMMANDS), help="these commands")
    args = parser.parse_args()
    names = args.only or list(COMMANDS)
    if "single" not in names:
        names = ["single", *names]
    print(json.dumps(run(args.repeat, args.before, names), indent=1))


if __name__ == "__main__":
    main()


_PARTS = {
    "imports": "imports (simdist, JAX, pandas, matplotlib)",
    "numerics": "numerics: the dataflow replays (plan, dispatch, wait for XLA)",
    "runs_other": "the runs' SimPy passes and the rest of each run",
    "report": "the comparison report (tables, plot)",
}


def targets(seeds: dict[str, Any]) -> list[list[str]]:
    """docs/PERFORMANCE.md's target rows: each ratio against its target, before and after."""
    rows = []
    labels = {
        "compare10": "6. `compare ps_4w2s --seeds 10` / one warm `run` (whole processes)",
        "tradeoff": "6. default `tradeoff` (72 runs) / one warm `run` (whole processes)",
    }
    for name, target in seeds["targets"].items():
        after = seeds["ratios"]["after"].get(name)
        if after is None:
            continue
        before = seeds["ratios"].get("before", {}).get(name)
        was = f" (before: {before:.2f})" if before is not None else ""
        ok = "met" if after <= target else "**missed**"
        rows.append([labels[name], f"≤ {target:g} (issue 32)", f"{after:.2f}{was}", ok])
    return rows


def render(seeds: dict[str, Any]) -> str:
    """docs/PERFORMANCE.md's section on seeds for the price of one."""
    sides = list(seeds["times_s"])
    lines = [
        "## 6. Seeds for the price of one\n",
        "`benchmarks/bench_seeds.py`: whole `simdist` processes, warm, each the best of "
        f"{seeds['repeat']}, all commands alternated (load average {seeds['load']:.1f} at the "
        "end). *before* is the code of commit 45e4d89 (the start of this work; 10 runs went "
        "to two Dask worker processes by default), run from its own checkout in the same "
        "alternation.\n",
        "| command | "
        + " | ".join(f"{side} (s)" for side in sides)
        + " | "
        + " | ".join(f"{side} / run" for side in sides)
        + " |",
        "| --- |" + " --- |" * (2 * len(sides)),
    ]
    for name in seeds["times_s"][sides[0]]:
        times = " | ".join(f"{seeds['times_s'][side][name]:.2f}" for side in sides)
        ratios = " | ".join(
            "1" if name == "single" else f"{seeds['ratios'][side][name]:.2f}" for side in sides
        )
        lines.append(f"| `{' '.join(COMMANDS[name])}` | {times} | {ratios} |")
    lines += [
        "",
        "Where the time of a warm 10-seed compare goes (one process, `--processes 1` for both "
        "versions; timers around the phases, the best total of the repeats):\n",
        "| part | " + " | ".join(f"{side} (s)" for side in sides) + " |",
        "| --- |" + " --- |" * len(sides),
    ]
    for part, label in _PARTS.items():
        cells = " | ".join(f"{seeds['breakdown'][side][part]:.2f}" for side in sides)
        lines.append(f"| {label} | {cells} |")
    totals = " | ".join(f"{sum(seeds['breakdown'][side].values()):.2f}" for side in sides)
    lines.append(f"| total | {totals} |")
    lines += ["", _WHY]
    if "families" in seeds:
        from bench_seed_families import render as render_families

        lines += ["", render_families(seeds["families"])]
    return "\n".join(lines) + "\n"


_WHY = (
    "**Why the targets are missed.** Seeds share every compiled program (a second seed "
    "compiles nothing: tests/test_compile_sharing.py), the runs of a compare are simulated "
    "in this process rather than in two Dask workers, and the numerics of the families where "
    "it pays are computed together (`engine.run_batch`: the synchronous family's, "
    "parameter_server `mode: sync`'s and the pipeline's steps as copies of the one-run "
    "programs, each run byte-identical to the run alone; the table below). What is left per "
    "seed is the simulation itself: ps_4w2s's SimPy pass (2000 gradients, about 35,000 SimPy "
    "events, fair sharing on every transfer) takes about 0.4 s, and a run alone already "
    "replays its numerics on the second core while it simulates, so computing ten seeds' "
    "replays together saved XLA work but hardly the critical path (0.98–1.16× in one "
    "process, below the 1.2× that pays for a second path: the asynchronous parameter "
    "server's seed-batched replay was removed). Two worker processes do not help on "
    "two cores either (each imports JAX, loads the programs, and shares the cores with the "
    "other's XLA threads). Reaching 2 runs for 10 seeds needs the message-level simulation "
    "about twice as fast (the retired speed target's design: routing and recording a step's "
    "messages in bulk), not more batching; the trade-off study's 72 runs, all "
    "message-level parameter-server runs, meet the same wall. Across two sessions of this "
    "benchmark the compare measured 2.27 and 2.75 (before: 2.60 and 2.70): the noise of a "
    "shared machine is as large as the gain."
)
