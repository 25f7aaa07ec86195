"""Whole runs through the engine: simulated times, numerics, determinism."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_trees_close, tiny, write

from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict

# mlp 64-16-10 in float32: (64*16 + 16 + 16*10 + 10) * 4 bytes
MLP16_BYTES = (64 * 16 + 16 + 16 * 10 + 10) * 4


def test_one_device_step_time_is_the_fixed_compute_time():
    result = run(scenario_from_dict(tiny()))
    assert result.summary["simulated_time_s"] == pytest.approx(12 * 1e-3, rel=1e-12)
    assert result.summary["steps"] == 12
    assert result.summary["param_bytes"] == MLP16_BYTES
    assert result.summary["time_split"]["compute"] == pytest.approx(1.0)


def test_mirrored_step_is_compute_plus_ring_allreduce():
    n, alpha, bandwidth = 4, 10e-6, 1e9
    result = run(
        scenario_from_dict(tiny(**{"strategy.kind": "mirrored", "cluster.devices_per_host": n}))
    )
    ring = 2 * (n - 1) * (alpha + MLP16_BYTES / (n * bandwidth))
    assert result.summary["simulated_time_s"] == pytest.approx(12 * (1e-3 + ring), rel=1e-12)
    comm = result.events[result.events["kind"] == "comm"]
    assert len(comm) == 12 * n
    assert (comm["end_s"] - comm["start_s"]).to_numpy() == pytest.approx(ring, rel=1e-12)
    assert set(comm["nbytes"]) == {MLP16_BYTES}


@pytest.mark.parametrize("execution", ["batched", "devices"])
def test_mirrored_run_equals_one_device_with_global_batch(execution):
    n = 4
    mirrored = run(
        scenario_from_dict(
            tiny(
                **{
                    "strategy": {"kind": "mirrored", "execution": execution},
                    "cluster.devices_per_host": n,
                }
            )
        )
    )
    single = run(scenario_from_dict(tiny(**{"workload.batch_size": 8 * n})))
    assert_trees_close(mirrored.params, single.params)
    loss_m = mirrored.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    loss_s = single.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    np.testing.assert_allclose(loss_m, loss_s, atol=1e-6)


def test_metrics_are_tidy_and_evaluations_happen_every_n_steps():
    result = run(scenario_from_dict(tiny()))
    assert list(result.metrics.columns) == ["time_s", "step", "metric", "value"]
    acc = result.metrics.query("metric == 'test_accuracy'")
    assert list(acc["step"]) == [5, 10, 12]
    assert list(acc["time_s"]) == pytest.approx([5e-3, 10e-3, 12e-3], rel=1e-12)
    assert len(result.metrics.query("metric == 'train_loss'")) == 12


def test_divergence_is_a_result_not_a_crash():
    result = run(scenario_from_dict(tiny(**{"workload.optimizer.learning_rate": 1e30})))
    assert result.summary["diverged"] is True
    assert result.summary["steps"] < 12


@pytest.mark.parametrize(
    ("kind", "cluster"),
    [
        ("mirrored", {"cluster.devices_per_host": 2}),
        ("multi_worker_mirrored", {"cluster.hosts": 2}),
        ("central_storage", {"cluster.devices_per_host": 2}),
    ],
)
def test_a_loss_read_a_step_late_still_stops_the_run_where_it_diverged(kind, cluster, monkeypatch):
    """Synchronous loops read a step's loss at the next step's end (the device computes
    while the next step is simulated). A corrupt batch that makes step 7's loss NaN
    still ends the run at step 7, with the very tables, summary and parameters of a
    run that reads every loss at once; a run without it is unchanged too."""
    from simdist.numerics.data import BatchStream
    from simdist.strategies.base import Strategy

    batch = BatchStream.batch

    def corrupt(self, index, size):
        x, y = batch(self, index, size)
        return (x * np.nan, y) if index == 6 else (x, y)

    changes = {"strategy.kind": kind, **cluster, "workload.steps": 12, "workload.eval_every": 4}
    scenario = scenario_from_dict(tiny(**changes))
    results = {}
    for poisoned in (False, True):
        if poisoned:
            monkeypatch.setattr(BatchStream, "batch", corrupt)
        for late in (True, False):
            monkeypatch.setattr(Strategy, "may_rerun", late)
            results[poisoned, late] = run(scenario)
    for poisoned in (False, True):
        late, eager = results[poisoned, True], results[poisoned, False]
        assert late.metrics.equals(eager.metrics)
        assert late.events.equals(eager.events)
        assert json.dumps(late.summary, sort_keys=True) == json.dumps(eager.summary, sort_keys=True)
        for a, b in zip(*map(_leaves, (late.params, eager.params)), strict=True):
            np.testing.assert_array_equal(a, b)
    diverged = results[True, True]
    assert diverged.summary["diverged_at_step"] == diverged.summary["steps"] == 7
    losses = diverged.metrics.query("metric == 'train_loss'")
    assert list(losses["step"]) == list(range(1, 8))
    assert np.isnan(losses["value"].iloc[-1]) and np.isfinite(losses["value"].iloc[:-1]).all()
    assert diverged.events["step"].max() == 6  # steps are 0-based in events.csv
    assert results[False, True].summary["steps"] == 12


def _leaves(tree):
    import jax

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def test_timing_only_run_has_the_same_clock_and_no_loss():
    data = tiny(**{"strategy.kind": "mirrored", "cluster.devices_per_host": 2})
    full = run(scenario_from_dict(data))
    timing = run(scenario_from_dict({**data, "numerics": False}))
    assert timing.summary["simulated_time_s"] == full.summary["simulated_time_s"]
    assert timing.params is None
    assert timing.metrics.query("metric == 'train_loss'").empty


def _run_in_subprocess(scenario, out, *extra):
    subprocess.run(
        [sys.executable, "-m", "simdist", "run", str(scenario), "--out", str(out), "-q", *extra],
        check=True,
        capture_output=True,
    )


def test_same_seed_gives_byte_identical_tables_across_processes(tmp_path):
    scenario = write(tmp_path, tiny(**{"strategy.kind": "mirrored", "cluster.devices_per_host": 2}))
    _run_in_subprocess(scenario, tmp_path / "a")
    _run_in_subprocess(scenario, tmp_path / "b")
    _run_in_subprocess(scenario, tmp_path / "c", "--seed", "1")
    for table in ("metrics.csv", "events.csv"):
        a = (tmp_path / "a" / table).read_bytes()
        assert a == (tmp_path / "b" / table).read_bytes()
    assert (tmp_path / "a" / "metrics.csv").read_bytes() != (
        tmp_path / "c" / "metrics.csv"
    ).read_bytes()


def test_a_second_run_into_a_folder_being_written_is_refused(tmp_path):
    """Two runs into one --out at once: the second refuses, no silent replacement."""
    from simdist.report.tables import report_lock

    scenario = write(tmp_path, tiny())
    out = tmp_path / "report"
    with report_lock(out):  # a run writing the folder right now
        busy = subprocess.run(
            [sys.executable, "-m", "simdist", "run", str(scenario), "--out", str(out), "-q"],
            capture_output=True,
            text=True,
        )
    assert busy.returncode == 2, busy.stderr
    assert f"{out}: another simdist run is writing this report folder right now" in busy.stderr
    assert not out.exists()
    _run_in_subprocess(scenario, out)  # once the lock is free the run goes through
    assert (out / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "scenario.yaml"]
