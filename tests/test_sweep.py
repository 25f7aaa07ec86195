"""Sweeps on Dask: identical to one-by-one runs, resumable, failures recorded, grids parsed."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import tiny, write
from typer.testing import CliRunner

from simdist.cli import app
from simdist.errors import ScenarioError, SimdistError
from simdist.numerics.param_files import save_params
from simdist.sweep import (
    Axis,
    expand_values,
    grid_points,
    load_sweep,
    parse_grid_option,
    point_path,
    prepare,
    run_point,
    run_sweep,
    store_point,
)

runner = CliRunner()

BASE = tiny(
    **{
        "strategy.kind": "parameter_server",
        "cluster.hosts": 2,
        "cluster.ps": 1,
        "workload.steps": 16,
        "workload.eval_every": 8,
    }
)


@pytest.fixture(scope="module")
def client():
    """One local Dask cluster (2 worker processes) for the whole module: it is slow to start."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_grid_values_and_point_names():
    assert expand_values("0..3", "t") == [0, 1, 2, 3]
    assert expand_values("0,2..3,null,1e-3,10Gbit/s", "t") == [0, 2, 3, None, 0.001, "10Gbit/s"]
    assert expand_values("[[16], [32, 8]]", "t") == [[16], [32, 8]]
    assert expand_values([1, "4..5"], "t") == [1, 4, 5]
    with pytest.raises(SimdistError, match="runs backwards"):
        expand_values("4..0", "t")
    axis = parse_grid_option("strategy.staleness_bound=0,1")
    assert axis == Axis("strategy.staleness_bound", (0, 1))
    points = grid_points(
        [axis, Axis("links.network.bandwidth", ("1Gbit/s",)), Axis("seed", (0, 1))]
    )
    assert [p.name for p in points] == [
        "staleness_bound=0,bandwidth=1Gbit_s,seed=0",
        "staleness_bound=0,bandwidth=1Gbit_s,seed=1",
        "staleness_bound=1,bandwidth=1Gbit_s,seed=0",
        "staleness_bound=1,bandwidth=1Gbit_s,seed=1",
    ]
    assert points[1].overrides == (
        "strategy.staleness_bound=0",
        "links.network.bandwidth=1Gbit/s",
        "seed=1",
    )
    same_key = grid_points([Axis("a.hidden", (1,)), Axis("b.hidden", (2,))])
    assert same_key[0].name == "a.hidden=1,b.hidden=2"


def test_sweep_file_and_options(tmp_path):
    write(tmp_path, BASE, "base.yaml")
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "name": "ssp",
                "base": "base.yaml",
                "set": {"workload.steps": 4},
                "grid": {"strategy.staleness_bound": [0, 1], "seed": "0..2"},
                "processes": 3,
            }
        )
    )
    sweep = load_sweep(sweep_file, ["seed=5"], ["workload.eval_every=2"], metric="examples_per_s")
    assert sweep.name == "ssp"
    assert sweep.base == tmp_path / "base.yaml"
    assert [a.path for a in sweep.axes] == ["strategy.staleness_bound", "seed"]
    assert sweep.axes[1].values == (5,)
    assert sweep.fixed == ("workload.steps=4", "workload.eval_every=2")
    assert (sweep.processes, sweep.metric) == (3, "examples_per_s")
    prepared = prepare(sweep)
    assert [p.scenario.workload.steps for p in prepared] == [4, 4]
    assert [p.scenario.strategy.staleness_bound for p in prepared] == [0, 1]
    assert load_sweep(tmp_path / "base.yaml", ["seed=0..1"]).name == "tiny_sweep"


def test_a_bad_grid_path_exits_2_before_anything_runs(tmp_path):
    base = write(tmp_path, BASE)
    result = runner.invoke(
        app, ["sweep", str(base), "--grid", "strategy.stalenes_bound=0,1", "--out", "x"]
    )
    assert result.exit_code == 2
    assert "did you mean 'staleness_bound'" in result.output
    assert not (tmp_path / "x").exists()
    with pytest.raises(ScenarioError, match=r"workload\.batch_size"):
        prepare(load_sweep(base, ["workload.batch_size=-1,0"]))
    result = runner.invoke(app, ["sweep", str(base), "--grid", "seed=3..1"])
    assert result.exit_code == 2
    assert "runs backwards" in result.output
    result = runner.invoke(app, ["sweep", str(base)])
    assert result.exit_code == 2
    assert "no grid" in result.output


def test_sweep_equals_points_run_one_by_one_and_resumes(client, tmp_path):
    base = write(tmp_path, BASE)
    sweep = load_sweep(base, ["strategy.staleness_bound=0,1", "seed=0..1"])
    out = tmp_path / "sweep"
    result = run_sweep(sweep, out, client=client)
    assert (result.ran, result.reused, result.failed) == (4, 0, 0)
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["point"]) == [p.name for p in sweep.points()]
    assert list(table.columns[:5]) == [
        "point",
        "strategy.staleness_bound",
        "seed",
        "status",
        "error",
    ]
    assert {"staleness.mean", "time_split.comm", "final_test_accuracy"} <= set(table.columns)
    assert (table["status"] == "ok").all()
    assert (out / "sweep_final_test_accuracy.png").is_file()

    alone = tmp_path / "alone"
    for p in prepare(sweep):
        store_point(alone, p, run_point(p.scenario))
        swept, single = point_path(out, p.point), point_path(alone, p.point)
        assert swept.read_bytes() == single.read_bytes(), p.point.name
        metrics = ".metrics.csv"
        assert swept.with_suffix(metrics).read_bytes() == single.with_suffix(metrics).read_bytes()
    record = json.loads(point_path(out, sweep.points()[0]).read_text())
    assert record["overrides"] == ["strategy.staleness_bound=0", "seed=0"]
    assert record["status"] == "ok"
    assert record["summary"]["steps"] == 16

    before = (out / "sweep.csv").read_bytes()
    again = run_sweep(sweep, out, client=client)
    assert (again.ran, again.reused) == (0, 4)
    assert (out / "sweep.csv").read_bytes() == before

    wider = load_sweep(base, ["strategy.staleness_bound=0,1", "seed=0..2"])
    more = run_sweep(wider, out, client=client)
    assert (more.ran, more.reused) == (2, 4)
    edited = load_sweep(base, ["strategy.staleness_bound=0", "seed=0"], ["workload.steps=8"])
    assert run_sweep(edited, out, client=client).ran == 1


def test_bad_points_are_recorded_and_the_others_run(client, tmp_path):
    # hidden [32] does not fit the saved [16] parameters: a run-time error in that point;
    # 3 workers cannot share a global batch of 16: an invalid point, found up front.
    params = tmp_path / "init.npz"
    from simdist.runtime.engine import run
    from simdist.scenario import scenario_from_dict

    save_params(params, run(scenario_from_dict(tiny(**{"workload.steps": 1}))).params)
    data = copy.deepcopy(BASE)
    del data["workload"]["batch_size"]
    data["workload"].update(global_batch_size=16, init_from=str(params))
    base = write(tmp_path, data)
    out = tmp_path / "bad"
    result = runner.invoke(
        app,
        [
            "sweep",
            str(base),
            "--grid",
            "cluster.hosts=2,3",
            "--grid",
            "workload.model.hidden=[[16], [32]]",
            "--scheduler",
            client.scheduler.address,
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1, result.output
    # not a terminal: one line per finished point, in place of the progress bar
    assert sum("of 4: hosts=" in line for line in result.output.splitlines()) == 4
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["point"]) == [
        "hosts=2,hidden=16",
        "hosts=2,hidden=32",
        "hosts=3,hidden=16",
        "hosts=3,hidden=32",
    ]
    assert list(table["status"]) == ["ok", "error", "error", "error"]
    assert "does not fit the model" in table["error"][1]
    assert "not divisible by 3 replicas" in table["error"][2]
    assert np.isfinite(table["final_test_accuracy"][0])
    assert "2 run, 0 reused from an earlier run, 3 failed" in result.output


@pytest.mark.parametrize(
    "text, message",
    [
        ("base: a.yaml\ngrid:\n  seed: [0]\ngrid:\n  seed: [1]\n", "found duplicate key 'grid'"),
        ("base: &a [*a]\n", "an alias refers to itself"),
    ],
)
def test_sweep_files_are_read_as_strictly_as_scenarios(tmp_path, text, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["sweep", str(path)])
    assert result.exit_code == 2
    assert message in result.output


def test_a_sweep_file_that_is_not_a_regular_file_is_refused_before_reading():
    result = runner.invoke(app, ["sweep", "/dev/zero"])
    assert result.exit_code == 2
    assert "/dev/zero: is not a regular file" in result.output


def test_huge_grids_and_seed_lists_are_refused_before_any_work():
    """A 10⁶-point grid or seed count used to hang while every point was made and checked."""
    from simdist.errors import SimdistError
    from simdist.scenario.fields import MAX_RUNS
    from simdist.studies.runs import seed_list
    from simdist.sweep.grid import Axis, expand_values, grid_points

    assert MAX_RUNS == 10_000
    with pytest.raises(SimdistError, match=r"range '0\.\.999999' has 1,000,000 values"):
        expand_values("0..999999", "--grid seed")
    axes = [Axis("seed", tuple(range(1000))), Axis("strategy.staleness_bound", tuple(range(100)))]
    with pytest.raises(SimdistError, match=r"1,000 \(seed\) × 100 .* = 100,000 points"):
        grid_points(axes)
    assert len(grid_points([Axis("seed", tuple(range(100))), Axis("x", (1, 2))])) == 200
    with pytest.raises(SimdistError, match=r"seeds: got 1,000,000; .* at most 10,000"):
        seed_list(1_000_000)
    with pytest.raises(SimdistError, match=r"got 10,001 seeds"):
        seed_list(list(range(10_001)))
    result = runner.invoke(app, ["compare", "scenarios/ps_4w2s.yaml", "--seeds", "1000000"])
    assert result.exit_code == 2 and "at most 10,000" in result.output


def test_sweep_plot_ticks_are_the_grid_values_and_whole_counts(tmp_path, monkeypatch):
    """Worker counts 2, 3, 4 drew ticks at 2.5 and 3.5; a count on y got 0.5 steps."""
    from matplotlib.figure import Figure

    from simdist.sweep.grid import Axis
    from simdist.sweep.plot import plot_sweep

    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    axes = [Axis("cluster.hosts", (2, 3, 4)), Axis("seed", (0, 1))]
    table = pd.DataFrame({"status": ["ok"] * 6, "staleness_max": [1, 2, 2, 3, 3, 3]})
    plot_sweep(table, axes, "staleness_max", tmp_path / "s.png", "ps")
    (ax,) = saved[0].axes
    assert list(ax.get_xticks()) == [2, 3, 4]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "3", "4"]
    assert all(float(y).is_integer() for y in ax.get_yticks())
