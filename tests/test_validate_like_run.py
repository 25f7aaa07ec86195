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
    assert len(CASES) == 16


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_run_refuses_as_validate_does(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    validated = _error(f"validate {path} --out {out}")
    ran = _error(f"run {path} -q --out {out}")
    assert validated[0] == 2 and len(validated[1]) == 1, validated
    assert ran == validated
    assert not out.exists()


# ---------------------------------------------------------------- the memory arithmetic

GOOD_CSV = DATA / "layers_good.csv"  # 3 layers of 80, 80, 36 parameter bytes; batch 8


def _profile_scenario(batch: int, strategy: str = "one_device", optimizer: str = "sgd") -> dict:
    return {
        "name": "memory",
        "numerics": False,
        # a v100: 16e9 bytes
        "cluster": {
            "hosts": 2,
            "ps": 1 if strategy == "parameter_server" else 0,
            "device": {"profile": "v100"},
        },
        "strategy": {"kind": strategy},
        "workload": {
            "profile": str(GOOD_CSV),
            "batch_size": batch,
            "optimizer": {"name": optimizer, "learning_rate": 0.1},
            "steps": 1,
        },
    }


def test_the_footprint_of_a_profile_file_is_per_example() -> None:
    from simdist.layers import read_profile
    from simdist.numerics.memory import Footprint

    # outputs 512 + 512 + 96 bytes for 8 examples; one example of 4 float32 values
    footprint = Footprint.of(read_profile(GOOD_CSV))
    assert footprint == Footprint(("fc1", "fc2", "fc3"), (80, 80, 36), (64.0, 64.0, 12.0), 16)
    assert (footprint.param_nbytes, footprint.activation_nbytes) == (196, 140.0)


@pytest.mark.parametrize(
    ("strategy", "optimizer", "fixed"),
    [
        ("multi_worker_mirrored", "sgd", 2 * 196),  # params + grads
        ("multi_worker_mirrored", "adam", 4 * 196),  # + Adam's two moments on the device
        ("parameter_server", "adam", 2 * 196),  # the servers hold the optimizer state
    ],
)
def test_the_largest_batch_that_fits_passes_and_one_more_is_refused(
    strategy: str, optimizer: str, fixed: int
) -> None:
    from simdist.api import preflight, resolve_scenario
    from simdist.errors import ScenarioError

    fits = (16_000_000_000 - fixed) // (16 + 140)
    preflight(resolve_scenario(_profile_scenario(fits, strategy, optimizer)), source="m.yaml")
    with pytest.raises(ScenarioError) as refused:
        preflight(
            resolve_scenario(_profile_scenario(fits + 1, strategy, optimizer)), source="m.yaml"
        )
    message = str(refused.value)
    need = "worker0/gpu0 needs 16 GB and a v100 has 16 GB"
    assert message.startswith(f"m.yaml: workload.batch_size: does not fit: {need}")
    assert message.endswith(f"use a smaller batch, e.g. batch_size: {fits:,}")


@pytest.mark.parametrize("partition", ["auto", [1, 1, 1]])
def test_a_pipeline_stage_is_refused_where_the_strategy_refuses_it(partition: object) -> None:
    """3 stages of one layer, one micro-batch of B examples in flight; each layer stores its
    input, the last its output too: stage 2 holds fc3's 36 parameter bytes and gradients,
    fc2's output (its input, 64 B an example) and its own (12 B): 72 + 76 B bytes, the most
    of the three for large B; a V100 holds 16e9."""
    from simdist.api import preflight, resolve_scenario
    from simdist.errors import ScenarioError, SimdistError
    from simdist.runtime.engine import run

    def scenario(batch: int) -> object:
        data = _profile_scenario(batch)
        data["cluster"] = {"devices_per_host": 3, "device": {"profile": "v100"}}
        data["strategy"] = {"kind": "pipeline", "stages": 3, "partition": partition}
        return resolve_scenario(data)

    fits = (16_000_000_000 - 72) // 76
    preflight(scenario(fits), source="m.yaml")
    assert run(scenario(fits)).summary["steps"] == 1
    with pytest.raises(ScenarioError) as refused:
        preflight(scenario(fits + 1), source="m.yaml")
    field = (
        "strategy.stages: no partition"
        if partition == "auto"
        else "strategy.partition: pipeline stage 2"
    )
    assert str(refused.value).startswith(f"m.yaml: {field}")
    with pytest.raises(SimdistError, match=r"fits in device memory|does not fit"):
        run(scenario(fits + 1))  # the strategy itself, without the preflight


def test_a_profile_of_unknown_batch_holds_its_outputs_once_at_any_batch(tmp_path: Path) -> None:
    """``# batch_size: 0``: the layers are one step as given (as the clock reads them), so
    only the input grows with the batch: 392 + 1120 + 16 B bytes."""
    from simdist.api import preflight, resolve_scenario
    from simdist.errors import ScenarioError

    step = tmp_path / "step.csv"
    step.write_text(GOOD_CSV.read_text().replace("# batch_size: 8", "# batch_size: 0"))

    def scenario(batch: int) -> object:
        data = _profile_scenario(batch, "multi_worker_mirrored")
        data["workload"]["profile"] = str(step)
        return resolve_scenario(data)

    fits = (16_000_000_000 - 392 - 1120) // 16
    preflight(scenario(fits), source="m.yaml")
    with pytest.raises(ScenarioError, match=f"e.g. batch_size: {fits:,}$"):
        preflight(scenario(fits + 1), source="m.yaml")


# ---------------------------------------------------------------- warnings: validate as run


def _warnings(args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, shlex.split(args))
    return result.exit_code, [x for x in result.output.splitlines() if x.startswith("warning:")]


@pytest.mark.parametrize(
    ("failures", "warned"),
    [
        # 3 steps of 1 ms: 1000 h and 4 ms are after the end, 1 ms is not (it happens, and
        # the run's end moves past it by the restart)
        ("[{target: worker 0, at: 1000h, restart_after: 1s}]", ["failures[0].at: 1,000 h"]),
        (
            "[{target: worker 0, at: 1ms, restart_after: 1ms}, "
            "{target: worker 0, at: 1h, restart_after: 1ms}]",
            ["failures[1].at: 1 h"],
        ),
        ("[{target: worker 0, at: 1ms, restart_after: 1ms}]", []),
        ("[{target: worker 0, mtbf: 1000h, restart_after: 1s}]", []),  # drawn: not scheduled
    ],
)
def test_validate_warns_of_a_failure_after_the_end_as_run_does(failures, warned, tmp_path):
    scenario = HOSTILE / "run_failure_after_end.yaml"
    sets = f"--set 'faults.failures={failures}'"
    validated = _warnings(f"validate {scenario} {sets} --out {tmp_path / 'out'}")
    ran = _warnings(f"run {scenario} {sets} -q --out {tmp_path / 'out'}")
    assert validated == ran
    assert validated[0] == 0
    assert [w.split(": ", 2)[2].split(" is after")[0] for w in ran[1]] == [
        f"faults.{w}" for w in warned
    ]
    assert all(w.endswith("this failure never happened") for w in ran[1])


def test_validate_says_when_the_run_is_too_long_to_simulate_for_its_end(monkeypatch, tmp_path):
    monkeypatch.setattr("simdist.runtime.preflight.VALIDATE_SIMULATE_S", 0.0)
    code, warned = _warnings(f"validate {HOSTILE / 'run_failure_after_end.yaml'}")
    (line,) = warned
    assert code == 0 and line.startswith(
        f"warning: {HOSTILE / 'run_failure_after_end.yaml'}: faults.failures: validate does not "
        "simulate a run this long (about "
    )
    assert line.endswith(
        " s) to see when it ends; simdist run warns about a failure scheduled after the run's end"
    )
