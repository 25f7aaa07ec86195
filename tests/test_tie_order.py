"""benchmarks/tie_order.py in CI: its quick form, in a process of its own with no XLA_FLAGS.

The whole benchmark reruns every shipped scenario under three tie orders (about 20 minutes);
its quick form (three short cases, two tie orders each) runs here, in a fresh process, so
that the devices the script sets up are its own and not this suite's (conftest.py's 8).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import tie_order  # noqa: E402


def test_the_shipped_scenarios_need_four_devices() -> None:
    """tensor_parallel_4dev and zero3_4dev run on 4 JAX devices; nothing needs more."""
    assert tie_order.devices_needed(tie_order.shipped_paths()) == 4
    assert tie_order.devices_needed([ROOT / "scenarios" / "ps_4w2s.yaml"]) == 1


def test_the_quick_form_sets_up_its_devices_and_no_figure_moves() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    env.pop("JAX_PLATFORMS", None)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tie_order.py"), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "JAX devices: 4 (the shipped scenarios need up to 4)"
    assert lines[-1] == "0 of 6 reruns moved beyond 1e-09"
    rows = lines[1:-1]
    assert len(rows) == 9
    assert sum("'within': True" in row for row in rows) == 6
    assert sum("tensor_parallel_4dev" in row for row in rows) == 3


def test_each_case_is_given_as_soon_as_it_finishes() -> None:
    """The rows of a case come before the next case runs: a later failure loses none."""

    def broken(overrides: list[str]) -> None:
        raise RuntimeError("the second case fails")

    cases = {"ps_4w2s, 100 gradients": tie_order.quick()["ps_4w2s, 400 gradients"]}
    rows = tie_order.run(1, ["workload.steps=100"], cases={**cases, "broken": broken})
    first, again = next(rows), next(rows)
    assert (first["ties"], again["ties"], again["within"]) == ("as scheduled", "random 0", True)
    assert first["steps"] == 100
    with pytest.raises(RuntimeError, match="the second case fails"):
        next(rows)
