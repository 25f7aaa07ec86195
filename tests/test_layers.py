"""Layers import downward only: each layer, imported in a fresh interpreter, loads none above it.

The direction (docs/ARCHITECTURE.md, the layers figure): cli → api → engine → strategies → (network,
collectives, faults, numerics) → (units, seeds, profiles); recorder and summary
know no strategy and no report; report never imports the api or the engine.
A test per layer imports it (and does its typical first job, e.g. loading a
scenario file) in a new ``python -c`` and reads ``sys.modules``, so a lazy
import hidden in a function called at load time is caught too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(str(p) for p in (ROOT / "scenarios").glob("*.yaml") if "sweep" not in p.name)


def modules_after(code: str) -> set[str]:
    """Every module in ``sys.modules`` after running ``code`` in a new interpreter."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def pulled_in(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    """The packages of ``packages`` (or any of their submodules) present in ``modules``."""
    return sorted(p for p in packages if any(m == p or m.startswith(f"{p}.") for m in modules))


LAYERS = {
    "scenario loading": (
        "from simdist.scenario import load_scenario\n"
        f"for path in {SCENARIOS!r}:\n"
        "    load_scenario(path)\n",
        "simdist.scenario",
        ("simpy", "jax", "matplotlib", "simdist.runtime.engine"),
    ),
    "engine": (
        "import simdist.runtime.engine",
        "simdist.runtime.engine",
        ("matplotlib", "pandas.plotting._matplotlib", "simdist.report", "simdist.api"),
    ),
    "network": ("import simdist.network", "simdist.network", ("jax", "simdist.runtime.engine")),
    "collectives": (
        "import simdist.collectives",
        "simdist.collectives",
        ("jax", "simdist.runtime.engine", "simdist.strategies"),
    ),
    "numerics": (
        "import simdist.numerics.executor",
        "simdist.numerics.executor",
        ("simpy", "simdist.runtime.engine", "simdist.strategies", "simdist.network"),
    ),
    "recorder": (
        "import simdist.runtime.recorder",
        "simdist.runtime.recorder",
        ("simdist.report", "simdist.strategies", "simpy", "jax", "matplotlib"),
    ),
    "summary": (
        "import simdist.summary",
        "simdist.summary",
        ("simdist.report", "simdist.strategies", "simpy", "jax", "matplotlib"),
    ),
    "report": (
        "import simdist.report, simdist.report.compare, simdist.report.markdown, "
        "simdist.report.plots, simdist.report.timeline",
        "simdist.report.tracks",
        ("simdist.api", "simdist.runtime.engine", "simdist.strategies", "simpy"),
    ),
}


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_pulls_in_nothing_above_it(layer: str) -> None:
    code, loaded, above = LAYERS[layer]
    modules = modules_after(code)
    assert loaded in modules  # the import really happened
    assert pulled_in(modules, above) == []


def test_the_checker_sees_a_layer_above() -> None:
    # The engine imports the strategies at load time, which these tests must be able to tell.
    # (The api does not import the engine at load time, so that validate starts cheaply.)
    modules = modules_after("import simdist.runtime.engine")
    assert pulled_in(modules, ("simdist.strategies",)) == ["simdist.strategies"]
