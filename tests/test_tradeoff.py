"""The trade-off study: its runs, the decomposition T = U / R, the API and the command."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

import simdist
import simdist.api
from simdist.cli import app
from simdist.report.compare import time_to_target
from simdist.tradeoff import (
    STRATEGIES,
    backups_for,
    decompose,
    grid_points,
    tradeoff_runs,
    tradeoff_summary,
)

runner = CliRunner()
# Tiny: enough steps for the digits MLP to pass 50% test accuracy with every strategy.
SMALL = {"sync_steps": 6, "async_steps": 30, "target": 0.5}


def test_runs_cover_strategies_workers_and_severities_in_seed_order():
    assert grid_points([4, 8, 16], [1.0, 4.0]) == [(4, 4.0), (8, 4.0), (16, 4.0), (16, 1.0)]
    runs = tradeoff_runs([0, 1, 2], learning_rate=0.1)
    assert len(runs) == 3 * 4 * len(STRATEGIES)  # the default study: 48 runs
    assert [r.seed for r in runs] == sorted(r.seed for r in runs)
    by_key = {(r.strategy, r.workers, r.severity, r.seed): r.overrides for r in runs}
    backups = by_key[("sync + backups", 16, 4.0, 1)]
    assert "strategy.backup_workers=2" in backups and "strategy.mode=sync" in backups
    assert "cluster.hosts=16" in backups and "seed=1" in backups
    assert "workload.optimizer.learning_rate=1.6" in backups  # linear scaling, 16 x 0.1
    assert "faults.stragglers=[{probability: 0.1, slowdown: 4.0}]" in backups
    ssp = by_key[("SSP", 8, 4.0, 0)]
    assert "strategy.staleness_bound=2" in ssp and "workload.optimizer.learning_rate=0.1" in ssp
    assert "faults.stragglers=[]" in by_key[("async", 16, 1.0, 2)]
    assert [backups_for(n) for n in (2, 8, 16, 100)] == [1, 1, 2, 12]
    with pytest.raises(ValueError, match="severities"):
        tradeoff_runs([0], severities=[0.5])


def test_time_to_target_is_updates_needed_over_update_throughput():
    split = decompose(0.25, 50, 32.0)
    assert split["updates_per_s"] == 200.0 and split["examples_per_s"] == 6400.0
    assert split["updates_to_target"] / split["updates_per_s"] == split["time_to_target_s"]
    unreached = decompose(None, None, 32.0)
    assert math.isnan(unreached["time_to_target_s"]) and math.isnan(unreached["updates_per_s"])
    per_seed = pd.DataFrame(
        [
            {"strategy": "async", "workers": 4, "severity": 2.0, "seed": s, **decompose(*v, 32.0)}
            for s, v in enumerate([(0.2, 40), (0.3, 50), (None, None)])
        ]
    ).assign(final_test_accuracy=[0.9, 0.91, 0.5])
    row = tradeoff_summary(per_seed).iloc[0]
    assert (row["seeds"], row["time_to_target_s_n"]) == (3, 2)
    assert row["updates_to_target_mean"] == 45.0
    assert row["updates_per_s_mean"] == pytest.approx((200.0 + 50 / 0.3) / 2, rel=1e-15)


def test_api_tradeoff_runs_every_strategy_across_seeds(tmp_path):
    found = simdist.api.tradeoff(
        workers=[2], severities=[3.0], seeds=2, parallel=False, out=tmp_path / "t", **SMALL
    )
    assert {p.name for p in (tmp_path / "t").iterdir()} >= {
        "tradeoff.csv",
        "per_seed.csv",
        "tradeoff.md",
        "tradeoff.png",
    }
    assert found.strategies == STRATEGIES
    per_seed, summary = found.per_seed, found.summary
    assert len(per_seed) == 2 * len(STRATEGIES) and len(summary) == len(STRATEGIES)
    assert (summary["seeds"] == 2).all()
    reached = per_seed.dropna(subset=["time_to_target_s"])
    assert len(reached) > 0
    ratio = reached["updates_to_target"] / reached["updates_per_s"]
    pd.testing.assert_series_equal(
        ratio, reached["time_to_target_s"], rtol=1e-12, check_names=False
    )
    sync_updates = per_seed.loc[per_seed["strategy"] == "sync", "examples_per_update"]
    assert (sync_updates == 2 * 32).all()  # one update: both workers' batches
    backups = per_seed.loc[per_seed["strategy"] == "sync + backups", "examples_per_update"]
    assert (backups == 32).all()  # 2 workers, 1 backup: one gradient per step is applied

    # The study runs exactly what it says: one of its runs, by hand.
    again = simdist.run(
        "scenarios/ps_4w2s.yaml",
        overrides=[
            "cluster.worker=null",
            "cluster.hosts=2",
            "faults.stragglers=[{probability: 0.1, slowdown: 3.0}]",
            "workload.steps=30",
            "workload.eval_every=10",
            "seed=1",
            "strategy.staleness_bound=2",
            "cluster.device.compute_time=1ms",
        ],
    )
    row = per_seed[(per_seed["strategy"] == "SSP") & (per_seed["seed"] == 1)].iloc[0]
    reached_at = time_to_target(again.metrics, 0.5)
    assert reached_at is not None
    assert (row["time_to_target_s"], row["updates_to_target"]) == reached_at
    assert found.plot().axes  # draws on a new figure


def test_tradeoff_command_writes_the_figure(tmp_path):
    out = tmp_path / "cli"
    args = ["tradeoff", "--workers", "2,3", "--severity", "2", "--seeds", "0,7", "-q"]
    args += ["--sync-steps", "6", "--async-steps", "30", "--target", "0.5", "--processes", "1"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "reached by" in result.output and (out / "tradeoff.png").is_file()
    table = pd.read_csv(out / "tradeoff.csv")
    assert sorted(set(table["workers"])) == [2, 3] and set(table["severity"]) == {2.0}
    assert sorted(set(pd.read_csv(out / "per_seed.csv")["seed"])) == [0, 7]
    assert "time to 0.5 test accuracy" in (out / "tradeoff.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "4,x"], "--workers"),
        (["--severity", "0.5"], "severities"),
        (["--seeds", "two"], "--seeds"),
        (["scenarios/one_device_digits.yaml"], "parameter_server"),
    ],
)
def test_tradeoff_bad_input_exits_2(tmp_path, args, message):
    result = runner.invoke(app, ["tradeoff", *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()
