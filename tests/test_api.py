"""The Python API: run() with overrides, Result frames equal to the CSVs, load_report round trip."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pandas as pd
import pytest
from helpers import tiny, write
from pandas.testing import assert_frame_equal

import simdist
from simdist.api import read_params, resolve_scenario
from simdist.errors import ScenarioError, SimdistError
from simdist.numerics.param_files import tree_paths

PS = tiny(
    **{
        "name": "api_ps",
        "strategy": {"kind": "parameter_server"},
        "cluster.hosts": 2,
        "cluster.ps": 1,
        "cluster.links.network": {"bandwidth": "1GB/s", "latency": "10us"},
    }
)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The PS scenario run through simdist.run with keyword overrides, report written."""
    tmp = tmp_path_factory.mktemp("api")
    path = write(tmp, PS)
    out = tmp / "report"
    return simdist.run(path, out=out, workload__steps=10, workload__eval_every=4), out


def test_result_frames_equal_the_csv_files(ran):
    result, out = ran
    assert result.out_dir == out and result.summary["steps"] == 10
    assert_frame_equal(
        result.events, pd.read_csv(out / "events.csv", keep_default_na=False), check_exact=True
    )
    assert_frame_equal(result.metrics, pd.read_csv(out / "metrics.csv"), check_exact=True)
    assert set(result.tables) == {"updates", "links", "link_buckets", "link_load"}
    for name, frame in result.tables.items():
        assert_frame_equal(frame, pd.read_csv(out / f"{name}.csv"), check_exact=True)


def test_load_report_round_trips(ran):
    result, out = ran
    loaded = simdist.load_report(out)
    assert isinstance(loaded, simdist.Result)
    assert_frame_equal(loaded.events, result.events, check_exact=True)
    assert_frame_equal(loaded.metrics, result.metrics, check_exact=True)
    assert loaded.tables.keys() == result.tables.keys()
    for name in result.tables:
        assert_frame_equal(loaded.tables[name], result.tables[name], check_exact=True)
    assert loaded.summary == json.loads((out / "summary.json").read_text())
    assert loaded.summary["final_test_accuracy"] == result.summary["final_test_accuracy"]
    assert loaded.scenario == result.scenario
    assert jax.tree_util.tree_structure(loaded.params) == jax.tree_util.tree_structure(
        jax.tree_util.tree_map(np.asarray, result.params)
    )
    for a, b in zip(
        jax.tree_util.tree_leaves(loaded.params),
        jax.tree_util.tree_leaves(result.params),
        strict=True,
    ):
        np.testing.assert_array_equal(a, np.asarray(b))
    flat = read_params(out / "params.npz", "flat")
    assert list(flat) == tree_paths(result.params)


def test_empty_text_cells_stay_strings(tmp_path):
    events = pd.DataFrame({"host": ["NA", "w0"], "detail": ["", ""], "value": [1.5, float("nan")]})
    events.to_csv(tmp_path / "t.csv", index=False)
    back = simdist.api.read_table(tmp_path / "t.csv", {"detail": "str"})
    assert back["host"].tolist() == ["NA", "w0"]
    assert back["detail"].tolist() == ["", ""]
    assert back["value"].isna().tolist() == [False, True]


def test_override_forms_agree(tmp_path):
    path = write(tmp_path, tiny())
    by_kw = resolve_scenario(path, cluster__devices_per_host=2, strategy="mirrored", seed=3)
    by_list = resolve_scenario(path, ["cluster.devices_per_host=2", "strategy=mirrored", "seed=3"])
    by_map = resolve_scenario(
        path, {"cluster.devices_per_host": 2, "strategy": "mirrored", "seed": 3}
    )
    assert by_kw == by_list == by_map
    assert by_kw.replicas == 2 and by_kw.seed == 3
    again = resolve_scenario(resolve_scenario(path), workload__steps=5)
    assert again.workload.steps == 5
    assert resolve_scenario(tiny(), name="8").name == "8"
    with pytest.raises(ScenarioError, match=r"cluster\.hosts"):
        resolve_scenario(path, cluster__hosts=-1)


def test_run_checks_out_before_simulating_and_reports_progress(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not a report")
    steps: list[tuple[int, int]] = []
    with pytest.raises(SimdistError, match="not a simdist report"):
        simdist.run(tiny(), out=mine, on_step=lambda step, total: steps.append((step, total)))
    assert steps == [] and (mine / "notes.txt").read_text() == "not a report"
    simdist.run(tiny(**{"workload.steps": 3}), on_step=lambda s, t: steps.append((s, t)))
    assert steps and steps[-1] == (3, 3)


def test_compare_loads_reports_and_runs_scenarios(ran, tmp_path):
    result, out = ran
    names: list[str] = []
    scenario = write(tmp_path, tiny(**{"name": "api_cmp", "workload.steps": 4}))
    folder, table = simdist.api.compare(
        [out, scenario], out=tmp_path / "cmp", target=0.5, on_run=names.append
    )
    assert folder == tmp_path / "cmp" and names == ["api_cmp"]  # the report is not re-run
    assert table["run"].tolist() == ["api_ps", "api_cmp"]
    assert table["simulated_time_s"].iloc[0] == result.summary["simulated_time_s"]
    written = pd.read_csv(folder / "compare.csv", keep_default_na=False, na_values=[""])
    assert_frame_equal(written, table, check_dtype=False)
    with pytest.raises(SimdistError, match="--target"):
        simdist.api.compare([out], target=0)


def test_load_report_rejects_other_folders(tmp_path):
    with pytest.raises(SimdistError, match="not a simdist report folder"):
        simdist.load_report(tmp_path)


def test_import_simdist_stays_cheap():
    code = (
        "import sys, simdist; "
        "heavy = [m for m in ('jax', 'pandas', 'matplotlib', 'simpy') if m in sys.modules]; "
        "assert not heavy, heavy; "
        "assert {'run', 'load_report', 'Result'} <= set(simdist.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
