"""Timing-only runs (``numerics: false``): the full run's clock, no gradient math, 1024 devices."""

from __future__ import annotations

import json

import pytest
from helpers import tiny

from simdist.report import write_report
from simdist.runtime import engine
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from simdist.strategies import STRATEGY_CLASSES

PS = {
    "strategy.kind": "parameter_server",
    "cluster.hosts": 4,
    "cluster.ps": 2,
    "workload.steps": 40,
}

SAME_CLOCK = {
    "mirrored": tiny(**{"strategy.kind": "mirrored", "cluster.devices_per_host": 4}),
    "mirrored_flops": tiny(
        **{
            "strategy.kind": "mirrored",
            "cluster.devices_per_host": 2,
            "cluster.device": {"profile": "v100"},
        }
    ),
    "ps_async": tiny(**PS),
    "ps_ssp_flops": tiny(
        **{**PS, "strategy.staleness_bound": 1, "cluster.device": {"profile": "v100"}}
    ),
    "ps_inverse_min_size": tiny(
        **{
            **PS,
            "cluster.hosts": 3,
            "cluster.ps": 3,
            "cluster.devices_per_host": 2,
            "strategy.lr_staleness": "inverse",
            "strategy.partitioner": "min_size",
            "strategy.min_shard_bytes": 512,
        }
    ),
    "ps_sync_backup": tiny(
        **{**PS, "strategy.mode": "sync", "strategy.backup_workers": 1, "workload.steps": 8}
    ),
    "ps_stragglers_failures": tiny(
        **{
            **PS,
            "faults": {
                "stragglers": [
                    {"worker": 1, "slowdown": 3.0},
                    {"slowdown": {"kind": "lognormal", "sigma": 0.5}, "probability": 0.3},
                ],
                "failures": [{"target": "worker 2", "at": "3ms", "restart_after": "2ms"}],
            },
        }
    ),
}


@pytest.mark.parametrize("case", list(SAME_CLOCK))
def test_timing_only_has_the_same_clock_and_events_as_the_full_run(case, tmp_path):
    data = SAME_CLOCK[case]
    full = run(scenario_from_dict(data))
    timing = run(scenario_from_dict({**data, "numerics": False}))
    assert timing.summary["simulated_time_s"] == full.summary["simulated_time_s"]
    assert timing.summary["steps"] == full.summary["steps"]
    assert timing.summary["time_split"] == full.summary["time_split"]
    assert timing.events.to_csv(index=False) == full.events.to_csv(index=False)
    if "updates" in full.tables:
        drop = ["loss"]
        assert (
            timing.tables["updates"]
            .drop(columns=drop)
            .equals(full.tables["updates"].drop(columns=drop))
        )
        assert timing.summary["staleness"] == full.summary["staleness"]
    assert timing.params is None
    assert timing.summary["numerics"] is False
    assert timing.summary["final_test_accuracy"] is None
    assert timing.metrics.query("metric in ['train_loss', 'test_accuracy']").empty


def test_timing_only_report_says_no_accuracy_was_computed(tmp_path):
    result = run(scenario_from_dict({**tiny(**PS), "numerics": False}))
    out = write_report(result, tmp_path / "report")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["numerics"] is False
    assert summary["final_test_accuracy"] is None
    assert summary["final_train_loss"] is None
    assert not (out / "params.npz").exists()
    # no loss was computed: no loss plots, and the header says the run was timed only
    assert not (out / "loss_vs_time.png").exists() and not (out / "loss_vs_step.png").exists()
    text = (out / "report.md").read_text()
    assert "loss_vs" not in text and "evaluated every" not in text and " on digits" not in text
    assert "timed only (numerics: false: no data, no loss, no evaluation)" in text
    assert (out / "throughput.png").is_file() and (out / "memory.png").is_file()


def test_cost_analysis_runs_once_per_model_and_batch(monkeypatch):
    built = []
    original = engine.build_workload

    def counting(scenario):
        built.append(scenario.seed)
        return original(scenario)

    monkeypatch.setattr(engine, "_workloads", type(engine._workloads)())
    monkeypatch.setattr(engine, "build_workload", counting)
    data = {**tiny(**{"cluster.device": {"profile": "v100"}}), "numerics": False}
    first = run(scenario_from_dict(data))
    for seed, steps in ((1, 5), (2, 7)):
        changed = {**data, "seed": seed, "workload": {**data["workload"], "steps": steps}}
        again = run(scenario_from_dict(changed))
        assert again.summary["flops_per_replica_step"] == first.summary["flops_per_replica_step"]
        assert again.summary["steps"] == steps
    assert built == [0]


# ---------------------------------------------------------------- 1024 devices

N = 1024


def _timing(**changes) -> dict:
    return {**tiny(**{"workload.steps": 3, **changes}), "numerics": False}


def test_one_device_timing_only():
    result = run(scenario_from_dict(_timing()))
    assert result.summary["simulated_time_s"] == pytest.approx(3e-3, rel=1e-12)


def test_mirrored_on_1024_devices():
    result = run(
        scenario_from_dict(
            _timing(
                **{
                    "strategy": {"kind": "mirrored", "execution": "devices"},
                    "cluster.devices_per_host": N,
                }
            )
        )
    )
    events = result.events
    assert result.summary["replicas"] == N
    assert (events["kind"] == "compute").sum() == 3 * N
    assert (events["kind"] == "comm").sum() == 3 * N
    assert result.summary["execution"] == "none"


def test_parameter_server_with_1024_workers():
    result = run(
        scenario_from_dict(
            _timing(
                **{
                    "strategy.kind": "parameter_server",
                    "strategy.staleness_bound": 2,
                    "cluster.hosts": N,
                    "cluster.ps": 2,
                    "workload.steps": 2 * N,
                }
            )
        )
    )
    assert result.summary["workers"] == N
    assert result.summary["applied_updates"] == 2 * N
    updates = result.tables["updates"]
    assert updates["ssp_staleness"].max() <= 2
    assert set(updates["worker"]) == set(range(N))


OTHER_STRATEGIES = {
    "multi_worker_mirrored": {"cluster.hosts": 128, "cluster.devices_per_host": 8},
    "central_storage": {"cluster.devices_per_host": N},
    "tpu": {"strategy.topology": [32, 32]},
}


@pytest.mark.parametrize("kind", list(OTHER_STRATEGIES))
def test_other_strategies_on_1024_devices(kind):
    assert kind in STRATEGY_CLASSES
    result = run(scenario_from_dict(_timing(**{"strategy.kind": kind, **OTHER_STRATEGIES[kind]})))
    assert result.summary["replicas"] == N
    assert result.summary["steps"] == 3
    computing = result.events[result.events["kind"] == "compute"]
    assert computing["device"].nunique() == N
