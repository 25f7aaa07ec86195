"""The shared layer-by-layer step (strategies/layer_step.py) and the byte fields of Costs.

The walk's sums are pinned on hand numbers (its waits: tests/test_steps.py); the byte
fields by running strategies, without JAX, on costs whose parameters and gradients differ
in size.
"""

from __future__ import annotations

import pytest

from simdist.runtime.engine import simulate
from simdist.scenario import load_scenario
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.layer_step import (
    backward_ready,
    backward_s,
    forward_s,
    span_seconds,
)

LAYERS = (
    LayerCost("a", 1.0, 2.0, 4),
    LayerCost("relu", 0.5, 0.25, 0),
    LayerCost("b", 3.0, 4.0, 8),
)


def test_span_seconds_sum_each_span_in_order():
    assert span_seconds(LAYERS, [(0, 3)], forward_s) == [4.5]
    assert span_seconds(LAYERS, [(0, 1), (1, 3), (3, 3)], backward_s) == [2.0, 4.25, 0.0]
    backward = LAYERS[::-1]
    assert span_seconds(backward, [(0, 2), (2, 3)], backward_s) == [4.25, 2.0]


def test_span_seconds_keep_the_layer_order_of_a_float_sum():
    # (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3): the span sums in layer order, as the paths did.
    layers = [LayerCost(f"l{i}", t, 0.0, 0) for i, t in enumerate((0.1, 0.2, 0.3))]
    assert span_seconds(layers, [(0, 3)], forward_s) == [(0.1 + 0.2) + 0.3]
    assert span_seconds(layers[::-1], [(0, 3)], forward_s) == [(0.3 + 0.2) + 0.1]


def test_backward_ready_is_the_running_sum_in_reverse_layer_order():
    ready, total = backward_ready(LAYERS, [True, False, True])
    assert ready == [(2, 4.0), (0, 6.25)]  # b after 4 s, a after 4 + 0.25 + 2
    assert total == 6.25
    ready, total = backward_ready(LAYERS, [False, True, False])
    assert ready == [(1, 4.25)] and total == 6.25


def test_costs_param_bytes_default_to_the_gradient_and_split_when_given():
    same = Costs(1.0, 100, 0.0, 1, opt_state_nbytes=30)
    assert same.param_nbytes == 100 and same.checkpoint_nbytes == 130
    split = Costs(1.0, 25, 0.0, 1, opt_state_nbytes=30, param_nbytes=100)
    assert (split.grad_nbytes, split.param_nbytes, split.checkpoint_nbytes) == (25, 100, 130)
    assert LayerCost("l", 1.0, 1.0, 8).param_nbytes == 8
    assert LayerCost("l", 1.0, 1.0, 2, param_nbytes=8).param_nbytes == 8


def test_central_storage_fetches_parameters_and_pushes_gradients():
    scenario = load_scenario(
        "scenarios/central_storage_4dev.yaml", ["numerics=false", "cluster.device.variability=0"]
    )
    costs = Costs(1e-3, 250_000, 0.0, 2, param_nbytes=1_000_000)
    result = simulate(scenario, costs)
    comm = result.events[result.events["kind"] == "comm"]
    sizes = comm.groupby("detail")["nbytes"].unique().to_dict()
    assert list(sizes["fetch variables"]) == [1_000_000]
    assert list(sizes["push gradient"]) == [250_000]
    assert result.summary["host_link_bytes_per_step"] == 4 * (1_000_000 + 250_000)


def test_pipeline_holds_parameters_and_all_reduces_gradients():
    scenario = load_scenario(
        "scenarios/pipeline_gpipe.yaml",
        [
            "numerics=false",
            "strategy.stages=2",
            "strategy.micro_batches=2",
            "strategy.replicas=2",
            "workload.optimizer.name=adam",  # the memory model counts the workload's optimizer
        ],
    )
    layers = tuple(LayerCost(f"l{i}", 1.0, 2.0, 50, param_nbytes=200) for i in range(4))
    costs = Costs(12.0, 200, 0.0, 1, layers=layers, param_nbytes=800, opt_state_nbytes=1600)
    result = simulate(scenario, costs)
    memory = result.summary["memory_per_device"]["worker0/gpu0"]
    assert (memory["params"], memory["optimizer"]) == (400, 800)  # half the layers, half Adam
    comm = result.events[result.events["kind"] == "comm"]
    reduces = comm[comm["detail"] == "all-reduce stage 0"]
    assert set(reduces["nbytes"]) == {100}  # two layers' gradients of 50 B


@pytest.mark.parametrize("overlap", [False, True])
def test_ps_pulls_parameters_and_pushes_gradients(overlap):
    scenario = load_scenario(
        "scenarios/ps_4w2s.yaml",
        ["numerics=false", "cluster.device.variability=0", f"strategy.overlap={overlap}"],
    )
    leaves = (("params/w0", (10,), 400), ("params/w1", (10,), 400))
    layers = (
        LayerCost("l0", 1e-3, 2e-3, 100, ("params/w0",), param_nbytes=400),
        LayerCost("l1", 1e-3, 2e-3, 100, ("params/w1",), param_nbytes=400),
    )
    costs = Costs(6e-3, 200, 0.0, 4, leaves, layers=layers, param_nbytes=800)
    result = simulate(scenario, costs)
    phases = result.events[result.events["detail"].isin(["pull", "push"])]
    by_detail = phases.groupby("detail")["nbytes"].unique().to_dict()
    assert list(by_detail["pull"]) == [800]
    assert list(by_detail["push"]) == [200]
