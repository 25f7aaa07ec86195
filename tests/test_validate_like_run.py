"""``simdist validate`` refuses what ``simdist run`` would refuse before its first step, with
the same message: the hostile cases of the checks a run makes as it costs its clock model
(profile files, model shapes, pipeline stages, device memory) run both ways."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simdist.cli import app

HOSTILE = Path(__file__).resolve().parent / "hostile"
DATA = HOSTILE / "data"
PREFIXES = ("profile_", "pipeline_partition_sum", "pipeline_stages_over", "ps_timing_model")
CASES = sorted(
    p
    for p in HOSTILE.glob("*.yaml")
    if p.name.startswith(PREFIXES) or p.name.startswith(("memory_", "fullsize_input"))
)
runner = CliRunner()


def _error(args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, shlex.split(args))
    return result.exit_code, [x for x in result.output.splitlines() if x.startswith("error:")]


def test_the_cases_are_there() -> None:
    assert len(CASES) == 14


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_run_refuses_as_validate_does(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    validated = _error(f"validate {path} --out {out}")
    ran = _error(f"run {path} -q --out {out}")
    assert validated[0] == 2 and len(validated[1]) == 1, validated
    assert ran == validated
    assert not out.exists()
