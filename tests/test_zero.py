"""zero (ZeRO stages 1–3) and fsdp: sharded numerics ≡ one_device, exact step times, the bytes
each stage moves, its plan, its sharding and its errors."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from helpers import tiny

from simdist.collectives import ring_allreduce_s, ring_reduce_scatter_s
from simdist.errors import ScenarioError
from simdist.runtime.engine import run, simulate
from simdist.scenario import scenario_from_dict
from simdist.sharding import Sharding
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.sharded_plan import (
    ShardingPlanOptions,
    byte_buckets,
    plan_step,
    reduce_buckets,
)
from simdist.strategies.steps import Compute, Issue, Wait

OPTIMIZERS = {
    "sgd": {"name": "sgd", "learning_rate": 0.1},
    "momentum": {"name": "momentum", "learning_rate": 0.1, "momentum": 0.9},
    "adam": {"name": "adam", "learning_rate": 0.01},
}
INTRA_ALPHA, INTRA_B = 10e-6, 1e9  # tiny's intra-host link
N = 4


def exact(value: float) -> object:
    return pytest.approx(value, rel=1e-12)


def zero(strategy: dict, optimizer: str = "sgd", **changes: object) -> dict:
    """tiny on 4 devices of one host (global batch 32) with ``strategy``."""
    return tiny(
        **{
            "strategy": strategy,
            "cluster.devices_per_host": N,
            "workload.optimizer": OPTIMIZERS[optimizer],
            **changes,
        }
    )


# ------------------------------------------------------------------ numerics


@pytest.fixture(scope="module")
def one_device():
    """one_device's final parameters with the global batch (4 x 8 = 32), per optimizer."""
    return {
        name: run(
            scenario_from_dict(tiny(**{"workload.batch_size": 32, "workload.optimizer": spec}))
        ).params
        for name, spec in OPTIMIZERS.items()
    }


def assert_same_tree(a, b, atol: float = 1e-5) -> None:
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_equals_one_device_with_the_global_batch(stage, optimizer, one_device):
    result = run(scenario_from_dict(zero({"kind": "zero", "stage": stage}, optimizer)))
    assert result.scenario.global_batch == 32
    assert result.summary["execution"] == "devices"
    assert result.summary["zero_stage"] == stage
    assert_same_tree(result.params, one_device[optimizer])


@pytest.mark.parametrize(
    "data",
    [
        zero({"kind": "fsdp", "backward_prefetch": "backward_post"}, "adam"),
        zero({"kind": "zero", "stage": 3, "execution": "batched"}, "adam"),
        zero(
            {"kind": "zero", "stage": 2},
            "adam",
            **{"cluster.hosts": 2, "cluster.devices_per_host": 2},
        ),
    ],
    ids=["fsdp", "zero3-batched", "zero2-2x2-hosts"],
)
def test_fsdp_batched_and_several_hosts_equal_one_device(data, one_device):
    result = run(scenario_from_dict(data))
    assert result.scenario.replicas == 4
    assert_same_tree(result.params, one_device["adam"])


def test_same_seed_gives_identical_runs():
    data = zero({"kind": "zero", "stage": 3}, "adam", **{"workload.steps": 4})
    a, b = (run(scenario_from_dict(data)) for _ in range(2))
    assert a.events.equals(b.events) and a.metrics.equals(b.metrics)
    for x, y in zip(
        jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params), strict=True
    ):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


# ------------------------------------------------------------------ timing (no JAX)

S = 1_000_000  # gradient bytes of a layer
F, B = 1e-3, 2e-3  # a layer's forward and backward seconds


def costs(*layers: LayerCost, steps: int = 1) -> Costs:
    return Costs(
        compute_s=sum(layer.forward_s + layer.backward_s for layer in layers),
        grad_nbytes=sum(layer.grad_nbytes for layer in layers),
        flops_per_replica_step=0.0,
        total_steps=steps,
        layers=layers,
        param_nbytes=sum(layer.param_nbytes for layer in layers),
    )


def simulated(strategy: dict, cost: Costs, **changes: object):
    data = zero(strategy, **{"workload.steps": cost.total_steps, **changes})
    return simulate(scenario_from_dict({**data, "numerics": False}), cost)


def ring_gather(nbytes: float) -> float:
    """A ring all-gather (or reduce-scatter) of ``nbytes`` over tiny's 4 devices."""
    return ring_reduce_scatter_s(N, nbytes, INTRA_ALPHA, INTRA_B)


def test_one_zero3_layer_is_gather_forward_gather_backward_reduce_scatter():
    result = simulated({"kind": "zero", "stage": 3}, costs(LayerCost("dense", F, B, S)))
    a = ring_gather(S)
    assert a == 3 * (INTRA_ALPHA + S / (4 * INTRA_B))
    assert result.summary["simulated_time_s"] == exact(a + F + a + B + a)
    comm = result.events[
        (result.events["kind"] == "comm") & (result.events["device"].str.endswith("gpu0"))
    ]
    assert list(comm["detail"]) == [
        "all-gather forward 1/1",
        "all-gather backward 1/1",
        "reduce-scatter bucket 1",
    ]
    assert list(comm["end_s"] - comm["start_s"]) == pytest.approx([a, a, a], rel=1e-12)
    assert set(comm["nbytes"]) == {S}


def test_fsdp_without_resharding_gathers_once():
    result = simulated(
        {"kind": "fsdp", "reshard_after_forward": False}, costs(LayerCost("dense", F, B, S))
    )
    a = ring_gather(S)
    assert result.summary["simulated_time_s"] == exact(a + F + B + a)


@pytest.mark.parametrize(
    "strategy, parts",
    [
        ({"kind": "zero", "stage": 1}, lambda a, r: [F, B, r, a]),
        ({"kind": "zero", "stage": 2}, lambda a, r: [F, B, a, a]),
    ],
    ids=["stage1", "stage2"],
)
def test_stages_1_and_2_reduce_then_gather_the_updated_parameters(strategy, parts):
    result = simulated(strategy, costs(LayerCost("dense", F, B, S)))
    a, r = ring_gather(S), ring_allreduce_s(N, S, INTRA_ALPHA, INTRA_B)
    assert result.summary["simulated_time_s"] == exact(sum(parts(a, r)))


def two_layers() -> Costs:
    return costs(LayerCost("l0", F, B, S), LayerCost("l1", F, B, S))


def test_prefetch_overlaps_the_next_gather_with_compute():
    # F and B exceed a gather (0.78 ms), so each prefetched gather hides behind compute:
    # gather l0 | F l0 (gather l1 under it) | F l1 | gather l1 again | B l1 (gather l0
    # under it) | B l0 (reduce-scatter l1 under it) | reduce-scatter l0.
    cap = {"reduce_bucket_size": S}  # one bucket per layer
    a = ring_gather(S)
    assert a < F
    on = simulated({"kind": "zero", "stage": 3, **cap}, two_layers())
    assert on.summary["simulated_time_s"] == exact(3 * a + 2 * F + 2 * B)
    fsdp = simulated({"kind": "fsdp"}, two_layers())
    assert fsdp.summary["simulated_time_s"] == exact(3 * a + 2 * F + 2 * B)
    # Without prefetching every gather is exposed, and backward's second gather queues
    # behind the first reduce-scatter.
    off = simulated({"kind": "zero", "stage": 3, "prefetch": False, **cap}, two_layers())
    assert off.summary["simulated_time_s"] == exact(6 * a + 2 * F + 2 * B)
    none = simulated({"kind": "fsdp", "backward_prefetch": "none"}, two_layers())
    assert none.summary["simulated_time_s"] == exact(5 * a + 2 * F + 2 * B)
    # backward_post: the gather of l0 after B l1, before its reduce-scatter.
    post = simulated({"kind": "fsdp", "backward_prefetch": "backward_post"}, two_layers())
    assert post.summary["simulated_time_s"] == exact(4 * a + 2 * F + 2 * B)


def test_reduce_scatter_moves_three_quarters_of_the_gradient_per_device():
    # 4 hosts of one device: each NIC carries what its device sends. P != S tells the
    # gradient's reduce-scatter from the parameters' all-gather.
    p = 400_000
    network = {"bandwidth": "1GB/s", "latency": "10us"}
    layer = LayerCost("dense", F, B, S, param_nbytes=p)
    hosts = {"cluster.hosts": N, "cluster.devices_per_host": 1, "cluster.links.network": network}
    moved = {}
    for stage in (1, 2, 3):
        result = simulated({"kind": "zero", "stage": stage}, costs(layer, steps=2), **hosts)
        links = result.tables["links"].set_index("link")["bytes"]
        tx = [links[f"worker{h}/nic/tx"] for h in range(N)]
        assert len(set(tx)) == 1
        moved[stage] = tx[0] / 2  # per step
        assert result.summary["reduce_scatter_nbytes_per_step"] == (S if stage > 1 else 0)
    share = (N - 1) / N
    # (the link tables integrate rates over time: equal up to float rounding)
    assert moved[1] == exact(2 * share * S + share * p)  # all-reduce = reduce-scatter + gather
    assert moved[2] == exact(share * S + share * p)
    assert moved[3] == exact(share * S + 2 * share * p)  # gathered for forward and backward


def test_timing_without_a_layer_profile_splits_the_step_one_to_two():
    cost = Costs(compute_s=3e-3, grad_nbytes=S, flops_per_replica_step=0.0, total_steps=1)
    result = simulated({"kind": "zero", "stage": 3}, cost)
    a = ring_gather(S)
    assert result.summary["simulated_time_s"] == exact(a + 1e-3 + a + 2e-3 + a)


# ------------------------------------------------------------------ the plan (pure)


def test_reduce_buckets_close_at_the_layer_whose_backward_fills_them():
    layers = [LayerCost(f"l{i}", 0, 0, n) for i, n in enumerate([100, 0, 50, 30])]
    assert reduce_buckets(layers, 1) == [(3, 30), (2, 50), (0, 100)]
    assert reduce_buckets(layers, 80) == [(2, 80), (0, 100)]
    assert reduce_buckets(layers, 10**9) == [(0, 180)]
    assert byte_buckets(250, 100) == [100, 100, 50]
    assert byte_buckets(50, 100) == [50]


def test_backward_prefetch_orders_the_next_gather_around_the_reduce_scatter():
    layers = [LayerCost("l0", F, B, S), LayerCost("l1", F, B, S)]

    def backward(prefetch: str) -> str:
        """The backward program in short: Ig / Wg (issue / wait a gather), B, Irs (issue a
        reduce-scatter)."""
        plan = plan_step(layers, ShardingPlanOptions(3, backward_prefetch=prefetch))
        short = {"all_gather": "g", "reduce_scatter": "rs"}
        program = plan.program[plan.program.index(Compute(1, "forward")) + 1 :]
        return " ".join(
            "B"
            if isinstance(op, Compute)
            else f"{type(op).__name__[0]}{short[plan.collectives[op.index].op]}"
            for op in program
        )

    assert backward("backward_pre") == "Ig Wg Ig B Irs Wg B Irs Wrs"
    assert backward("backward_post") == "Ig Wg B Ig Irs Wg B Irs Wrs"
    assert backward("none") == "Ig Wg B Irs Ig Wg B Irs Wrs"
    assert isinstance(plan_step(layers, ShardingPlanOptions(3)).program[-1], Wait)
    assert not any(isinstance(op, Issue) for op in plan_step([], ShardingPlanOptions(2)).program)


# ------------------------------------------------------------------ spec


def test_sharding_follows_the_stage():
    cluster = scenario_from_dict(zero({"kind": "zero", "stage": 1})).cluster

    def sharding(strategy: dict) -> Sharding:
        return scenario_from_dict(zero(strategy)).strategy.sharding(cluster)

    assert sharding({"kind": "zero", "stage": 1}) == Sharding(optimizer=4)
    assert sharding({"kind": "zero", "stage": 2}) == Sharding(gradients=4, optimizer=4)
    full = Sharding(params=4, gradients=4, optimizer=4)
    assert sharding({"kind": "zero", "stage": 3}) == full
    assert sharding({"kind": "fsdp"}) == full


@pytest.mark.parametrize(
    "strategy, message",
    [
        ({"kind": "zero", "stage": 4}, "strategy.stage: got 4; expected one of '1', '2', '3'"),
        (
            {"kind": "zero", "stage": 1, "prefetch": True},
            "strategy.prefetch: got prefetch with stage 1; only stage 3 gathers parameters",
        ),
        (
            {"kind": "zero", "stage": 3, "allgather_bucket_size": "1MB"},
            "strategy.allgather_bucket_size: got allgather_bucket_size with stage 3",
        ),
        ({"kind": "fsdp", "stage": 3}, "strategy.stage: unknown key 'stage'"),
        (
            {"kind": "fsdp", "backward_prefetch": "pre"},
            "strategy.backward_prefetch: got 'pre'; expected one of 'backward_pre'",
        ),
    ],
    ids=["stage4", "prefetch-stage1", "allgather-stage3", "fsdp-stage", "fsdp-prefetch"],
)
def test_bad_options_give_one_clear_error(strategy, message):
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(zero(strategy))
    assert message in str(caught.value)
    assert "Traceback" not in str(caught.value)


def test_hierarchical_needs_equal_hosts():
    data = zero(
        {"kind": "zero", "stage": 2, "algorithm": "hierarchical"},
        **{"cluster.hosts": None, "cluster.devices_per_host": None},
    )
    data["cluster"] = {
        **{k: v for k, v in data["cluster"].items() if v is not None},
        "hosts": [{"name": "a", "devices": 2}, {"name": "b", "devices": 1}],
    }
    with pytest.raises(ScenarioError, match=re.escape("strategy.algorithm: got 'hierarchical'")):
        scenario_from_dict(data)
