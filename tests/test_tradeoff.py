"""The trade-off study: its runs, the decomposition T = U / R, the API and the command."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

import simdist
import simdist.api
from simdist.bands import band_separations
from simdist.cli import app
from simdist.report.tradeoff import separation_lines
from simdist.studies.tradeoff import (
    STRATEGIES,
    TradeoffRun,
    backups_for,
    crossing,
    decompose,
    gradients_per_update,
    grid_points,
    run_row,
    tradeoff_runs,
    tradeoff_summary,
)

runner = CliRunner()
# Tiny: enough steps for the digits MLP to pass 50% test accuracy with every strategy.
SMALL = {"sync_steps": 6, "async_steps": 30, "target": 0.5}


def test_runs_cover_the_full_grid_of_strategies_workers_and_severities_in_seed_order():
    assert grid_points([4, 8], [1.0, 4.0]) == [(4, 1.0), (4, 4.0), (8, 1.0), (8, 4.0)]
    small = tradeoff_runs([0, 1, 2], workers=[4, 8], severities=[1.0, 4.0])
    assert len(small) == 4 * len(STRATEGIES) * 3  # every cell, strategy and seed: 48 runs
    assert {(r.strategy, r.workers, r.severity, r.seed) for r in small} == {
        (strategy, n, s, seed)
        for strategy in STRATEGIES
        for n in (4, 8)
        for s in (1.0, 4.0)
        for seed in (0, 1, 2)
    }
    runs = tradeoff_runs([0, 1, 2], learning_rate=0.1)
    assert len(runs) == 3 * 2 * len(STRATEGIES) * 3  # the default study: 72 runs
    assert len({(r.strategy, r.workers, r.severity, r.seed) for r in runs}) == len(runs)
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
    assert "faults.stragglers=[]" in by_key[("sync", 4, 1.0, 0)]  # off the old cross design
    assert "strategy.backup_workers=1" in by_key[("sync + backups", 4, 1.0, 0)]
    assert [backups_for(n) for n in (2, 8, 16, 100)] == [1, 1, 2, 12]
    with pytest.raises(ValueError, match="severities"):
        tradeoff_runs([0], severities=[0.5])


def test_time_to_target_is_updates_needed_over_update_throughput():
    split = decompose(0.25, 50, 32.0, 1)
    assert split["updates_per_s"] == 200.0 and split["examples_per_s"] == 6400.0
    assert split["updates_to_target"] / split["updates_per_s"] == split["time_to_target_s"]
    assert (split["gradients_to_target"], split["gradients_per_s"]) == (50.0, 200.0)
    unreached = decompose(None, None, 32.0, 7)
    assert math.isnan(unreached["time_to_target_s"]) and math.isnan(unreached["updates_per_s"])
    assert math.isnan(unreached["gradients_to_target"]) and math.isnan(unreached["gradients_per_s"])
    assert unreached["gradients_per_update"] == 7.0
    per_seed = pd.DataFrame(
        [
            {
                "strategy": "async",
                "workers": 4,
                "severity": 2.0,
                "seed": s,
                **decompose(*v, 32.0, 1),
            }
            for s, v in enumerate([(0.2, 40), (0.3, 50), (None, None)])
        ]
    ).assign(final_test_accuracy=[0.9, 0.91, 0.5])
    row = tradeoff_summary(per_seed).iloc[0]
    assert (row["seeds"], row["time_to_target_s_n"]) == (3, 2)
    assert row["updates_to_target_mean"] == 45.0
    assert row["updates_per_s_mean"] == pytest.approx((200.0 + 50 / 0.3) / 2, rel=1e-15)
    assert (row["gradients_to_target_mean"], row["gradients_to_target_n"]) == (45.0, 2)
    for stat in ("mean", "min", "max", "ci95", "n"):
        assert f"gradients_per_s_{stat}" in row.index


def test_gradients_are_updates_times_gradients_per_update_from_the_run_definition():
    assert [gradients_per_update("sync", n) for n in (2, 4, 16)] == [2, 4, 16]
    assert [gradients_per_update("sync + backups", n) for n in (2, 4, 16)] == [1, 3, 14]
    assert {gradients_per_update(s, 16) for s in ("SSP", "async")} == {1}
    with pytest.raises(ValueError, match="strategy"):
        gradients_per_update("allreduce", 4)
    summary = {"steps": 80, "examples": 80 * 14 * 32, "final_test_accuracy": 0.95,
               "simulated_time_s": 0.2}  # fmt: skip
    row = run_row(TradeoffRun("sync + backups", 16, 4.0, 0, ()), summary, (0.1, 20.5))
    assert (row["gradients_per_update"], row["gradients_to_target"]) == (14.0, 20.5 * 14)
    assert row["gradients_per_s"] == pytest.approx(20.5 / 0.1 * 14, rel=1e-15)
    assert row["examples_per_update"] == 14 * 32 and row["simulated_time_s"] == 0.2
    sync = run_row(TradeoffRun("sync", 16, 4.0, 0, ()), summary, (0.1, 20.5))
    assert sync["gradients_to_target"] == 20.5 * 16
    slow = run_row(TradeoffRun("async", 16, 4.0, 0, ()), summary, None)
    assert slow["gradients_per_update"] == 1.0 and math.isnan(slow["gradients_to_target"])


def _evals(*points: tuple[float, int, float]) -> pd.DataFrame:
    """A tidy metrics frame with test accuracy at (time_s, step, accuracy), and noise rows."""
    rows = [{"time_s": t, "step": u, "metric": "test_accuracy", "value": a} for t, u, a in points]
    rows += [{"time_s": t, "step": u, "metric": "train_loss", "value": 0.99} for t, u, _ in points]
    return pd.DataFrame(rows, columns=["time_s", "step", "metric", "value"])


def test_time_to_target_is_interpolated_between_the_evaluations_around_the_target():
    # (t=1.0, 0.4) and (t=2.0, 0.8), target 0.5: a quarter of the way, t* = 1.25.
    metrics = _evals((0.5, 5, 0.2), (1.0, 10, 0.4), (2.0, 20, 0.8), (3.0, 30, 0.3))
    assert crossing(metrics, 0.5) == pytest.approx((1.25, 12.5), rel=1e-12)
    assert crossing(metrics, 0.8) == (2.0, 20.0)  # exactly at an evaluation
    assert crossing(metrics, 0.3) == pytest.approx((0.75, 7.5), rel=1e-12)
    assert crossing(metrics, 0.9) is None
    # The first evaluation already at the target: nothing below to interpolate from.
    assert crossing(_evals((0.004, 2, 0.93), (0.008, 4, 0.97)), 0.9) == (0.004, 2.0)
    assert crossing(_evals(), 0.5) is None  # timing-only runs evaluate nothing
    # Equal true crossings read equal times, however coarse the evaluations.
    fine = _evals(*[(k / 10, k, k / 20) for k in range(1, 21)])  # acc = t / 2
    coarse = _evals((0.5, 5, 0.25), (1.5, 15, 0.75))
    assert crossing(fine, 0.6) == pytest.approx((1.2, 12.0), rel=1e-12)
    assert crossing(coarse, 0.6) == pytest.approx((1.2, 12.0), rel=1e-12)


def _seed_rows(cell: tuple[int, float], times: dict[str, list[float]]) -> list[dict]:
    return [
        {
            "strategy": s,
            "workers": cell[0],
            "severity": cell[1],
            "seed": i,
            "time_to_target_s": t,
            "simulated_time_s": 0.5,
        }
        for s, seeds in times.items()
        for i, t in enumerate(seeds)
    ]


def test_band_separations_name_the_fastest_and_which_bands_overlap_it():
    nan = math.nan
    per_seed = pd.DataFrame(
        _seed_rows(
            (4, 4.0),
            {
                "sync": [0.10, 0.12, 0.11],  # band 0.10–0.12, apart from async's
                "sync + backups": [0.06, 0.09, 0.08],  # 0.06–0.09 touches 0.06: overlap
                "SSP": [nan, 0.05, 0.055],  # 2 of 3: band 0.05–∞, overlaps
                "async": [0.04, 0.05, 0.06],  # fastest: mean 0.05
            },
        )
        + _seed_rows((8, 1.0), {"sync": [nan, 0.2, 0.3], "async": [nan, nan, nan]})
        + _seed_rows((16, 1.0), {"sync": [0.1, 0.1, 0.1], "async": [nan, nan, nan]})
    )
    bands = band_separations(per_seed)
    first = bands[bands["workers"] == 4].set_index("strategy")
    assert set(first["fastest"]) == {"async"}
    assert first.loc["async", "mean_s"] == pytest.approx(0.05, rel=1e-15)
    assert (first.loc["async", "low_s"], first.loc["async", "high_s"]) == (0.04, 0.06)
    assert first.loc["async", "overlaps"] is None
    assert first.loc["sync", "overlaps"] is False
    assert first.loc["sync + backups", "overlaps"] is True  # touching counts
    assert (first.loc["SSP", "reached"], first.loc["SSP", "high_s"]) == (2, math.inf)
    assert first.loc["SSP", "low_s"] == 0.05 and first.loc["SSP", "overlaps"] is True
    second = bands[bands["workers"] == 8]
    assert second["fastest"].isna().all() and second["overlaps"].isna().all()
    third = bands[bands["workers"] == 16].set_index("strategy")
    # Never reached within its 0.5 s: slower than sync's every seed (0.1 s).
    assert third.loc["async", "low_s"] == 0.5 and third.loc["async", "overlaps"] is False

    lines = dict(separation_lines(bands))
    heading = "4 workers, slowdown ×4: fastest async, 50 ms (40 ms–60 ms)"
    assert [h for h in lines if h.startswith("4 workers")] == [heading]
    said = " / ".join(lines[heading])
    assert "sync: 110 ms (100 ms–120 ms); slower with every seed" in said
    assert "sync + backups: 76.7 ms (60 ms–90 ms); bands overlap: cannot be told apart " in said
    assert "with 3 seeds" in said and "SSP: reached by 2 of 3" in said
    assert any("no strategy reached the target with every seed" in h for h in lines)


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
    # Work in gradients: 2 per sync update, 1 with a backup (2 - 1) and 1 per async update.
    expected = {"sync": 2.0, "sync + backups": 1.0, "SSP": 1.0, "async": 1.0}
    assert (per_seed["gradients_per_update"] == per_seed["strategy"].map(expected)).all()
    pd.testing.assert_series_equal(
        reached["gradients_to_target"],
        reached["updates_to_target"] * reached["gradients_per_update"],
        check_names=False,
    )
    pd.testing.assert_series_equal(
        reached["gradients_per_s"],
        reached["updates_per_s"] * reached["gradients_per_update"],
        rtol=1e-12,
        check_names=False,
    )
    assert {"gradients_to_target_mean", "gradients_to_target_n"} <= set(summary.columns)
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
    reached_at = crossing(again.metrics, 0.5)
    assert reached_at is not None
    assert (row["time_to_target_s"], row["updates_to_target"]) == reached_at
    # Interpolated: between the evaluations around the target, not at the one after it.
    evals = again.metrics[again.metrics["metric"] == "test_accuracy"]
    after = evals[evals["value"] >= 0.5].iloc[0]
    assert row["time_to_target_s"] <= after["time_s"] and row["updates_to_target"] <= after["step"]
    md = (tmp_path / "t" / "tradeoff.md").read_text()
    assert "interpolated" in md and "gradients needed" in md and "fastest" in md.lower()
    assert found.plot().axes  # draws on a new figure


def test_tradeoff_command_runs_the_full_grid_and_writes_the_figure(tmp_path):
    out = tmp_path / "cli"
    args = ["tradeoff", "--workers", "2,3", "--severity", "1,2", "--seeds", "0,7"]
    args += ["--sync-steps", "6", "--async-steps", "30", "--target", "0.5", "--processes", "1"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "reached by" in result.output and (out / "tradeoff.png").is_file()
    assert "fastest" in result.output and "gradients" in result.output
    started = [line for line in result.output.splitlines() if line.startswith("simulating ")]
    assert len(started) == 32 and started[-1].endswith("(run 32 of 32) …")
    assert "simulating sync, 2 workers, slowdown ×1, seed 0 (run 1 of 32) …" in started
    table = pd.read_csv(out / "tradeoff.csv")
    cells = set(zip(table["workers"], table["severity"], strict=True))
    assert cells == {(2, 1.0), (2, 2.0), (3, 1.0), (3, 2.0)}  # every pair, not a cross
    assert len(table) == 4 * len(STRATEGIES)
    per_seed = pd.read_csv(out / "per_seed.csv")
    assert len(per_seed) == 4 * len(STRATEGIES) * 2  # cells x strategies x seeds
    assert sorted(set(per_seed["seed"])) == [0, 7]
    md = (out / "tradeoff.md").read_text()
    assert "time to 0.5 test accuracy" in md and "4 (workers, slowdown) cells" in md
    assert md.count("slowdown ×") >= 4  # one line per cell on which is fastest


def test_tradeoff_help_says_full_grid_runs_and_interpolation():
    result = runner.invoke(app, ["tradeoff", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "full grid" in text and "72 runs" in text and "interpolated" in text


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


# ---------------------------------------------------------------- the variants' figure


@pytest.mark.parametrize(
    ("flags", "added"),
    [
        ([], []),
        (["--compression", "fp16,topk:0.01:noef"],
         ["all-reduce + fp16", "all-reduce + topk:0.01:noef"]),
        (["--local-sgd", "2"], ["local SGD H=2"]),
        (["--compression", "powersgd:2", "--local-sgd", "2,4"],
         ["all-reduce + powersgd:2", "local SGD H=2", "local SGD H=4"]),
    ],
)  # fmt: skip
def test_every_variant_flag_combination_draws_its_figure(tmp_path, flags, added):
    # A few steps each: a strategy that misses the target is said on the figure, not drawn.
    out = tmp_path / "t"
    args = ["tradeoff", "--workers", "2", "--severity", "1", "--seeds", "1", "--target", "0.5"]
    args += ["--sync-steps", "3", "--async-steps", "8", "--processes", "1", "-q"]
    result = runner.invoke(app, [*args, *flags, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and (out / "tradeoff.png").stat().st_size > 0
    assert list(pd.read_csv(out / "tradeoff.csv")["strategy"]) == [*STRATEGIES, *added]


def _summary(times: list[float]) -> pd.DataFrame:
    """A one-cell summary of the four strategies whose times to target are ``times``."""
    rows = []
    for strategy, time in zip(STRATEGIES, times, strict=True):
        row = {"strategy": strategy, "workers": 4, "severity": 1.0, "seeds": 2}
        for column in ("time_to_target_s", "updates_per_s", "updates_to_target"):
            value = time if column != "updates_per_s" else 100.0
            row |= {f"{column}_{k}": value for k in ("mean", "min", "max")}
        row |= {f"gradients_to_target_{k}": 0.0 for k in ("mean", "min", "max")}
        row |= {"time_to_target_s_n": 0 if time != time else 2}
        rows.append(row)
    return pd.DataFrame(rows)


def test_zero_or_missing_values_are_said_on_the_log_axes_not_drawn():
    from matplotlib.figure import Figure

    from simdist.report.tradeoff import draw_tradeoff

    fig = Figure()
    # sync and SSP reached by no seed; sync + backups' gradients needed are zero
    layout = draw_tradeoff(fig, _summary([math.nan, 0.02, math.nan, 0.03]), 0.9, STRATEGIES)
    fig.canvas.draw()  # a log axis without positive data failed here
    kinds = layout.points.groupby(["row", "strategy"])["kind"].first().unstack()
    assert kinds.loc[0].to_dict() == {
        "sync": "unreached",
        "sync + backups": "point",
        "SSP": "unreached",
        "async": "point",
    }
    said = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    time_panel = said[0]
    assert sorted(time_panel) == ["0/2: did not reach"] * 2 + ["2/2"] * 2
    assert all(ax.get_yscale() == "log" for ax in fig.axes)
    # the unreached strategies are a × at the top of every row's panel, in their colours
    for ax in fig.axes:
        crosses = [line for line in ax.lines if line.get_marker() == "x"]
        assert sorted(line.get_color() for line in crosses) == ["C0", "C2"]


def test_the_figure_labels_every_point_with_its_seeds_and_has_a_colour_per_strategy():
    """The default grid's shape: x = workers (3 values), a panel per severity (2), three
    rows; every point of the time row says k/N; no translucent band mixes colours."""
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    from simdist.report.tradeoff import ROWS, draw_tradeoff, figure_size, tradeoff_layout

    cells = [(n, s) for n in (4, 8, 16) for s in (1.0, 4.0)]
    rows = []
    for cell in cells:
        times = {
            "sync": [0.05, 0.06, 0.07],
            "sync + backups": [0.05, math.nan, 0.06],
            "SSP": [0.04, 0.05, 0.05],
            "async": [math.nan] * 3 if cell == (16, 1.0) else [0.03, 0.04, 0.05],
        }
        rows += _seed_rows(cell, times)
    per_seed = pd.DataFrame(rows)
    per_seed["updates_per_s"] = 1000.0 + per_seed["time_to_target_s"] * 0  # NaN unreached
    per_seed["updates_to_target"] = per_seed["time_to_target_s"] * 1000.0
    summary = tradeoff_summary(per_seed)
    layout = tradeoff_layout(summary, STRATEGIES)
    assert (layout.x, layout.panel_by, layout.panels) == ("workers", "severity", [1.0, 4.0])
    assert layout.titles == ["slowdown ×1 (no stragglers)", "slowdown ×4"]
    assert layout.legend == [(s, f"C{i}") for i, s in enumerate(STRATEGIES)]
    time_row = layout.points[layout.points["row"] == 0]
    assert len(time_row) == len(cells) * len(STRATEGIES)  # every cell of every strategy
    labels = time_row.set_index(["strategy", "x", "panel"])["label"]
    assert set(labels.xs("sync + backups")) == {"2/3"} and set(labels.xs("sync")) == {"3/3"}
    assert labels[("async", 16, 0)] == "0/3"
    missing = layout.points[layout.points["kind"] == "unreached"]
    assert set(zip(missing["strategy"], missing["x"], missing["panel"], strict=True)) == {
        ("async", 16, 0)
    }
    assert sorted(missing["row"]) == list(range(len(ROWS)))  # marked on every row
    # the strategies at one x sit apart, in legend order
    at4 = time_row[(time_row["x"] == 4) & (time_row["panel"] == 0)]
    assert list(at4["x_drawn"]) == sorted(at4["x_drawn"]) and at4["x_drawn"].nunique() == 4
    fig = Figure(figsize=figure_size(summary), layout="constrained")
    draw_tradeoff(fig, summary, 0.9, STRATEGIES)
    assert len(fig.axes) == len(ROWS) * 2
    assert not any(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("0/3: did not reach") == 1 and texts.count("2/3") == 3
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == list(STRATEGIES)
    drawn = {line.get_color() for ax in fig.axes for line in ax.lines}
    assert drawn == {f"C{i}" for i in range(len(STRATEGIES))}  # no colour without a legend
