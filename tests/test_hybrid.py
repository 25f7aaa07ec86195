"""hybrid: a 3D layout's step by hand, the data-axis reduction's bytes, layout errors."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from helpers import assert_trees_close, tiny

from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.runtime.engine import run, simulate
from simdist.scenario import scenario_from_dict
from simdist.sharding import Sharding
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.hybrid.plan import overlapped_data_plan
from simdist.strategies.steps import Compute, Issue, Wait

X = 1_000_000  # bytes of one activation on the whole batch (batch x sequence x hidden)
F, B = 1e-3, 2e-3  # a block's forward and backward on the whole batch
LAUNCH = 1e-5
LINK = {"bandwidth": "1GB/s", "latency": "10us"}  # tiny's intra-host link, and the network


def megatron_layer_costs(recompute: bool = False) -> Costs:
    """An embedding (vocabulary-parallel) and one transformer layer: attention and MLP;
    with ``recompute``, each block's backward holds its forward again (``recompute: full``)."""
    again = 1.0 if recompute else 0.0
    layers = (
        LayerCost("embeddings", 4e-4, 6e-4, 4000, (), X),
        LayerCost("h.0.attention", F, B + again * F, 8000, (), X, LAUNCH, reruns_forward=recompute),
        LayerCost(
            "h.0.mlp", 2 * F, 2 * (B + again * F), 16000, (), X, LAUNCH, reruns_forward=recompute
        ),
    )
    return Costs(
        compute_s=sum(x.forward_s + x.backward_s for x in layers),
        grad_nbytes=28000,
        flops_per_replica_step=0.0,
        total_steps=2,
        layers=layers,
    )


def hybrid(data: int = 1, tensor: int = 2, pipeline: int = 2, **changes: object) -> dict:
    """tiny as a hybrid layout, timing-only on gpt2's clock, a host per (copy, stage)."""
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": data, "tensor": tensor, "pipeline": pipeline},
        "micro_batches": 2,
        "schedule": "gpipe",
        "partition": [2, 1],
    }
    return tiny(
        **{
            "numerics": False,
            "workload.model": "gpt2",
            "strategy": strategy,
            "cluster.hosts": data * pipeline,
            "cluster.devices_per_host": tensor,
            "cluster.links.network": LINK,
            **changes,
        }
    )


def micro(seconds: float, launch: float = 0.0) -> float:
    """A layer's time on one of 2 micro-batches: the work halved, the launch whole."""
    return (seconds - launch) / 2 + launch


def split(seconds: float) -> float:
    """A block's micro-batch time on one of 2 tensor ranks."""
    return (micro(seconds, LAUNCH) - LAUNCH) / 2 + LAUNCH


def test_tensor_all_reduces_stage_sends_and_flush_by_hand():
    result = simulate(scenario_from_dict(hybrid()), megatron_layer_costs())
    ar = ring_allreduce_s(2, X / 2, 10e-6, 1e9)  # a micro-batch's activation, 2 ranks
    f0 = micro(4e-4) + ar + split(F) + ar  # stage 0: embedding, g; attention, g
    b0 = split(B) + ar + micro(6e-4)  # attention's backward, f; the embedding's
    f1 = split(2 * F) + ar  # stage 1: the MLP, g
    b1 = split(2 * B) + ar  # the MLP's backward, f (its input is stage 0's activation)
    # the two ranks each send X/2 over the hosts' one network link at once: 2 latencies
    # (NIC out, NIC in) and twice X/2 at the link's 1 GB/s
    p = 2 * 10e-6 + X / 1e9
    e = max(f0 + p + f1, 2 * f0 + p) + f1  # stage 1 ends F1 (gpipe: F0 F1 B1 B0)
    s0_b1 = max(2 * f0, e + b1 + p) + b0
    step = max(s0_b1, e + 2 * b1 + p) + b0
    assert result.summary["simulated_time_s"] == pytest.approx(2 * step, rel=1e-12)
    assert result.summary["tensor_collectives_per_micro_batch"] == 5
    assert result.summary["stage_send_nbytes_per_micro_batch"] == [X // 2]
    sends = result.events[result.events["detail"].isin(["A0", "A1", "G0", "G1"])]
    assert len(sends) == 4 * 2 * 2 * 2  # 4 messages x 2 ranks x 2 steps, on NIC tx and rx


def test_full_recomputation_reruns_each_blocks_forward_all_reduce_by_hand():
    """A recomputed block all-reduces its forward output again before its backward (the
    recomputed forward's compute inside the backward span): one more all-reduce in each
    stage's backward here, on the critical path of every micro-batch."""
    costs = megatron_layer_costs(recompute=True)
    result = simulate(scenario_from_dict(hybrid()), costs)
    ar = ring_allreduce_s(2, X / 2, 10e-6, 1e9)
    f0 = micro(4e-4) + ar + split(F) + ar
    b0 = ar + split(B + F) + ar + micro(6e-4)  # attention recomputed (g again), f, embedding
    f1 = split(2 * F) + ar
    b1 = ar + split(2 * (B + F)) + ar  # the MLP recomputed (g again), its backward, f
    p = 2 * 10e-6 + X / 1e9
    e = max(f0 + p + f1, 2 * f0 + p) + f1
    s0_b1 = max(2 * f0, e + b1 + p) + b0
    step = max(s0_b1, e + 2 * b1 + p) + b0
    assert result.summary["simulated_time_s"] == pytest.approx(2 * step, rel=1e-12)
    assert result.summary["tensor_collectives_per_micro_batch"] == 5 + 2
    recomputed = result.events[result.events["detail"].str.contains("recompute")]
    assert set(recomputed["detail"]) == {
        "tensor all-reduce recompute h.0.attention",
        "tensor all-reduce recompute h.0.mlp",
    }
    assert len(recomputed) == 2 * 2 * 2 * 2  # 2 blocks x 2 micro-batches x 2 ranks x 2 steps


@pytest.mark.parametrize("overlap", [None, True])
@pytest.mark.parametrize("zero", [0, 2])
def test_data_copies_reduce_each_stage_shard_over_the_network(zero, overlap):
    # after the flush, or (overlap_grad_reduce) during each stage's last backward: the same
    # bytes, in one bucket per stage
    one = simulate(scenario_from_dict(hybrid()), megatron_layer_costs())
    changes = {"strategy.zero": zero, "strategy.overlap_grad_reduce": overlap}
    two = simulate(scenario_from_dict(hybrid(data=2, **changes)), megatron_layer_costs())
    # each rank's shard: stage 0 the embedding whole (4000) and half the attention's 8000;
    # stage 1 half the MLP's 16000
    moved = [{"allreduce": 8000}, {"reduce_scatter": 8000, "all_gather": 8000}][zero // 2]
    for shard in two.summary["data_nbytes_per_device_per_step"]:
        assert {op: n for op, n in shard.items() if n} == moved
    # links.csv: copy 0's stage 0 on worker0, copy 1's on worker2; a 2-device ring
    # all-reduce (or reduce-scatter + all-gather) of n sends n out of each device: 2 ranks
    # x 8000 bytes x 2 steps more through worker0's NIC than one copy sends
    before = one.tables["links"].set_index("link")["bytes"]
    after = two.tables["links"].set_index("link")["bytes"]
    assert after["worker0/nic/tx"] - before["worker0/nic/tx"] == pytest.approx(2 * 8000 * 2)
    assert after["worker0/intra"] == before["worker0/intra"]
    data = two.events[two.events["detail"].str.startswith("data ")]
    assert data["start_s"].min() > 0 and len(data) == 8 * 2 * (1 if zero == 0 else 2)


def test_sharding_splits_by_tensor_and_per_zero_stage_by_data():
    scenario = scenario_from_dict(hybrid(data=2, **{"strategy.zero": 1}))
    assert scenario.strategy.sharding(scenario.cluster) == Sharding(2, 2, 4, 1, tensor=2)
    scenario = scenario_from_dict(hybrid(data=2, **{"strategy.zero": 2}))
    assert scenario.strategy.sharding(scenario.cluster) == Sharding(2, 4, 4, 1, tensor=2)


def test_each_device_holds_its_stage_over_the_tensor_group():
    result = simulate(scenario_from_dict(hybrid()), megatron_layer_costs())
    memory = result.summary["memory_per_device"]
    assert set(memory) == {"worker0/gpu0", "worker0/gpu1", "worker1/gpu0", "worker1/gpu1"}
    # stage 0: embedding + attention, 12000 parameter bytes, split over 2 ranks
    assert memory["worker0/gpu0"]["params"] == 6000
    assert memory["worker1/gpu1"]["params"] == 8000


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"cluster.hosts": 3}, "strategy.mesh", "= 4 devices; the cluster has 6"),
        (
            {
                "strategy.mesh": {"data": 1, "tensor": 8, "pipeline": 1},
                "cluster.hosts": 1,
                "cluster.devices_per_host": 8,
            },
            "strategy.mesh.tensor",
            "attention heads (12)",
        ),
        ({"strategy.zero": 3}, "strategy.zero", "DeepSpeed"),
        (
            {"strategy.mesh": {"data": 1, "tensor": 4, "pipeline": 1}, "cluster.hosts": 2},
            "strategy.mesh.tensor",
            "span hosts [0, 1]",
        ),
        ({"strategy.placement": ["data", "tensor"]}, "strategy.placement", "name each"),
        (
            {"numerics": True, "workload.model": "mlp", "workload.timing_model": "gpt2"},
            "numerics",
            "run the zoo's mlp on its own clock",
        ),
        ({"strategy.micro_batches": 3}, "strategy.micro_batches", "e.g. micro_batches: 2"),
    ],
    ids=["devices", "heads", "zero3-pipeline", "across-hosts", "placement", "numerics", "micro"],
)
def test_bad_layouts_name_the_field(changes, field, words):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(hybrid(**changes))
    assert field in str(info.value) and words in str(info.value)


def test_tensor_groups_across_hosts_when_allowed():
    data = hybrid(**{"strategy.mesh": {"data": 1, "tensor": 4, "pipeline": 1}})
    data["strategy"]["cross_host"] = True
    data["strategy"]["partition"] = "auto"
    assert scenario_from_dict(data).strategy.mesh.tensor == 4


def test_a_stage_that_does_not_fit_exits_2_before_the_first_step(tmp_path):
    data = hybrid(**{"workload.batch_size": 2048, "strategy.partition": "auto"})
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data))
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root, "COLUMNS": "400"}
    for command in ("validate", "run"):
        out = subprocess.run(
            [sys.executable, "-m", "simdist", command, str(path), "--out", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 2, out.stderr
        text = " ".join((out.stdout + out.stderr).split())
        assert "strategy.mesh: hybrid stage " in text and "does not fit on worker" in text
        assert " has 14.9 GiB" in text
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize(
    "hidden, data, tensor, pipeline, partition",
    [([16, 8, 12], 1, 2, 2, [2, 2]), ([16, 8, 12], 2, 2, 2, [2, 2])],
    ids=["T2xP2", "D2xT2xP2"],
)
def test_numerics_equal_one_device_with_the_global_batch(hidden, data, tensor, pipeline, partition):
    common = {
        "workload.model": {"name": "mlp", "hidden": hidden},
        "workload.optimizer": {"name": "adam", "learning_rate": 0.01},
        "workload.steps": 3,
        "workload.eval_every": 0,
    }
    one = run(scenario_from_dict(tiny(**common, **{"workload.batch_size": 16})))
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": data, "tensor": tensor, "pipeline": pipeline},
        "micro_batches": 2,
        "partition": partition,
        "zero": 1,
    }
    layout = tiny(
        **common,
        **{
            "workload.batch_size": 16 // data,
            "strategy": strategy,
            "cluster.devices_per_host": data * tensor * pipeline,
        },
    )
    split = run(scenario_from_dict(layout))
    assert split.scenario.global_batch == 16
    assert_trees_close(split.params, one.params, atol=1e-5)
    assert split.summary["final_train_loss"] == pytest.approx(
        one.summary["final_train_loss"], abs=1e-5
    )


def test_sequence_parallel_sends_each_rank_its_slice_of_the_sequence():
    plain = simulate(scenario_from_dict(hybrid()), megatron_layer_costs())
    sp = simulate(
        scenario_from_dict(hybrid(**{"strategy.sequence_parallel": True})),
        megatron_layer_costs(),
    )
    assert sp.summary["stage_send_nbytes_per_micro_batch"] == [X // 4]  # X/2 over 2 ranks
    kinds = sp.events[sp.events["detail"].str.startswith("tensor ")]["detail"].str.split().str[1]
    assert set(kinds) == {"reduce-scatter", "all-gather"}
    # stage 1's input is split by sequence: it all-gathers it before the MLP, and the
    # gradient goes back reduce-scattered
    assert (
        sp.summary["tensor_collectives_per_micro_batch"]
        > plain.summary["tensor_collectives_per_micro_batch"]
    )


def two_bucket_costs(mlp_grad_nbytes: int) -> Costs:
    """:func:`megatron_layer_costs` with the MLP's gradient ``mlp_grad_nbytes``."""
    base = megatron_layer_costs()
    layers = (*base.layers[:2], replace(base.layers[2], grad_nbytes=mlp_grad_nbytes))
    return replace(base, layers=layers, grad_nbytes=12000 + mlp_grad_nbytes)


@pytest.mark.parametrize("overlap", [False, True])
def test_overlapped_data_reduction_goes_bucket_by_bucket_during_the_backward(overlap):
    # 2 copies of one device each (a host each), one micro-batch; the MLP's 300 MB gradient
    # is past Megatron's bucket of 40M elements (160 MB in float32): a bucket of its own,
    # ready once its backward ends; the attention's and embedding's 12000 bytes the second,
    # ready at the backward's end
    changes = {
        "strategy.mesh.pipeline": 1,
        "strategy.partition": "auto",
        "strategy.micro_batches": 1,
        "strategy.overlap_grad_reduce": overlap,
    }
    scenario = scenario_from_dict(hybrid(data=2, tensor=1, pipeline=1, **changes))
    result = simulate(scenario, two_bucket_costs(300_000_000))

    def ar(nbytes: float) -> float:  # the two devices' ring all-reduce over their NICs
        return ring_allreduce_s(2, nbytes, 10e-6, 1e9)

    forward = 4e-4 + F + 2 * F
    if overlap:
        step = forward + 2 * B + ar(300_000_000) + ar(12000)  # the rest of backward hidden
    else:
        step = forward + 2 * B + B + 6e-4 + ar(300_012_000)
    assert result.summary["simulated_time_s"] == pytest.approx(2 * step, rel=1e-12)
    data = result.events[result.events["detail"].str.startswith("data ")]
    if overlap:
        first = data[data["detail"] == "data all-reduce bucket 1 stage 0"]
        assert first["start_s"].min() == pytest.approx(forward + 2 * B, rel=1e-12)
    assert result.summary["data_nbytes_per_device_per_step"] == [
        {"allreduce": 300_012_000, "reduce_scatter": 0, "all_gather": 0}
    ]


def test_overlapped_data_plan_buckets_in_backward_order_then_gathers():
    # three backward spans of 6, 3 and 5 bytes under a cap of 8: buckets [6], [3 + 5]
    plan, closes = overlapped_data_plan([6, 3, 5], zero=2, cap_nbytes=8, label="stage 0")
    assert [(c.op, c.nbytes) for c in plan.collectives] == [
        ("reduce_scatter", 6),
        ("reduce_scatter", 8),
        ("all_gather", 14),
    ]
    assert closes == {0: 0, 2: 1}
    assert plan.program == [
        Compute(0, "backward"),
        Issue(0),
        Compute(1, "backward"),
        Wait(0),
        Issue(1),
        Wait(1),
        Issue(2),
        Wait(2),
    ]
