"""System effects: stragglers, preemption and recovery, checkpoints, input pipeline."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import tiny

from simdist.errors import DataError, ScenarioError
from simdist.hardware.faults import (
    MAX_FAILURES_WITHOUT_PROGRESS,
    InputPipeline,
    ProgressWatch,
    Stragglers,
)
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict

MLP16_BYTES = (64 * 16 + 16 + 16 * 10 + 10) * 4
ALPHA, BW = 10e-6, 1e9


def mirrored(n: int = 2, **extra) -> dict:
    return {**tiny(**{"strategy.kind": "mirrored", "cluster.devices_per_host": n}), **extra}


def ring_s(n: int) -> float:
    return 2 * (n - 1) * (ALPHA + MLP16_BYTES / (n * BW))


def leaves_equal(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    )


# -- stragglers -------------------------------------------------------------------


def test_persistent_straggler_sets_the_step_time_by_the_max_rule():
    k = 3.0
    result = run(
        scenario_from_dict(mirrored(4, faults={"stragglers": [{"device": 2, "slowdown": k}]}))
    )
    step = k * 1e-3 + ring_s(4)
    assert result.summary["simulated_time_s"] == pytest.approx(12 * step, rel=1e-12)
    straggle = result.events.query("kind == 'straggle'")
    assert set(straggle["device"]) == {"worker0/gpu2"}
    assert (straggle["end_s"] - straggle["start_s"]).to_numpy() == pytest.approx((k - 1) * 1e-3)
    idle = result.events.query("kind == 'idle' and device != 'worker0/gpu2'")
    assert len(idle) == 12 * 3


def test_straggler_draws_are_per_device_streams():
    spec = scenario_from_dict(
        tiny(faults={"stragglers": [{"probability": 0.3, "slowdown": {"kind": "pareto"}}]})
    ).faults.stragglers
    small, big = Stragglers(spec, 7, 2), Stragglers(spec, 7, 8)
    draws = [small.factor(h, d, s) for h in range(3) for d in range(2) for s in range(600)]
    assert draws == [big.factor(h, d, s) for h in range(3) for d in range(2) for s in range(600)]
    assert min(draws) == 1.0 and max(draws) > 2.0
    assert 0.2 < np.mean(np.asarray(draws) > 1.0) < 0.4
    other = Stragglers(spec, 8, 2)
    assert draws != [other.factor(h, d, s) for h in range(3) for d in range(2) for s in range(600)]


def test_random_stragglers_are_deterministic_and_slow_the_run():
    data = mirrored(
        2,
        faults={"stragglers": [{"probability": 0.5, "slowdown": {"kind": "lognormal", "mu": 1.0}}]},
    )
    a, b = run(scenario_from_dict(data)), run(scenario_from_dict(data))
    assert a.events.equals(b.events)
    assert a.summary["simulated_time_s"] > 12 * (1e-3 + ring_s(2))


# -- preemption -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["one_device", "mirrored"])
def test_preemption_costs_restart_restore_and_redone_steps_and_changes_no_parameter(kind):
    n = 2 if kind == "mirrored" else 1
    step = 1e-3 + (ring_s(n) if kind == "mirrored" else 0.0)
    write_s = MLP16_BYTES / 1e6  # sgd keeps no optimizer state: checkpoint = parameters
    base = tiny(**{"strategy.kind": kind, "cluster.devices_per_host": n})
    base["checkpoint"] = {"every_steps": 4, "storage_bandwidth": "1MB/s"}
    plain = run(scenario_from_dict(base))
    assert plain.summary["simulated_time_s"] == pytest.approx(12 * step + 3 * write_s, rel=1e-12)
    # fail during step index 6 (the 7th): steps 4, 5, 6 are lost and redone
    at = 6 * step + 1 * write_s + 0.5 * step
    preempted = run(
        scenario_from_dict(
            {
                **base,
                "faults": {"failures": [{"target": "worker 0", "at": at, "restart_after": 0.05}]},
            }
        )
    )
    extra = 0.05 + write_s + 3 * step
    assert preempted.summary["simulated_time_s"] == pytest.approx(
        plain.summary["simulated_time_s"] + extra, rel=1e-12
    )
    assert leaves_equal(preempted.params, plain.params)
    s = preempted.summary
    assert (s["failures"], s["lost_steps"], s["redone_steps"]) == (1, 3, 3)
    assert s["time_lost_s"] == pytest.approx(extra, rel=1e-12)
    kinds = set(preempted.events["kind"])
    assert {"failure", "restart", "restore", "checkpoint"} <= kinds


def test_preemption_without_checkpoint_restarts_from_scratch():
    base = mirrored(2)
    plain = run(scenario_from_dict(base))
    step = 1e-3 + ring_s(2)
    failed = run(
        scenario_from_dict(
            {
                **base,
                "faults": {
                    "failures": [{"target": "device 1", "at": 2.5 * step, "restart_at": 0.01}]
                },
            }
        )
    )
    restart = 0.01 - 2.5 * step
    assert failed.summary["simulated_time_s"] == pytest.approx(
        plain.summary["simulated_time_s"] + restart + 3 * step, rel=1e-12
    )
    assert leaves_equal(failed.params, plain.params)


def test_mtbf_failures_are_seeded_and_the_run_completes():
    data = mirrored(
        2,
        checkpoint={"every_steps": 2, "storage_bandwidth": "1GB/s"},
        faults={"failures": [{"target": "worker 0", "mtbf": "4ms", "restart_after": "1ms"}]},
    )
    a, b = run(scenario_from_dict(data)), run(scenario_from_dict(data))
    assert a.summary["failures"] >= 1
    assert a.summary["steps"] == 12
    assert a.events.equals(b.events) and a.metrics.equals(b.metrics)
    other = run(scenario_from_dict({**data, "seed": 3}))
    assert other.summary["simulated_time_s"] != a.summary["simulated_time_s"]


# -- input pipeline ---------------------------------------------------------------


def test_input_pipeline_arithmetic():
    p = InputPipeline(load_s=2.0, prefetch=1)
    assert [p.take(t) for t in (0.0, 3.0, 6.0)] == [2.0, 4.0, 6.0]
    no_prefetch = InputPipeline(load_s=2.0, prefetch=0)
    assert [no_prefetch.take(t) for t in (0.0, 3.0)] == [2.0, 5.0]


@pytest.mark.parametrize("load_us", [50, 100, 125, 300])
def test_prefetch_hides_loading_exactly_when_it_is_not_slower_than_compute(load_us):
    per_example = load_us * 1e-6 / 8  # batch of 8 examples per replica
    result = run(scenario_from_dict(tiny(input={"per_example": per_example, "prefetch": 2})))
    load, compute = load_us * 1e-6, 1e-3
    # the first batch is always waited for; afterwards a step lasts max(load, compute)
    expected = load + 11 * max(load, compute) + compute if load > compute else load + 12 * compute
    assert result.summary["simulated_time_s"] == pytest.approx(expected, rel=1e-9)


def test_slow_loading_makes_the_step_time_the_loading_time():
    result = run(scenario_from_dict(tiny(input={"per_example": 2.5e-4, "prefetch": 1})))
    starts = result.events.query("kind == 'compute'")["start_s"].to_numpy()
    assert np.diff(starts) == pytest.approx(2e-3, rel=1e-9)
    waits = result.events.query("kind == 'input_wait'")
    assert (waits["end_s"] - waits["start_s"]).iloc[1:].to_numpy() == pytest.approx(1e-3, rel=1e-9)


def test_no_prefetch_adds_loading_to_every_step():
    result = run(scenario_from_dict(tiny(input={"per_example": 1e-5, "prefetch": 0})))
    assert result.summary["simulated_time_s"] == pytest.approx(12 * (8e-5 + 1e-3), rel=1e-9)


# -- bad combinations ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        (
            {"faults": {"failures": [{"target": "worker 5", "at": 1, "restart_after": 1}]}},
            "faults.failures[0].target",
            "worker 0..0",
        ),
        (
            {"faults": {"failures": [{"target": "ps 0", "at": 1, "restart_after": 1}]}},
            "faults.failures[0].target",
            "only parameter_server",
        ),
        (
            {"faults": {"failures": [{"target": "worker 0", "at": 1, "restart_at": 0.5}]}},
            "faults.failures[0].restart_at",
            "restarts after it fails",
        ),
        (
            {"faults": {"failures": [{"target": "gpu 0", "at": 1, "restart_after": 1}]}},
            "faults.failures[0].target",
            "'worker N'",
        ),
        (
            {"faults": {"failures": [{"target": "worker 0", "restart_after": 1}]}},
            "faults.failures[0].at",
            "exactly one",
        ),
        ({"checkpoint": {"every_steps": 10}}, "checkpoint.storage_bandwidth", "missing"),
        (
            {"checkpoint": {"every_steps": 10, "every_s": 1, "storage_bandwidth": "1GB/s"}},
            "checkpoint.every_steps",
            "exactly one",
        ),
        (
            {"faults": {"stragglers": [{"device": 9, "slowdown": 2}]}},
            "faults.stragglers[0].device",
            "devices 0..0",
        ),
        (
            {"faults": {"stragglers": [{"worker": 0, "slowdown": 0.5}]}},
            "faults.stragglers[0].slowdown.factor",
            ">= 1",
        ),
        ({"input": {"prefetch": 2}}, "input.per_example", "exactly one"),
    ],
)
def test_bad_fault_settings_are_scenario_errors(extra, field, fragment):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict({**tiny(), **extra})
    assert info.value.field == field
    assert fragment in info.value.message


@pytest.mark.parametrize(
    ("strategy", "extra", "field"),
    [
        ({"staleness_bound": 1}, {}, "strategy.staleness_bound"),
        ({"lr_staleness": "inverse"}, {}, "strategy.lr_staleness"),
        ({}, {"checkpoint": {"every_steps": 5, "storage_bandwidth": "1GB/s"}}, "checkpoint"),
        (
            {},
            {"faults": {"failures": [{"target": "worker 0", "at": 1, "restart_after": 1}]}},
            "faults.failures[0]",
        ),
    ],
)
def test_options_sync_parameter_servers_would_ignore_are_errors(strategy, extra, field):
    data = tiny(
        **{
            "strategy": {"kind": "parameter_server", "mode": "sync", **strategy},
            "cluster.hosts": 2,
            "cluster.ps": 1,
        }
    )
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict({**data, **extra})
    assert info.value.field == field
    assert "mode: async" in info.value.message


def test_failures_that_never_let_the_run_get_further_stop_it():
    watch = ProgressWatch()
    for _ in range(MAX_FAILURES_WITHOUT_PROGRESS):
        watch.failed(3, 1.0)  # failures at step 3, again and again
    watch.failed(4, 2.0)  # a step further: the count starts again
    for _ in range(MAX_FAILURES_WITHOUT_PROGRESS - 1):
        watch.failed(2, 3.0)  # rolled back to a checkpoint: not further than step 4
    with pytest.raises(DataError) as caught:
        watch.failed(4, 4.0)
    assert str(caught.value) == (
        "faults.failures: 10,000 failures in a row: none past step 4 (simulated t = 4 s): "
        "the failures come faster than the run can get further, so it would never finish; "
        "use a longer mtbf, or checkpoints to restart from, e.g. checkpoint: "
        "{every_steps: 100, storage_bandwidth: 1GB/s}"
    )
