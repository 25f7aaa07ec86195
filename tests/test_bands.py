"""Results across seeds: the aggregation (means, min–max, t intervals, "reached by k of N"),
the curve bands, compare's per-seed and summary tables, and the band plot."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from simdist.bands import aggregate, curve_band, reached_text, t_critical
from simdist.errors import SimdistError
from simdist.report.bands import accuracy_bands
from simdist.report.compare import band_text, seed_table, seeds_markdown, seeds_summary

# Two-sided 95% critical values of Student's t (scipy.stats.t.ppf(0.975, df)).
T95 = {1: 12.706204736174694, 2: 4.302652729749462, 3: 3.1824463052837078, 9: 2.262157162798205}


@pytest.mark.parametrize("df", sorted(T95))
def test_t_critical_matches_the_t_table(df):
    assert t_critical(df) == pytest.approx(T95[df], rel=1e-12)


def test_t_critical_tends_to_the_normal_and_refuses_bad_input():
    assert t_critical(10_000) == pytest.approx(1.960201239890626, rel=1e-12)  # normal: 1.95996
    assert t_critical(30, 0.99) == pytest.approx(2.749995653567969, rel=1e-12)
    with pytest.raises(ValueError, match="df"):
        t_critical(0)
    with pytest.raises(ValueError, match="confidence"):
        t_critical(3, 1.5)


def per_seed_table() -> pd.DataFrame:
    """Hand-made: sync reached the target with all 3 seeds, async with 2 of 3."""
    return pd.DataFrame(
        {
            "run": ["sync"] * 3 + ["async"] * 3,
            "seed": [0, 1, 2, 0, 1, 2],
            "time_to_target_s": [0.040, 0.077, 0.065, 0.063, math.nan, 0.088],
            "final_test_accuracy": [0.95, 0.96, 0.97, 0.90, 0.10, 0.92],
            "examples_per_s": [1000.0, 1000.0, 1000.0, 3000.0, 2800.0, 3200.0],
            "collapsed": [False, False, False, False, True, False],
            "source": ["a.yaml"] * 6,
        }
    )


def test_aggregate_means_bands_intervals_and_reached_counts():
    table = aggregate(per_seed_table(), by=["run"])
    assert table["run"].tolist() == ["sync", "async"]  # the order of first appearance
    assert table["seeds"].tolist() == [3, 3]
    sync, asyn = table.iloc[0], table.iloc[1]

    assert sync["time_to_target_s_mean"] == pytest.approx((0.040 + 0.077 + 0.065) / 3, rel=1e-15)
    assert (sync["time_to_target_s_min"], sync["time_to_target_s_max"]) == (0.040, 0.077)
    sd = np.std([0.040, 0.077, 0.065], ddof=1)
    assert sync["time_to_target_s_ci95"] == pytest.approx(T95[2] * sd / math.sqrt(3), rel=1e-12)
    assert sync["time_to_target_s_n"] == 3

    # async: the seed that never reached the target counts in "seeds", not in the time
    assert asyn["time_to_target_s_n"] == 2
    assert reached_text(asyn["time_to_target_s_n"], asyn["seeds"]) == "reached by 2 of 3"
    assert asyn["time_to_target_s_mean"] == pytest.approx((0.063 + 0.088) / 2, rel=1e-15)
    sd2 = np.std([0.063, 0.088], ddof=1)
    assert asyn["time_to_target_s_ci95"] == pytest.approx(T95[1] * sd2 / math.sqrt(2), rel=1e-12)
    assert asyn["final_test_accuracy_mean"] == pytest.approx((0.90 + 0.10 + 0.92) / 3, rel=1e-15)
    assert (asyn["final_test_accuracy_min"], asyn["final_test_accuracy_max"]) == (0.10, 0.92)
    assert asyn["examples_per_s_mean"] == pytest.approx(3000.0, rel=1e-15)
    assert sync["examples_per_s_ci95"] == 0.0  # identical seeds: no spread
    assert (sync["collapsed_count"], asyn["collapsed_count"]) == (0, 1)
    assert "seed_mean" not in table.columns and "source" not in table.columns


def test_aggregate_with_one_seed_or_none_reached():
    one = aggregate(per_seed_table().iloc[[3]], by=["run"]).iloc[0]
    assert one["time_to_target_s_mean"] == 0.063 and math.isnan(one["time_to_target_s_ci95"])
    never = per_seed_table().assign(time_to_target_s=math.nan)
    row = aggregate(never, by=["run"]).iloc[0]
    assert row["time_to_target_s_n"] == 0 and math.isnan(row["time_to_target_s_mean"])
    with pytest.raises(KeyError, match="workers"):
        aggregate(per_seed_table(), by=["workers"])


def test_curve_band_reads_each_seed_between_and_after_its_evaluations():
    curves = [
        (np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.5, 0.9])),
        (np.array([1.5, 2.5]), np.array([0.2, 0.6])),
    ]
    band = curve_band(curves)
    assert band["time_s"].tolist() == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert band["n"].tolist() == [1, 2, 2, 2, 2]  # the second seed starts at 1.5
    np.testing.assert_allclose(band["mean"], [0.1, 0.25, 0.45, 0.65, 0.75], rtol=1e-12)
    np.testing.assert_allclose(band["min"], [0.1, 0.2, 0.4, 0.6, 0.6], rtol=1e-12)
    np.testing.assert_allclose(band["max"], [0.1, 0.3, 0.5, 0.7, 0.9], rtol=1e-12)
    before = curve_band(curves, grid=np.array([0.5]))
    assert before["n"].tolist() == [0] and math.isnan(before["mean"].iloc[0])


def fake_result(
    name: str,
    seed: int,
    times: list[float],
    accuracies: list[float],
    rate: float,
    staleness: float = 0.0,
    mode: str = "sync",
):
    """A hand-made parameter-server Result: evaluations every 10 steps at ``times``."""
    steps = [10 * (i + 1) for i in range(len(times))]
    metrics = pd.DataFrame(
        {
            "time_s": times,
            "step": steps,
            "metric": ["test_accuracy"] * len(times),
            "value": accuracies,
        }
    )
    events = pd.DataFrame({"start_s": [], "end_s": [], "device": [], "kind": []})
    summary = {
        "name": name,
        "strategy": "parameter_server",
        "seed": seed,
        "steps": steps[-1],
        "simulated_time_s": times[-1],
        "final_test_accuracy": accuracies[-1],
        "examples_per_s": rate,
        "time_split": {"compute": 0.5, "comm": 0.25, "waiting": 0.0, "idle": 0.25},
        "diverged": False,
        "collapsed": accuracies[-1] < 0.15,
        "mode": mode,
        "staleness": {"mean": staleness, "max": staleness},
    }
    scenario = SimpleNamespace(name=name, seed=seed, strategy=SimpleNamespace(kind="x"))
    return SimpleNamespace(summary=summary, metrics=metrics, events=events, scenario=scenario)


def hand_made_results() -> dict[str, list]:
    return {
        "sync": [
            fake_result("s", 0, [0.01, 0.02, 0.03], [0.5, 0.92, 0.95], 100.0),
            fake_result("s", 1, [0.01, 0.02, 0.03], [0.6, 0.85, 0.91], 110.0),
            fake_result("s", 2, [0.012, 0.024, 0.036], [0.4, 0.80, 0.93], 90.0),
        ],
        "async": [
            fake_result("a", 0, [0.005, 0.01, 0.015], [0.7, 0.93, 0.94], 300.0, 2.0, "async"),
            fake_result("a", 1, [0.005, 0.01, 0.015], [0.3, 0.20, 0.12], 300.0, 2.5, "async"),
            fake_result("a", 2, [0.006, 0.012, 0.018], [0.8, 0.88, 0.89], 250.0, 3.0, "async"),
        ],
    }


def test_compare_tables_across_seeds_from_hand_made_results():
    per_seed = seed_table(hand_made_results(), target=0.9, sources={"sync": "s.yaml"})
    assert per_seed["run"].tolist() == ["sync"] * 3 + ["async"] * 3
    assert per_seed["seed"].tolist() == [0, 1, 2, 0, 1, 2]
    assert per_seed["source"].tolist() == ["s.yaml"] * 3 + [""] * 3
    # first evaluation at or above 0.9: sync seeds at 0.02, 0.03, 0.036; async seed 0 only
    assert per_seed["time_to_target_s"].tolist()[:4] == [0.02, 0.03, 0.036, 0.01]
    assert per_seed["time_to_target_s"].iloc[4:].isna().all()
    assert per_seed["step_to_target"].tolist()[:4] == [20, 30, 30, 20]

    summary = seeds_summary(per_seed)
    sync, asyn = summary.iloc[0], summary.iloc[1]
    assert (sync["seeds"], sync["time_to_target_s_n"]) == (3, 3)
    assert (asyn["seeds"], asyn["time_to_target_s_n"]) == (3, 1)
    assert sync["time_to_target_s_mean"] == pytest.approx((0.02 + 0.03 + 0.036) / 3, rel=1e-15)
    assert sync["final_test_accuracy_mean"] == pytest.approx((0.95 + 0.91 + 0.93) / 3, rel=1e-7)
    assert (sync["examples_per_s_min"], sync["examples_per_s_max"]) == (90.0, 110.0)
    assert asyn["collapsed_count"] == 1 and asyn["diverged_count"] == 0

    assert band_text(sync, "examples_per_s", "{:.0f}".format, interval=False) == "100 (90–110)"
    ci = T95[2] * np.std([100.0, 110.0, 90.0], ddof=1) / math.sqrt(3)
    assert band_text(sync, "examples_per_s", "{:.1f}".format) == f"100.0 (90.0–110.0) ±{ci:.1f}"
    assert band_text(asyn, "time_to_target_s", "{:.3f}".format) == "0.010"  # one seed
    text = seeds_markdown(summary, 0.9, "plot.png")
    assert "reached by 3 of 3" in text and "reached by 1 of 3" in text
    assert "Student's t" in text and "![" in text
    # the communication share and the staleness (none for sync: "—", not 0.00)
    assert per_seed["staleness_mean"].iloc[:3].isna().all()
    assert per_seed["staleness_mean"].iloc[3:].tolist() == [2.0, 2.5, 3.0]
    header, _, sync_row, async_row = (line for line in text.splitlines() if line.startswith("| "))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert columns[6:9] == ["examples/s", "communication", "mean staleness"]
    sync_cells = [cell.strip() for cell in sync_row.strip("|").split("|")]
    async_cells = [cell.strip() for cell in async_row.strip("|").split("|")]
    assert (sync_cells[7], sync_cells[8]) == ("25.0% (every seed)", "—")
    ci = T95[2] * np.std([2.0, 2.5, 3.0], ddof=1) / math.sqrt(3)
    assert async_cells[8] == f"2.50 (2.00–3.00) ±{ci:.2f}"


def test_accuracy_bands_draws_a_mean_line_and_a_band_per_label():
    ax = Figure().subplots()
    bands = accuracy_bands(ax, hand_made_results(), target=0.9)
    assert list(bands) == ["sync", "async"]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["sync (mean of 3 seeds)", "async (mean of 3 seeds)", "target 0.9"]
    assert len(ax.collections) == 2  # one min–max band each
    sync = bands["sync"]
    full = sync[sync["n"] == 3]
    assert full["time_s"].iloc[0] == 0.012  # from the latest first evaluation on
    # at t = 0.03 the third seed is read between its evaluations at 0.024 and 0.036
    at = sync[sync["time_s"] == 0.03].iloc[0]
    third = 0.80 + (0.93 - 0.80) * (0.03 - 0.024) / 0.012
    assert at["mean"] == pytest.approx((0.95 + 0.91 + third) / 3, rel=1e-12)
    assert (at["min"], at["max"]) == (pytest.approx(third, rel=1e-12), 0.95)
    x, _ = ax.get_lines()[0].get_data()
    assert x[0] == pytest.approx(12.0)  # ms


def test_the_aggregation_imports_neither_jax_nor_simpy_nor_matplotlib():
    import subprocess
    import sys

    code = (
        "import sys, simdist.bands, simdist.studies.tradeoff; "
        "print(sorted(m for m in ('jax', 'simpy', 'matplotlib', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_seeds_gives_one_result_per_seed_the_same_on_dask():
    import simdist.api

    overrides = ["workload.steps=50", "workload.eval_every=10"]
    serial = simdist.api.run_seeds("scenarios/ps_4w2s.yaml", [0, 3], overrides, parallel=False)
    assert [r.scenario.seed for r in serial] == [0, 3]
    assert serial[0].summary["final_test_accuracy"] != serial[1].summary["final_test_accuracy"]
    on_dask = simdist.api.run_seeds(
        "scenarios/ps_4w2s.yaml", [0, 3], overrides, parallel=True, processes=2
    )
    for a, b in zip(on_dask, serial, strict=True):
        pd.testing.assert_frame_equal(a.metrics, b.metrics)
        pd.testing.assert_frame_equal(a.events, b.events)
        assert a.summary == b.summary
    timing = simdist.api.run_seeds("scenarios/ps_4w2s.yaml", 2, overrides, timing_only=True)
    assert [r.summary["numerics"] for r in timing] == [False, False]
    assert [r.scenario.seed for r in timing] == [0, 1]
    with pytest.raises(SimdistError, match="seeds"):
        simdist.api.run_seeds("scenarios/ps_4w2s.yaml", 0)


def test_plain_compare_gives_sync_parameter_servers_no_staleness():
    """A ``mode: sync`` parameter server's summary holds staleness 0 for every gradient;
    compare.md's footnote says synchronous runs have none, so its cell is "—", not 0.00."""
    from simdist.report.compare import compare_markdown, compare_table

    results = [
        fake_result("sync", 0, [0.01, 0.02], [0.5, 0.95], 100.0, 0.0, "sync"),
        fake_result("async", 0, [0.01, 0.02], [0.5, 0.95], 100.0, 2.25, "async"),
    ]
    table = compare_table(results, target=0.9)
    assert math.isnan(table["staleness_mean"].iloc[0]) and table["staleness_mean"].iloc[1] == 2.25
    rows = [line for line in compare_markdown(table, 0.9, None).splitlines() if "| 25.0% |" in line]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == ["—", "2.25"]
