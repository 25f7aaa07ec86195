"""Strategy ``pipeline`` on the clock, without JAX: bubbles, schedules, partition, memory.

Stage times come from hand-made ``Costs.layers`` (one layer per stage, forward f and
backward b per micro-batch), links are free (zero bytes, zero latency), so the step of gpipe
and 1f1b lasts exactly (M + S − 1)(f + b) and the bubble is (S − 1)/(M + S − 1).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny, write
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.errors import SimdistError
from simdist.layers import LayerProfile, ModelProfile, write_layers_csv
from simdist.runtime.engine import simulate
from simdist.scenario import scenario_from_dict
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.pipeline.plan import (
    ideal_bubble,
    in_flight,
    partition_auto,
    slowest_stage,
    stage_ops,
)

F, B = 1.0, 2.0  # seconds of one micro-batch's forward / backward on every stage


def pipeline(S: int, M: int, schedule: str, **strategy) -> dict:
    return tiny(
        **{
            "numerics": False,
            "strategy": {
                "kind": "pipeline",
                "stages": S,
                "micro_batches": M,
                "schedule": schedule,
                **strategy,
            },
            "cluster.devices_per_host": S * strategy.get("replicas", 1),
            "workload.batch_size": 8 * M,
            "cluster.links.intra_host": {"bandwidth": "1GB/s", "latency": "0us"},
        }
    )


def equal_costs(S: int, M: int, steps: int, output_nbytes: int = 0, param: int = 100) -> Costs:
    layers = tuple(LayerCost(f"l{i}", F * M, B * M, param, (), output_nbytes) for i in range(S))
    return Costs(
        compute_s=S * (F + B) * M,
        grad_nbytes=param * S,
        flops_per_replica_step=0.0,
        total_steps=steps,
        layers=layers,
    )


def run(S: int, M: int, schedule: str, steps: int = 2, **strategy):
    scenario = scenario_from_dict(pipeline(S, M, schedule, **strategy))
    return simulate(scenario, equal_costs(S, M, steps))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S, M", list(itertools.product([2, 4], [1, 4, 8])))
def test_bubble_fraction_is_exactly_gpipes(schedule, S, M):
    result = run(S, M, schedule)
    assert result.summary["bubble_fraction"] == (S - 1) / (M + S - 1)
    assert result.summary["bubble_fraction_ideal"] == ideal_bubble(S, M)
    assert result.summary["simulated_time_s"] == 2 * (M + S - 1) * (F + B)


def test_timeline_labels_every_micro_batch_on_every_stage():
    result = run(2, 4, "gpipe", steps=1)
    compute = result.events[result.events["kind"] == "compute"]
    for device in ("worker0/gpu0", "worker0/gpu1"):
        rows = compute[compute["device"] == device]
        assert list(rows["detail"]) == ["F0", "F1", "F2", "F3", "B3", "B2", "B1", "B0"]


def test_1f1b_holds_at_most_S_micro_batches_and_gpipe_all_M():
    S, M = 4, 8
    one = run(S, M, "1f1b").summary["peak_in_flight_per_stage"]
    assert one == [S - s for s in range(S)] and max(one) <= S
    assert run(S, M, "gpipe").summary["peak_in_flight_per_stage"] == [M] * S
    for ops in stage_ops("1f1b", S, M):
        assert max(in_flight(ops)) <= S and min(in_flight(ops)) >= 0
        assert sorted(ops) == sorted(stage_ops("gpipe", S, M)[0])


def test_pipedream_runs_without_flush_and_pins_its_staleness():
    S, M, steps = 2, 2, 2
    # Stage 0: F0 F1 B0 F2 B1 F3 B2 B3; stage 1 (last): F0 B0 F1 B1 ...
    assert stage_ops("pipedream", S, M * steps) == [
        [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)],
        [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)],
    ]
    result = run(S, M, "pipedream", steps=steps)
    stale = result.summary["staleness_per_stage"]
    assert [(x["stage"], x["updates"], x["max"]) for x in stale] == [(0, 4, 1), (1, 4, 0)]
    assert stale[0]["mean"] == 0.75 and stale[1]["mean"] == 0.0
    # No flush: 4 micro-batches through 2 stages take (4 + 2 - 1)(f + b).
    assert result.summary["simulated_time_s"] == (M * steps + S - 1) * (F + B)


def test_activations_cross_the_links_with_their_bytes():
    S, M = 2, 4
    scenario = scenario_from_dict(
        pipeline(S, M, "gpipe") | {"cluster": {**pipeline(S, M, "gpipe")["cluster"], "hosts": 1}}
    )
    result = simulate(scenario, equal_costs(S, M, 1, output_nbytes=4000))
    comm = result.events[result.events["kind"] == "comm"]
    sent = comm[comm["device"] == "worker0/gpu0"]
    assert sorted(set(sent["detail"])) == ["A0", "A1", "A2", "A3", "G0", "G1", "G2", "G3"]
    assert set(sent["nbytes"]) == {1000}  # one micro-batch's activation: 4000 / M


def test_replicas_all_reduce_each_stage_among_its_copies():
    result = run(2, 2, "1f1b", steps=1, replicas=2)
    comm = result.events[result.events["kind"] == "comm"]
    reduces = comm[comm["detail"].str.startswith("all-reduce stage")]
    assert set(reduces["detail"]) == {"all-reduce stage 0", "all-reduce stage 1"}
    stage0 = reduces[reduces["detail"] == "all-reduce stage 0"]
    assert set(stage0["device"]) == {"worker0/gpu0", "worker0/gpu2"}
    assert result.summary["pipeline"]["stage_devices"] == [
        ["worker0/gpu0", "worker0/gpu2"],
        ["worker0/gpu1", "worker0/gpu3"],
    ]


# -- partition: auto --------------------------------------------------------------------


def brute_force(n: int, S: int, cost, fits) -> float:
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), S - 1):
        edges = (0, *cuts, n)
        spans = list(itertools.pairwise(edges))
        if all(fits(s, a, b) for s, (a, b) in enumerate(spans)):
            best = min(best, max(cost(s, a, b) for s, (a, b) in enumerate(spans)))
    return best


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.integers(1, 50), min_size=1, max_size=7),
    sends=st.lists(st.integers(0, 20), min_size=7, max_size=7),
    params=st.lists(st.integers(0, 9), min_size=7, max_size=7),
    S=st.integers(1, 4),
    capacity=st.integers(5, 30),
)
def test_auto_partition_equals_brute_force(times, sends, params, S, capacity):
    n = len(times)

    def cost(s, a, b):  # compute of the stage + sending its boundary activation
        return sum(times[a:b]) + (sends[b - 1] if s < S - 1 else 0)

    def fits(s, a, b):  # parameters, plus a stash that shrinks along the pipeline
        return sum(params[a:b]) + (S - s) <= capacity

    expected = brute_force(n, S, cost, fits) if n >= S else None
    if expected is None or expected == float("inf"):
        with pytest.raises(SimdistError):
            partition_auto(n, S, cost, fits)
        return
    counts = partition_auto(n, S, cost, fits)
    assert len(counts) == S and sum(counts) == n and min(counts) >= 1
    assert slowest_stage(counts, cost) == expected


def test_auto_partition_balances_and_rejects_a_model_that_cannot_fit():
    times = [4, 1, 1, 1, 1, 4]
    assert partition_auto(6, 3, lambda s, a, b: sum(times[a:b])) == (1, 4, 1)
    with pytest.raises(SimdistError, match="fits in device memory"):
        partition_auto(6, 3, lambda s, a, b: 1.0, lambda s, a, b: b - a < 2)


# -- memory ------------------------------------------------------------------------------


def test_memory_per_device_in_summary_and_remat_pays_a_forward():
    S, M = 2, 4
    plain = run(S, M, "gpipe", steps=1)
    remat = run(S, M, "gpipe", steps=1, rematerialization=True)
    assert set(plain.summary["peak_memory_bytes"]) == {"worker0/gpu0", "worker0/gpu1"}
    assert plain.summary["device_memory_bytes"] == 16e9  # the v100 profile
    assert remat.summary["simulated_time_s"] == (M + S - 1) * (2 * F + B)
    details = set(remat.events["detail"])
    assert {"R0", "B0", "F0"} <= details


def big_profile(tmp_path: Path) -> Path:
    """Four layers of 1.5 GB of parameters: with Adam a stage of two needs 12 GB, of three 18."""
    layers = tuple(
        LayerProfile(
            f"block{i}", 1e9, 2e9, 1e6, 2e6, output_nbytes=4096, param_nbytes=1_500_000_000
        )
        for i in range(4)
    )
    profile = ModelProfile("big", 8, (16,), layers, "test")
    return write_layers_csv(profile, tmp_path / "layers.csv")


def oom_scenario(tmp_path: Path, partition) -> Path:
    data = pipeline(2, 2, "gpipe", partition=partition)
    data["workload"] = {
        "profile": str(big_profile(tmp_path)),
        "batch_size": 8,
        "optimizer": {"name": "adam", "learning_rate": 0.001},
        "steps": 2,
    }
    data["name"] = "pipeline_oom"
    return write(tmp_path, data)


def test_a_stage_that_does_not_fit_is_an_error_naming_it(tmp_path):
    from simdist.runtime.engine import run as engine_run

    with pytest.raises(SimdistError, match=r"pipeline stage 0 \(layers block0..block2\)"):
        engine_run(oom_scenario(tmp_path, [3, 1]))
    with pytest.raises(SimdistError, match="no partition"):
        engine_run(oom_scenario(tmp_path, "auto"), overrides=("strategy.stages=1",))


def test_out_of_memory_exits_2_and_writes_no_report(tmp_path):
    path = oom_scenario(tmp_path, [3, 1])
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "simdist", "run", str(path), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr + proc.stdout
    assert "pipeline stage 0" in message and "does not fit" in message and "14.9 GiB" in message
    assert not out.exists()


def test_the_auto_partition_fits_what_an_unbalanced_one_cannot(tmp_path):
    from simdist.runtime.engine import run as engine_run

    result = engine_run(oom_scenario(tmp_path, "auto"))
    assert result.summary["pipeline"]["partition"] == [2, 2]
    assert max(result.summary["peak_memory_bytes"].values()) <= 16e9


def test_scenarios_load_and_the_spec_rejects_what_it_cannot_run():
    from simdist.errors import ScenarioError
    from simdist.scenario import load_scenario

    for name in ("pipeline_gpipe", "pipeline_1f1b", "pipedream"):
        scenario = load_scenario(f"scenarios/{name}.yaml")
        assert scenario.strategy.kind == "pipeline" and scenario.strategy.stages == 4
    with pytest.raises(ScenarioError, match="micro_batches"):
        scenario_from_dict(pipeline(2, 3, "gpipe") | {"workload": tiny()["workload"]})
    with pytest.raises(ScenarioError, match="need 4 devices"):
        scenario_from_dict(pipeline(4, 2, "gpipe") | {"cluster": tiny()["cluster"]})


def test_reports_are_byte_identical_across_two_processes(tmp_path):
    reports = []
    for i in range(2):
        out = tmp_path / f"r{i}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "simdist",
                "run",
                "scenarios/pipedream.yaml",
                "--out",
                str(out),
                "-q",
                "--set",
                "workload.steps=3",
                "--set",
                "workload.eval_every=2",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        reports.append(out)
    files = sorted(p.relative_to(reports[0]) for p in reports[0].rglob("*") if p.is_file())
    assert files
    for name in files:
        assert (reports[0] / name).read_bytes() == (reports[1] / name).read_bytes(), name
    summary = json.loads((reports[0] / "summary.json").read_text())
    assert summary["staleness_per_stage"][0]["max"] == 3


# -- launch cost per micro-batch, the stage_updates table, the report's plots -----------------


def test_every_micro_batch_pays_each_layers_launch_cost():
    """A layer's launch cost is not divided by M: each micro-batch's pass pays all of it."""
    S, M, L = 2, 4, 0.25
    layers = tuple(
        LayerCost(f"l{i}", F * M + L, B * M + L, 100, (), 0, launch_s=L) for i in range(S)
    )
    costs = Costs(S * (F + B) * M + 2 * S * L, 100 * S, 0.0, 1, layers=layers)
    result = simulate(scenario_from_dict(pipeline(S, M, "gpipe")), costs)
    assert result.summary["simulated_time_s"] == (M + S - 1) * (F + B + 2 * L)
    assert result.summary["bubble_fraction"] == (S - 1) / (M + S - 1)


def test_measured_costs_carry_the_rooflines_launch_calibrated_like_the_times():
    from simdist.runtime.costs import measure_costs
    from simdist.scenario import load_scenario

    plain = load_scenario("scenarios/pipeline_gpipe.yaml", overrides=("numerics=false",))
    launches = {x.launch_s for x in measure_costs(plain, None).layers}
    assert launches == {5e-6}  # the v100's fixed cost of a layer pass
    timed = load_scenario(
        "scenarios/pipeline_gpipe.yaml",
        overrides=("numerics=false", "cluster.device.compute_time=2ms"),
    )
    raw = measure_costs(plain, None).compute_s
    for layer in measure_costs(timed, None).layers:
        assert layer.launch_s == pytest.approx(5e-6 * 2e-3 / raw, rel=1e-12)
        assert layer.launch_s < layer.forward_s


def test_pipedream_records_each_stage_update_with_its_staleness():
    result = run(2, 2, "pipedream", steps=2)
    table = result.tables["stage_updates"]
    stage0, stage1 = table[table["stage"] == 0], table[table["stage"] == 1]
    assert stage0["micro_batch"].tolist() == [0, 1, 2, 3]
    assert stage0["forward_version"].tolist() == [0, 0, 1, 2]
    assert stage0["staleness"].tolist() == [0, 1, 1, 1]
    assert stage1["staleness"].tolist() == [0, 0, 0, 0]
    assert (table["staleness"] == table["version"] - table["forward_version"]).all()
    assert table["time_s"].is_monotonic_increasing
    assert "stage_updates" not in run(2, 2, "1f1b").tables


def test_the_report_plots_memory_and_stage_staleness(tmp_path):
    from simdist.api import load_report
    from simdist.report import write_report
    from simdist.report.plots import write_plots

    out = write_report(run(2, 2, "pipedream", steps=2), tmp_path / "dream")
    report = (out / "report.md").read_text()
    for name in ("memory.png", "pipeline_staleness.png", "stage_updates.csv"):
        assert (out / name).is_file() and f"]({name})" in report, name
    # Drawn from what the run recorded: a loaded report draws the same files.
    again = tmp_path / "again"
    again.mkdir()
    assert {"memory.png", "pipeline_staleness.png"} <= set(write_plots(load_report(out), again))
    for name in ("memory.png", "pipeline_staleness.png"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    flushed = write_report(run(2, 2, "1f1b", steps=1), tmp_path / "flushed")
    assert (flushed / "memory.png").is_file()
    assert not (flushed / "pipeline_staleness.png").exists()
