"""Horovod's tensor fusion (``strategy.bucketing: horovod``): the buffers and their times.

The rule (simdist/strategies/tensor_fusion.py): cycles every ``cycle_time`` from the step's
start; a cycle takes the gradients ready on every replica since the previous one and fuses
them, in backward order, into buffers of at most ``fusion_threshold`` bytes; buffers are
all-reduced one after another. Exact times: step-time variability off.
"""

from __future__ import annotations

import pytest

from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.runtime.engine import simulate
from simdist.scenario import dump_scenario, load_scenario
from simdist.scenario.load import scenario_from_text
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.bucketing import (
    HOROVOD_CYCLE_TIME_S,
    HOROVOD_FUSION_THRESHOLD_BYTES,
    Bucket,
)
from simdist.strategies.tensor_fusion import TensorFusion, cycle_start_s, tensor_spans

MiB = 1024 * 1024
EXACT = "cluster.device.variability=0"
STEPS = 3


def layered_costs(layers: tuple[LayerCost, ...], steps: int = STEPS) -> Costs:
    return Costs(
        compute_s=sum(layer.forward_s + layer.backward_s for layer in layers),
        grad_nbytes=sum(layer.grad_nbytes for layer in layers),
        flops_per_replica_step=0.0,
        total_steps=steps,
        layers=layers,
    )


# Forward 1 ms each (3 ms); backward l2 0.5 ms, l1 0.5 ms, l0 2 ms: the gradients are ready
# 3.5, 4 and 6 ms into the step.
LAYERS = (
    LayerCost("l0", 1e-3, 2e-3, 2 * MiB),
    LayerCost("l1", 1e-3, 0.5e-3, 4 * MiB),
    LayerCost("l2", 1e-3, 0.5e-3, 4 * MiB),
)


def horovod(*overrides: str) -> object:
    return load_scenario(
        "scenarios/mirrored_4dev.yaml",
        ["numerics=false", EXACT, "strategy.bucketing=horovod", *overrides],
    )


def test_hand_case_three_tensors_a_split_buffer_and_a_missed_cycle():
    # cycle 5 ms, threshold 6 MiB. The cycle at 5 ms takes l2 and l1 (ready 3.5, 4 ms):
    # 4 + 4 MiB > 6 MiB, so two buffers, the second after the first. l0 (ready 6 ms) missed
    # that cycle and waits for the one at 10 ms.
    scenario = horovod("strategy.fusion_threshold=6MiB", "strategy.cycle_time=5ms")
    result = simulate(scenario, layered_costs(LAYERS))
    link = scenario.cluster.links.intra_host
    a4 = ring_allreduce_s(4, 4 * MiB, link.latency_s, link.bandwidth_Bps)
    a2 = ring_allreduce_s(4, 2 * MiB, link.latency_s, link.bandwidth_Bps)
    assert 2 * a4 < 5e-3  # buffer 2 is done before the next cycle
    comm = result.events[(result.events["kind"] == "comm") & (result.events["step"] == 0)]
    rows = comm.drop_duplicates("detail")[["detail", "nbytes", "start_s", "end_s"]]
    assert rows.values.tolist() == [
        ["all-reduce ring buffer 1/3", 4 * MiB, 5e-3, 5e-3 + a4],
        ["all-reduce ring buffer 2/3", 4 * MiB, 5e-3 + a4, 5e-3 + a4 + a4],
        ["all-reduce ring buffer 3/3", 2 * MiB, 2 * 5e-3, 2 * 5e-3 + a2],
    ]
    t = 0.0
    for _ in range(STEPS):  # every step: its cycles start with it
        t = (t + 2 * 5e-3) + a2
    assert result.summary["simulated_time_s"] == pytest.approx(t, rel=1e-13)
    compute = result.events[(result.events["kind"] == "compute") & (result.events["step"] == 0)]
    assert compute.drop_duplicates("detail")["detail"].tolist() == [
        "forward",
        "backward 1/3",
        "backward 2/3",
        "backward 3/3",
    ]


def test_a_threshold_that_holds_both_fuses_them_into_one_buffer():
    scenario = horovod("strategy.fusion_threshold=8MiB", "strategy.cycle_time=5ms")
    result = simulate(scenario, layered_costs(LAYERS, steps=1))
    link = scenario.cluster.links.intra_host
    a8 = ring_allreduce_s(4, 8 * MiB, link.latency_s, link.bandwidth_Bps)
    comm = result.events[result.events["kind"] == "comm"].drop_duplicates("detail")
    assert comm[["detail", "nbytes", "start_s", "end_s"]].values.tolist() == [
        ["all-reduce ring buffer 1/2", 8 * MiB, 5e-3, 5e-3 + a8],
        ["all-reduce ring buffer 2/2", 2 * MiB, 10e-3, comm["end_s"].iloc[1]],
    ]


def test_buffers_rule_by_hand():
    tensors = (Bucket(0, 1, 3), Bucket(1, 2, 3), Bucket(2, 3, 5), Bucket(3, 4, 1))
    fusion = TensorFusion(tensors, threshold_nbytes=6, cycle_s=1.0)
    # ready at 0.2, 0.9 → cycle 1 (3 + 3 ≤ 6: one buffer); 1.0 → cycle 1 too (a tensor
    # ready exactly at a cycle's start is taken), but 6 + 5 > 6; 1.5 → cycle 2
    assert fusion.buffers([0.2, 0.9, 1.0, 1.5], 0.0) == [
        (Bucket(0, 2, 6), 1.0),
        (Bucket(2, 3, 5), 1.0),
        (Bucket(3, 4, 1), 2.0),
    ]
    # threshold 0: every tensor alone (Horovod: HOROVOD_FUSION_THRESHOLD=0 disables fusion)
    alone = TensorFusion(tensors, threshold_nbytes=0, cycle_s=1.0)
    assert [b for b, _ in alone.buffers([0.2, 0.2, 0.2, 0.2], 0.0)] == list(tensors)
    # cycle 0: each at its ready time, fused with those ready at the same instant
    eager = TensorFusion(tensors, threshold_nbytes=100, cycle_s=0.0)
    assert eager.buffers([0.2, 0.2, 0.3, 0.4], 0.0) == [
        (Bucket(0, 2, 6), 0.2),
        (Bucket(2, 3, 5), 0.3),
        (Bucket(3, 4, 1), 0.4),
    ]


def test_cycle_start_is_the_first_cycle_at_or_after_ready():
    assert cycle_start_s(0.0071, 0.002, 0.005) == 0.002 + 2 * 0.005
    assert cycle_start_s(0.007, 0.002, 0.005) == 0.002 + 1 * 0.005
    assert cycle_start_s(0.001, 0.002, 0.005) == 0.002


def test_tensor_spans_end_at_each_gradient():
    layers = (
        LayerCost("input", 0, 0, 0),
        LayerCost("a", 0, 0, 4),
        LayerCost("relu", 0, 0, 0),
        LayerCost("b", 0, 0, 9),
        LayerCost("softmax", 0, 0, 0),
    )
    # backward: softmax, b | relu, a | input (joins the last span)
    assert tensor_spans(layers) == [Bucket(0, 2, 9), Bucket(2, 5, 4)]


def test_horovod_defaults_are_filled_in_and_written_out():
    s = horovod()
    assert s.strategy.fusion_threshold_nbytes == HOROVOD_FUSION_THRESHOLD_BYTES == 128 * MiB
    assert s.strategy.cycle_time_s == HOROVOD_CYCLE_TIME_S == 1e-3
    # the resolved scenario names Horovod's fields, not DDP's, and loads back the same
    text = dump_scenario(s)
    assert "fusion_threshold: 134217728" in text and "bucket_bytes" not in text
    assert dump_scenario(scenario_from_text(text, "scenario.yaml")) == text
    ddp = dump_scenario(load_scenario("scenarios/mirrored_4dev.yaml"))
    assert "bucket_bytes: 26214400" in ddp and "bucketing" not in ddp


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["strategy.fusion_threshold=64MiB"], "strategy.fusion_threshold"),
        (["strategy.cycle_time=5ms"], "strategy.cycle_time"),
        (["strategy.bucketing=horovod", "strategy.bucket_bytes=8MiB"], "strategy.bucket_bytes"),
        (["strategy.bucketing=horovod", "strategy.overlap=false"], "strategy.overlap"),
    ],
)
def test_the_other_rules_fields_are_refused(overrides, field):
    with pytest.raises(ScenarioError, match=f"{field}: "):
        load_scenario("scenarios/mwm_2x4_ring.yaml", overrides)


def test_a_straggler_delays_the_cycle_that_takes_each_tensor():
    # device 5 runs at half speed: its gradients are ready at 2 × (3.5, 4, 6) = 7, 8, 12 ms,
    # so the cycle at 10 ms takes l2 + l1 (8 MiB, within the threshold) and l0 waits for 15.
    scenario = load_scenario(
        "scenarios/mwm_2x4_ring.yaml",
        [
            "numerics=false",
            EXACT,
            "workload.eval_every=0",
            "strategy.bucketing=horovod",
            "strategy.fusion_threshold=8MiB",
            "strategy.cycle_time=5ms",
            "faults.stragglers=[{device: 5, slowdown: 2}]",
        ],
    )
    result = simulate(scenario, layered_costs(LAYERS, steps=1))
    net = scenario.cluster.links.network
    a8 = ring_allreduce_s(8, 8 * MiB, net.latency_s, net.bandwidth_Bps)
    a2 = ring_allreduce_s(8, 2 * MiB, net.latency_s, net.bandwidth_Bps)
    comm = result.events[result.events["kind"] == "comm"].drop_duplicates("detail")
    assert comm[["detail", "nbytes"]].values.tolist() == [
        ["all-reduce ring buffer 1/2", 8 * MiB],
        ["all-reduce ring buffer 2/2", 2 * MiB],
    ]
    assert comm["start_s"].tolist() == [2 * 5e-3, max(3 * 5e-3, 2 * 5e-3 + a8)]
    end = max(3 * 5e-3, 2 * 5e-3 + a8) + a2
    assert result.summary["simulated_time_s"] == pytest.approx(end, rel=1e-13)
