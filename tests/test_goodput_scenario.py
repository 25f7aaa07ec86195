"""The ``goodput:`` section and ``simdist goodput``: one clear error per bad value, the step
and the checkpoint bytes measured by the engine, the report folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simdist.errors import ScenarioError
from simdist.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "goodput_tiny.yaml"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "goodput.rates.gpu=-1",
            "goodput.rates.gpu: got -1; expected a value >= 0.0, e.g. gpu: 1.5e-4",
        ),
        (
            "goodput.checkpoint.every_steps=0",
            "goodput.checkpoint.every_steps: got 0; expected a value >= 1, e.g. every_steps: 100",
        ),
        (
            "goodput.checkpoint.storage_bandwidth=0",
            "goodput.checkpoint.storage_bandwidth: got 0; expected a value greater than 0",
        ),
        (
            "goodput.horizon=1e9 days",
            "goodput.horizon: got '1e9 days'; expected a wall-clock horizon above 0 and up to "
            "3650 days (10 years), e.g. horizon: 54 days",
        ),
        (
            "goodput.rates=llama4",
            "goodput.rates.preset: got 'llama4'; did you mean 'llama3_405b'? Expected one of "
            "'llama3_405b', 'rsc1_nodes', 'rsc2_nodes', e.g. preset: llama3_405b",
        ),
    ],
)
def test_bad_values_are_refused_with_one_clear_error(override, message):
    with pytest.raises(ScenarioError) as raised:
        load_scenario(TINY, [override])
    assert str(raised.value) == f"{TINY}: {message}"


def test_rates_that_never_fail_are_refused():
    with pytest.raises(ScenarioError) as raised:
        load_scenario(TINY, ["goodput.rates={gpu: 0}"])
    assert str(raised.value) == (
        f"{TINY}: goodput.rates.gpu: every rate is 0, so nothing would ever fail; give one "
        "above 0, e.g. rates: {gpu: 1.5e-4}, or a preset, e.g. rates: llama3_405b"
    )


def test_a_job_that_cannot_be_made_is_refused_naming_the_section():
    from simdist.goodput.measure import build_study

    scenario = load_scenario(TINY, ["goodput.job={cluster.hosts: -3}"])
    with pytest.raises(ScenarioError) as raised:
        build_study(scenario, "tiny.yaml")
    assert str(raised.value) == (
        "tiny.yaml: goodput.job: the job it makes is refused at cluster.hosts: got -3; "
        "expected a value >= 1, e.g. hosts: 4"
    )


def test_the_cli_refuses_with_one_line_and_exit_2(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "simdist", "goodput", str(TINY), "--set",
         "goodput.rates.gpu=-1", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {TINY}: goodput.rates.gpu: got -1; expected a value >= 0.0, e.g. gpu: 1.5e-4"
    ]
    assert not out.exists()


def test_days_are_a_duration():
    assert load_scenario(TINY).goodput.horizon_s == 2 * 86400.0


def test_goodput_needs_its_checkpoint_settings():
    from simdist.goodput.measure import build_study

    scenario = load_scenario(TINY, ["goodput.checkpoint=null"])
    with pytest.raises(ScenarioError) as raised:
        build_study(scenario, "tiny.yaml")
    assert str(raised.value).startswith("tiny.yaml: goodput.checkpoint: missing")


def test_a_run_ignores_the_section_and_its_report_does_not_change():
    """The section only feeds simdist goodput; a scenario without it dumps as before."""
    from simdist.scenario.load import dump_scenario

    plain = load_scenario(ROOT / "scenarios" / "mirrored_4dev.yaml")
    assert "goodput" not in dump_scenario(plain)


def test_the_report_of_a_small_job(tmp_path):
    from simdist.goodput.run import goodput

    found = goodput(TINY, out=tmp_path / "g")
    s = found.summary
    assert (s["gpus"], s["hosts"], s["replicas"]) == (8, 2, 8)
    # 3 steps measured by the engine, in steady state: the step is the engine's.
    assert s["measured_steps"] == 3
    assert s["step_s"] == s["measured_step_s"] > 0
    # Checkpoint bytes: one mlp's parameters and Adam's two moments, float32, per device.
    params = found.measured.params_nbytes
    assert found.measured.optimizer_nbytes == 2 * params
    assert s["checkpoint_nbytes_per_device"] == 3 * params
    assert s["checkpoint_blocking_s"] == 3 * params / 1e9
    names = sorted(p.name for p in (tmp_path / "g").iterdir())
    assert names == [
        ".simdist-report", "goodput.md", "goodput_interval.png", "goodput_size.png",
        "interruptions.csv", "interval_bands.csv", "intervals.csv", "per_seed.csv",
        "recovery.csv", "size_bands.csv", "sizes.csv", "summary.json",
    ]  # fmt: skip
    written = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert written["goodput_mean"] == pytest.approx(s["goodput_mean"])
    assert set(found.tables["size_bands"]["gpus"]) == {8, 64}
    assert set(found.tables["recovery"]["recovery"]) == {"restart", "elastic"}


def test_zero_shards_over_the_job_s_copies_shrink_the_checkpoint_per_device():
    """A slice of 2 copies measured, the job of 8: ZeRO-1's optimizer shard per device is a
    quarter of the slice's."""
    from simdist.goodput.measure import job_scenario, measure

    slice_ = load_scenario(
        TINY,
        ["strategy=zero", "strategy.stage=1", "cluster.hosts=1", "cluster.devices_per_host=2",
         "goodput.job={cluster.hosts: 1, cluster.devices_per_host: 8}"],
    )  # fmt: skip
    job = job_scenario(slice_, "tiny.yaml")
    assert (slice_.replicas, job.replicas) == (2, 8)
    m = measure(slice_, job, "tiny.yaml")
    # Adam: 8 bytes of state per float32 parameter (4 bytes): twice the parameters, over 8.
    assert m.optimizer_nbytes == pytest.approx(2 * m.params_nbytes / 8, rel=1e-6)


def test_the_shipped_llama_slice_fits_its_devices():
    """The preflight a run and `simdist goodput` do first: the 405B slice's stages fit an
    H100 (with FlashAttention's activations and full recomputation), with a step to time."""
    from simdist.runtime.preflight import preflight

    path = ROOT / "scenarios" / "llama3_405b_goodput.yaml"
    checked = preflight(load_scenario(path), source=str(path))
    assert checked.total_steps == 1
