"""The painter: plots drawn in a forked process give the same report, and anything wrong on
its side leaves the plots to the run itself.

Each case runs in a fresh interpreter, as ``simdist run`` does: the painter is forked
before JAX is imported, which this test process has done long ago.
"""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny, write

# argv: scenario, out folder, what to do: "draw", "kill" the painter first, or the name of a
# plot function of simdist.report.plots to break.
_CHILD = """
import json, sys
from simdist.report import painter
scenario, out, case = sys.argv[1:]
if case.startswith("plot_"):
    import simdist.report.plots as plots
    def broken(*args):
        raise RuntimeError("a plot that cannot be drawn")
    setattr(plots, case, broken)
with painter.painting():
    forked = painter.current() is not None
    if case == "kill" and forked:
        painter.current().kill()
    from simdist import api
    try:
        api.run(scenario, out=out)
        error = None
    except RuntimeError as exc:
        error = str(exc)
print(json.dumps({"forked": forked, "matplotlib_here": "matplotlib" in sys.modules,
                  "error": error}))
"""


def _run(scenario: Path, out: Path, case: str, plot_process: str = "1") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(scenario), str(out), case],
        env={**os.environ, "SIMDIST_PLOT_PROCESS": plot_process},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _same_folders(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert any(name.endswith(".png") for name in names)
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert (mismatch, errors) == ([], []), mismatch + errors


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("painter")
    return write(
        folder, tiny(**{"strategy.kind": "parameter_server", "cluster.ps": 1, "workload.steps": 40})
    )


@pytest.fixture(scope="module")
def drawn_here(scenario: Path) -> Path:
    out = scenario.parent / "here"
    seen = _run(scenario, out, "draw", plot_process="0")
    assert seen == {"forked": False, "matplotlib_here": True, "error": None}
    return out


def test_the_painter_draws_the_report_the_run_would_draw(scenario: Path, drawn_here: Path):
    out = scenario.parent / "painted"
    seen = _run(scenario, out, "draw")
    # The run itself never loaded matplotlib: the painter drew every plot.
    assert seen == {"forked": True, "matplotlib_here": False, "error": None}
    _same_folders(out, drawn_here)


def test_a_dead_painter_leaves_the_plots_to_the_run(scenario: Path, drawn_here: Path):
    out = scenario.parent / "killed"
    seen = _run(scenario, out, "kill")
    assert seen == {"forked": True, "matplotlib_here": True, "error": None}
    _same_folders(out, drawn_here)


# loss_vs_step.png is the painter's to draw, throughput.png its helper's (every second job,
# after trace.json and loss_vs_time.png).
@pytest.mark.parametrize("plot", ["plot_throughput", "plot_loss_vs_step"])
def test_a_plot_that_fails_in_the_painter_fails_the_run_as_in_process(scenario: Path, plot: str):
    out = scenario.parent / f"broken_{plot}"
    seen = _run(scenario, out, plot)
    assert seen["forked"] and seen["error"] == "a plot that cannot be drawn"
    assert not out.exists()  # no half-written report
