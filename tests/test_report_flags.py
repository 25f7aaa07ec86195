"""Reporting flags: ``collapsed`` (finite, but learned nothing) beside ``diverged``, and
``eval_every: 0``, which charges no evaluation at all."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

import simdist
from simdist.cli import app
from simdist.summary import (
    COLLAPSE_ACCURACY_MARGIN,
    COLLAPSE_SHARE,
    TASK_CEILINGS,
    collapse_reason,
)

runner = CliRunner()
THIRTY_TWO_ASYNC = ["cluster.worker=null", "cluster.hosts=32"]  # lr 0.1, 2000 updates


def metrics(losses: list[float], accuracy: float | None) -> pd.DataFrame:
    rows = [
        {"time_s": float(i), "step": i + 1, "metric": "train_loss", "value": v}
        for i, v in enumerate(losses)
    ]
    if accuracy is not None:
        rows.append({"time_s": 99.0, "step": 99, "metric": "test_accuracy", "value": accuracy})
    return pd.DataFrame(rows, columns=["time_s", "step", "metric", "value"])


def test_collapse_reason_by_accuracy_near_chance_or_loss_above_its_start():
    falling = [2.3, 1.0, 0.5, 0.2]
    assert COLLAPSE_ACCURACY_MARGIN == 0.05
    assert collapse_reason(metrics(falling, 0.95), chance=0.1) is None
    assert collapse_reason(metrics(falling, 0.151), chance=0.1) is None
    assert "within 5 points of chance (10.0%)" in collapse_reason(metrics(falling, 0.15), 0.1)
    assert "of chance" in collapse_reason(metrics(falling, 0.02), 0.1)  # below chance too
    # the mean of the last 10 losses against the first: one bad last batch does not count
    assert collapse_reason(metrics([2.3] + [0.5] * 11 + [2.5], 0.9), 0.1) is None
    rising = collapse_reason(metrics([2.3] + [2.4] * 12, 0.9), 0.1)
    assert rising.startswith("the mean train loss of the last 10 steps (2.4)")
    assert collapse_reason(metrics([2.3, 2.4], None), None).startswith("the mean train loss")
    assert collapse_reason(metrics([], None), None) is None


def test_a_run_that_ends_far_below_what_the_task_allows_has_collapsed():
    """Half of the way from chance to one device's accuracy on digits: 10% + 0.5 × 87.49%."""
    falling = [2.3, 1.0, 0.8, 0.7]
    ceiling = TASK_CEILINGS["digits"]
    assert (COLLAPSE_SHARE, ceiling) == (0.5, 0.9749)
    reason = collapse_reason(metrics(falling, 0.17), chance=0.1, ceiling=ceiling)
    assert reason == (
        "final test accuracy 17.0% is below 53.7%, 50% of the way from chance (10.0%) to "
        "what one device reaches on this task (97.5%)"
    )
    assert collapse_reason(metrics(falling, 0.189), 0.1, ceiling) is not None
    assert collapse_reason(metrics(falling, 0.5374), 0.1, ceiling) is not None  # < 0.53745
    assert collapse_reason(metrics(falling, 0.5375), 0.1, ceiling) is None
    # without a measured ceiling (an npz file, the teacher) the margin over chance decides
    assert collapse_reason(metrics(falling, 0.17), chance=0.1) is None


def test_32_async_workers_at_lr_0_1_collapse_and_ps_4w2s_does_not(tmp_path):
    collapsed = simdist.run("scenarios/ps_4w2s.yaml", overrides=THIRTY_TWO_ASYNC)
    s = collapsed.summary
    assert s["diverged"] is False and s["collapsed"] is True
    assert s["final_test_accuracy"] <= 0.1 + COLLAPSE_ACCURACY_MARGIN
    assert (
        "from chance (10.0%) to what one device reaches on this task (97.5%)"
        in (s["collapse_reason"])
    )

    out = tmp_path / "ps"
    healthy = simdist.run("scenarios/ps_4w2s.yaml", out=out)
    assert healthy.summary["collapsed"] is False and healthy.summary["collapse_reason"] is None
    written = json.loads((out / "summary.json").read_text())
    assert written["collapsed"] is False and written["diverged"] is False
    assert "| collapsed | no |" in (out / "report.md").read_text()


def test_collapsed_in_report_md_and_timing_only_runs_never_collapse(tmp_path):
    out = tmp_path / "c"
    simdist.run("scenarios/ps_4w2s.yaml", out=out, overrides=[*THIRTY_TWO_ASYNC, "seed=1"])
    assert "| collapsed | **yes**: final test accuracy" in (out / "report.md").read_text()
    timing = simdist.run("scenarios/ps_4w2s.yaml", overrides=[*THIRTY_TWO_ASYNC, "numerics=false"])
    assert timing.summary["collapsed"] is False


ONE_DEVICE_CHIEF = [  # multi_worker_mirrored on 1 host x 1 device: its chief evaluates
    "numerics=false",
    "cluster.hosts=1",
    "cluster.devices_per_host=1",
    "workload.steps=40",
    "cluster.device.variability=0",  # exact, hand-checkable times
]


def test_eval_every_0_charges_no_evaluation():
    r = simdist.run(
        "scenarios/mwm_2x4_ring.yaml", overrides=[*ONE_DEVICE_CHIEF, "workload.eval_every=0"]
    )
    s = r.summary
    # a step: the compute, then the optimizer step (its "apply" span)
    applies = r.events[r.events["kind"] == "apply"]
    update_s = float((applies["end_s"] - applies["start_s"]).iloc[0])
    assert len(applies) == 40 and update_s > 0
    step_s = s["compute_s_per_replica_step"] + update_s
    assert s["examples_per_s"] == pytest.approx(s["global_batch"] / step_s, rel=1e-12)
    assert s["simulated_time_s"] == pytest.approx(40 * step_s, rel=1e-12)
    assert (r.events["kind"] == "eval").sum() == 0
    # The same run evaluating every 20 steps pays the chief twice: after steps 20 and 40.
    paid = simdist.run(
        "scenarios/mwm_2x4_ring.yaml", overrides=[*ONE_DEVICE_CHIEF, "workload.eval_every=20"]
    ).summary
    assert paid["chief_eval_s"] > 0
    expected = 40 * step_s + 2 * paid["chief_eval_s"]
    assert paid["simulated_time_s"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("scenario", ["scenarios/one_device_digits.yaml", "scenarios/ps_4w2s.yaml"])
def test_eval_every_0_still_reports_the_final_accuracy_at_no_cost(scenario):
    overrides = ["workload.steps=30", "workload.eval_every=0"]
    r = simdist.run(scenario, overrides=overrides)
    accuracy = r.metrics[r.metrics["metric"] == "test_accuracy"]
    assert accuracy["step"].tolist() == [30]
    assert accuracy["time_s"].iloc[0] == r.summary["simulated_time_s"]
    assert r.summary["final_test_accuracy"] == accuracy["value"].iloc[0]
    timing = simdist.run(scenario, overrides=[*overrides, "numerics=false"]).summary
    assert r.summary["simulated_time_s"] == timing["simulated_time_s"]


def test_compare_with_seeds_on_the_command_line(tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", "scenarios/one_device_digits.yaml", "scenarios/ps_4w2s.yaml"]
    args += ["--set", "workload.steps=40", "--set", "workload.eval_every=10", "--seeds", "2"]
    result = runner.invoke(app, [*args, "--target", "0.6", "--processes", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} >= {"compare.csv", "per_seed.csv", "compare.md"}
    per_seed = pd.read_csv(out / "per_seed.csv")
    assert per_seed["run"].tolist() == ["one_device_digits"] * 2 + ["ps_4w2s"] * 2
    assert per_seed["seed"].tolist() == [0, 1, 0, 1]
    table = pd.read_csv(out / "compare.csv")
    assert table["seeds"].tolist() == [2, 2]
    for row in table.itertuples(index=False):
        runs = per_seed[per_seed["run"] == row.run]
        assert row.time_to_target_s_n == runs["time_to_target_s"].notna().sum()
        assert row.final_test_accuracy_mean == pytest.approx(runs["final_test_accuracy"].mean())
        assert row.examples_per_s_min == runs["examples_per_s"].min()
    text = (out / "compare.md").read_text()
    assert "reached by" in text and "95% confidence interval" in text
    bad = runner.invoke(app, ["compare", "scenarios/ps_4w2s.yaml", "--seeds", "0,0"])
    assert bad.exit_code == 2 and "distinct" in bad.output
