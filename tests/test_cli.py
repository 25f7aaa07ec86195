"""The simdist command end to end: run, validate, list, and errors that exit 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import tiny, write
from helpers.malformed import MALFORMED
from typer.testing import CliRunner

from simdist.cli import app

runner = CliRunner()


def test_run_writes_the_whole_report(tmp_path):
    scenario = write(tmp_path, tiny())
    out = tmp_path / "report"
    result = runner.invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in (
        "metrics.csv",
        "events.csv",
        "summary.json",
        "params.npz",
        "loss_vs_time.png",
        "scenario.yaml",
    ):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 12
    assert 0 < summary["final_test_accuracy"] <= 1
    events = pd.read_csv(out / "events.csv")
    kinds = set(events["kind"])
    assert "compute" in kinds and kinds <= {"compute", "comm", "idle", "eval"}
    # one device, compute fixed at 1 ms: one compute span per step, back to back.
    compute = events[events["kind"] == "compute"]
    assert compute["step"].tolist() == list(range(12))
    assert compute["start_s"].tolist() == pytest.approx([i * 1e-3 for i in range(12)])
    assert compute["end_s"].tolist() == pytest.approx([(i + 1) * 1e-3 for i in range(12)])
    assert "simulated time" in result.output
    # the resolved scenario reproduces the run
    again = runner.invoke(
        app, ["run", str(out / "scenario.yaml"), "--out", str(tmp_path / "again"), "-q"]
    )
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again" / "metrics.csv").read_bytes() == (out / "metrics.csv").read_bytes()


def test_run_defaults_to_reports_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scenario = write(tmp_path, tiny(**{"workload.steps": 2}))
    result = runner.invoke(app, ["run", str(scenario), "-q", "--set", "name=renamed"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "reports" / "renamed" / "summary.json").is_file()


def test_warm_start_from_a_previous_runs_params(tmp_path):
    first = tmp_path / "first"
    assert (
        runner.invoke(
            app, ["run", str(write(tmp_path, tiny())), "--out", str(first), "-q"]
        ).exit_code
        == 0
    )
    data = tiny(**{"workload.init_from": str(first / "params.npz"), "workload.steps": 1})
    out = tmp_path / "second"
    result = runner.invoke(
        app, ["run", str(write(tmp_path, data, "warm.yaml")), "--out", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    loss_first = pd.read_csv(first / "metrics.csv").query("metric == 'train_loss'")["value"]
    loss_warm = pd.read_csv(out / "metrics.csv").query("metric == 'train_loss'")["value"]
    assert loss_warm.iloc[0] < loss_first.iloc[0]


def test_validate_and_list():
    result = runner.invoke(app, ["validate", "scenarios/mirrored_4dev.yaml"])
    assert result.exit_code == 0, result.output
    assert "4 replica" in result.output
    listing = runner.invoke(app, ["list"])
    assert listing.exit_code == 0
    for word in ("mirrored", "mlp", "llama3_405b", "digits", "adam", "v100", "tpu-v4"):
        assert word in listing.output


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("", "empty"),
        ("name: [unclosed", "line"),
        ("name: x\nseed: 0\n", "workload"),
    ],
)
def test_bad_scenarios_exit_2_without_report(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2
    assert "bad.yaml" in result.output and field in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_sweep_file_given_to_run_names_the_sweep_command(tmp_path, command):
    """scenarios/sweep_ps_workers.yaml is a sweep: run and validate say so instead of
    reporting the scenario fields a sweep file does not have (it said: workload missing)."""
    out = tmp_path / "out"
    sweep = "scenarios/sweep_ps_workers.yaml"
    options = ["--out", str(out)] if command == "run" else []
    result = runner.invoke(app, [command, sweep, *options])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"{sweep}: base: this is a sweep file" in text
    assert f"simdist sweep {sweep}" in text
    assert "workload" not in text and "Traceback" not in text
    assert not out.exists()


def test_bad_override_exits_2(tmp_path):
    scenario = write(tmp_path, tiny())
    result = runner.invoke(app, ["validate", str(scenario), "--set", "cluster.hosts=-1"])
    assert result.exit_code == 2
    assert "cluster.hosts" in result.output


def test_failed_run_leaves_previous_report_untouched(tmp_path, monkeypatch):
    scenario = write(tmp_path, tiny(**{"workload.steps": 2}))
    out = tmp_path / "out"
    assert runner.invoke(app, ["run", str(scenario), "--out", str(out), "-q"]).exit_code == 0
    before = (out / "metrics.csv").read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("simdist.report.plots.plot_loss_vs_time", boom)
    runner.invoke(app, ["run", str(scenario), "--out", str(out), "-q", "--set", "workload.steps=3"])
    assert (out / "metrics.csv").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: case[0])
def test_every_malformed_scenario_exits_2_naming_the_field(tmp_path, case):
    _, text, field, _ = case
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    flat = " ".join(result.output.split())
    assert f"bad.yaml: {field}" in flat if field else "bad.yaml:" in flat
    assert not out.exists()


def test_out_never_replaces_a_folder_that_is_not_a_report(tmp_path):
    scenario = write(tmp_path, tiny(**{"workload.steps": 2}))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = runner.invoke(app, ["run", str(scenario), "--out", str(mine), "-q"])
    assert result.exit_code == 2
    assert "not a simdist report" in " ".join(result.output.split())
    assert (mine / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    result = runner.invoke(app, ["run", str(scenario), "--out", str(a_file / "sub"), "-q"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    # a report folder, or an empty one, is fine
    (tmp_path / "empty").mkdir()
    assert (
        runner.invoke(app, ["run", str(scenario), "--out", str(tmp_path / "empty"), "-q"]).exit_code
        == 0
    )
    assert (
        runner.invoke(app, ["run", str(scenario), "--out", str(tmp_path / "empty"), "-q"]).exit_code
        == 0
    )
