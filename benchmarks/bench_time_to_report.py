"""Time to report: whole `simdist` processes, best of N, and where the time goes.

    python benchmarks/bench_time_to_report.py               # prints JSON
    python benchmarks/bench_time_to_report.py --repeat 5 --launcher "python other_cli.py"

*Whole process*: the wall time of ``simdist --help``, ``simdist validate``, and
``simdist run SCENARIO --out DIR -q`` from process start to exit, best of ``repeat``. A
*warm* run follows one untimed run, so the per-user caches (JAX's compilation cache,
model profiles) hold what it needs; a *cold* run gets a fresh empty cache folder
(``SIMDIST_CACHE_DIR``) each time; *cache off* sets ``SIMDIST_COMPILATION_CACHE=0``.
The console script is run directly (a pyenv shim in front of it adds about 0.1 s).

*Bytecode*: Python caches each module it compiles (``__pycache__``), unless
``PYTHONDONTWRITEBYTECODE`` is set, as it is on the sandboxes these pages were measured
on: there every process compiles simdist's own modules again (an editable install has no
bytecode; pip compiles a regular install's once). The rows run as the environment says;
the ``bytecode`` rows give Python a private bytecode folder (``PYTHONPYCACHEPREFIX``)
that the untimed run fills, as a user's first run would.

*Breakdown*: one warm run of each scenario inside a fresh interpreter, timed in phases:
imports (everything a run imports: the API, the engine, JAX, Flax, Optax, pandas,
matplotlib), compile (JAX's own timers: tracing, lowering, XLA compilation or reading
the compiled program from the cache), simulate (``engine.run`` less compile: SimPy and
the numerics) and write (the report folder, plots included).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("mirrored_4dev", "ps_4w2s")

_BREAKDOWN = r"""
import json, sys, time
t0 = time.perf_counter()
import simdist.api, simdist.runtime.engine, simdist.numerics.executor, simdist.report.plots
import simdist.report.trace, simdist.report.markdown, simdist.report.timeline
t1 = time.perf_counter()
from collections import Counter
from jax import monitoring
spent = Counter()
def listen(event, duration, **kwargs):
    if event.startswith("/jax/core/compile/") or event.endswith("cache_retrieval_time_sec"):
        spent["compile"] += duration
monitoring.register_event_duration_secs_listener(listen)
from simdist.runtime.engine import run
from simdist.report import write_report
t2 = time.perf_counter()
result = run(sys.argv[1])
t3 = time.perf_counter()
write_report(result, sys.argv[2])
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "compile_s": spent["compile"],
                  "simulate_s": t3 - t2 - spent["compile"], "write_s": t4 - t3}))
"""


def launcher() -> list[str]:
    """The ``simdist`` console script beside this interpreter, else ``python -m simdist``."""
    script = Path(sys.executable).parent / "simdist"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "simdist"]


def best_of(cmd: list[str], repeat: int, env: dict[str, str], fresh_cache: bool = False) -> float:
    """The shortest wall time of ``repeat`` runs of ``cmd`` (a fresh cache folder each time
    with ``fresh_cache``); a failing command raises."""
    best = float("inf")
    for _ in range(repeat):
        run_env = dict(env)
        tmp = tempfile.mkdtemp(prefix="simdist_cold_") if fresh_cache else None
        if tmp:
            run_env["SIMDIST_CACHE_DIR"] = tmp
        start = time.perf_counter()
        subprocess.run(cmd, env=run_env, cwd=ROOT, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return best


def breakdown(name: str, out: Path, env: dict[str, str], repeat: int) -> dict[str, float]:
    """Phases of a warm run of scenarios/<name>.yaml in a fresh interpreter; best of
    ``repeat`` per phase."""
    best: dict[str, float] = {}
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-c", _BREAKDOWN, f"scenarios/{name}.yaml", str(out)],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        parts = json.loads(proc.stdout.strip().splitlines()[-1])
        best = {k: min(best.get(k, float("inf")), v) for k, v in parts.items()}
    return best


def run(repeat: int = 5, cmd: list[str] | None = None, phases: bool = True) -> dict[str, Any]:
    """Every whole-process time (seconds, best of ``repeat``) and, with ``phases``, the
    breakdown of a warm run of each scenario."""
    cmd = cmd or launcher()
    env = {k: v for k, v in os.environ.items() if k != "SIMDIST_COMPILATION_CACHE"}
    env.setdefault("MPLBACKEND", "Agg")
    out = Path(tempfile.mkdtemp(prefix="simdist_bench_"))
    try:
        times: dict[str, float] = {
            "help": best_of([*cmd, "--help"], repeat, env),
            "validate": best_of([*cmd, "validate", "scenarios/mirrored_4dev.yaml"], repeat, env),
        }
        # Python's own default: bytecode written once (into a private folder), then read.
        cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(out / "bytecode")
        validate = [*cmd, "validate", "scenarios/mirrored_4dev.yaml"]
        subprocess.run(validate, env=cached, cwd=ROOT, check=True, capture_output=True)
        times["validate, bytecode"] = best_of(validate, repeat, cached)
        for name in SCENARIOS:
            run_cmd = [*cmd, "run", f"scenarios/{name}.yaml", "--out", str(out / name), "-q"]
            subprocess.run(run_cmd, env=env, cwd=ROOT, check=True, capture_output=True)  # warm up
            times[f"{name} warm"] = best_of(run_cmd, repeat, env)
            subprocess.run(run_cmd, env=cached, cwd=ROOT, check=True, capture_output=True)
            times[f"{name} warm, bytecode"] = best_of(run_cmd, repeat, cached)
            times[f"{name} cold"] = best_of(run_cmd, max(1, repeat // 2), env, fresh_cache=True)
            off = {**env, "SIMDIST_COMPILATION_CACHE": "0"}
            times[f"{name} cache off"] = best_of(run_cmd, max(1, repeat // 2), off)
        parts = (
            {
                name: breakdown(name, out / f"{name}_parts", env, min(3, repeat))
                for name in SCENARIOS
            }
            if phases
            else {}
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "cmd": " ".join(cmd),
        "repeat": repeat,
        "times": times,
        "parts": parts,
        "dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--launcher", help="how to start simdist, e.g. 'python -m simdist'")
    parser.add_argument("--no-phases", action="store_true", help="whole-process times only")
    args = parser.parse_args()
    cmd = shlex.split(args.launcher) if args.launcher else None
    print(json.dumps(run(args.repeat, cmd, not args.no_phases), indent=1))


if __name__ == "__main__":
    main()
