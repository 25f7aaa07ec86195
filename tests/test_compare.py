"""simdist compare: scenario files and report folders side by side; errors exit 2."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from helpers import tiny, write
from typer.testing import CliRunner

import simdist
from simdist.cli import app
from simdist.report.compare import COMPARE_COLUMNS

runner = CliRunner()
PS = tiny(
    **{
        "name": "cmp_ps",
        "strategy": {"kind": "parameter_server"},
        "cluster.hosts": 2,
        "cluster.ps": 1,
        "cluster.links.network": {"bandwidth": "1GB/s", "latency": "10us"},
    }
)


def _first_reach(metrics: pd.DataFrame, target: float) -> tuple[float, int] | None:
    acc = metrics[metrics["metric"] == "test_accuracy"]
    hits = acc[acc["value"] >= target]
    return None if hits.empty else (hits["time_s"].iloc[0], hits["step"].iloc[0])


def test_compare_scenario_files_and_report_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one = write(tmp_path, tiny(**{"name": "cmp_one"}), "one.yaml")
    mirrored = write(
        tmp_path,
        tiny(**{"name": "cmp_mir", "strategy.kind": "mirrored", "cluster.devices_per_host": 2}),
        "mirrored.yaml",
    )
    reports = {"cmp_one": tmp_path / "r_one", "cmp_mir": tmp_path / "r_mir"}
    simdist.run(one, out=reports["cmp_one"])
    simdist.run(mirrored, out=reports["cmp_mir"])
    simdist.run(PS, out=tmp_path / "r_ps")
    reports["cmp_ps"] = tmp_path / "r_ps"
    finals = [json.loads((r / "summary.json").read_text()) for r in reports.values()]
    target = round(min(f["final_test_accuracy"] for f in finals) * 0.99, 4)

    sources = [str(one), str(reports["cmp_mir"]), str(reports["cmp_ps"])]
    result = runner.invoke(app, ["compare", *sources, "--target", str(target), "-q"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "reports" / "compare_cmp_one_cmp_mir_cmp_ps"
    written = {p.name for p in out.iterdir()}
    assert written == {"compare.csv", "compare.md", "accuracy_vs_time.png", ".simdist-report"}
    table = pd.read_csv(out / "compare.csv", keep_default_na=False, na_values=[""])
    assert tuple(table.columns) == COMPARE_COLUMNS
    assert table["run"].tolist() == ["cmp_one", "cmp_mir", "cmp_ps"]
    for row in table.to_dict("records"):
        summary = json.loads((reports[row["run"]] / "summary.json").read_text())
        assert row["strategy"] == summary["strategy"]
        assert row["steps"] == summary["steps"]
        assert row["simulated_time_s"] == summary["simulated_time_s"]
        assert row["final_test_accuracy"] == summary["final_test_accuracy"]
        assert row["examples_per_s"] == summary["examples_per_s"]
        assert 0 <= row["comm_share"] <= 1
        if summary["strategy"] == "parameter_server":
            assert row["staleness_mean"] == summary["staleness"]["mean"]
        else:
            assert math.isnan(row["staleness_mean"])
            assert row["comm_share"] == pytest.approx(summary["time_split"]["comm"], abs=1e-12)
        metrics = pd.read_csv(reports[row["run"]] / "metrics.csv")
        reached = _first_reach(metrics, target)
        assert reached is not None
        assert (row["time_to_target_s"], row["step_to_target"]) == reached
    text = (out / "compare.md").read_text()
    assert "![test accuracy vs simulated time](accuracy_vs_time.png)" in text
    assert all(name in text for name in reports)


def test_unreached_target_is_empty(tmp_path):
    report = tmp_path / "r"
    simdist.run(tiny(**{"workload.steps": 2, "workload.eval_every": 1}), out=report)
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(report), "--target", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "compare.csv")
    assert table["time_to_target_s"].isna().all() and table["step_to_target"].isna().all()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml"], "not found"),
        (["empty_dir"], "not a simdist report folder"),
        (["bad.yaml"], "bad.yaml"),
        (["good.yaml", "--target", "1.5"], "--target"),
    ],
)
def test_compare_errors_exit_2_without_output(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "bad.yaml").write_text("name: x\n")
    write(tmp_path, tiny(), "good.yaml")
    result = runner.invoke(app, ["compare", *args, "--out", "out"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
