"""Cheap start: `simdist --help` and `simdist validate` without JAX, pandas,
matplotlib, scikit-learn or NumPy where they are not needed; the model check read from the
per-user record of model sizes gives the same verdicts as JAX."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simdist.errors import DataError
from simdist.numerics import memory

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("jax", "flax", "optax", "pandas", "matplotlib", "sklearn", "simpy", "dask", "numpy")

_PROBE = """
import sys
from simdist.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("HEAVY", ",".join(heavy))
"""


def _heavy_after(args: list[str], cache: Path) -> list[str]:
    env = {**os.environ, "SIMDIST_CACHE_DIR": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("HEAVY"))
    return [m for m in line.removeprefix("HEAVY").strip().split(",") if m]


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    assert _heavy_after(["--help"], tmp_path) == []


def test_validate_needs_jax_only_for_a_model_never_built(tmp_path: Path) -> None:
    args = ["validate", "scenarios/mirrored_4dev.yaml"]
    first = _heavy_after(args, tmp_path)
    assert "jax" in first  # the model is built on shapes once, and its size recorded
    assert "sklearn" not in first and "matplotlib" not in first and "pandas" not in first
    assert list((tmp_path / "models").glob("*.json"))
    assert _heavy_after(args, tmp_path) == []  # then read back: no JAX, no pandas, no NumPy


def test_recorded_size_gives_the_same_memory_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simdist.numerics.executor import check_model
    from simdist.scenario import load_scenario

    monkeypatch.setenv("SIMDIST_CACHE_DIR", str(tmp_path))
    model = load_scenario(ROOT / "scenarios" / "mirrored_4dev.yaml").workload.model
    assert memory.known_model_size(model, (8, 8, 1), 10) is None
    check_model(model, (8, 8, 1), 10, None)
    count, nbytes = memory.known_model_size(model, (8, 8, 1), 10)
    assert count == 64 * 128 + 128 + 128 * 10 + 10 and nbytes == 4 * count
    assert memory.known_model_size(model, (16,), 10) is None  # other shapes: not known
    # A machine too small for it: the recorded size and JAX refuse with the same message.
    monkeypatch.setattr(memory, "physical_memory_nbytes", lambda: nbytes)
    with pytest.raises(DataError) as recorded:
        memory.check_param_bytes(count, nbytes, model)
    with pytest.raises(DataError) as built:
        check_model(model, (8, 8, 1), 10, None)
    assert str(recorded.value) == str(built.value)
    # The same model with other options is another model: not known.
    other = model.model_copy(update={"hidden": [64]})
    assert memory.known_model_size(other, (8, 8, 1), 10) is None
