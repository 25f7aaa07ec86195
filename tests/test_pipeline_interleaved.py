"""The interleaved 1F1B schedule (``schedule: interleaved``, ``virtual_stages: v``) for
``pipeline`` and ``hybrid``: Megatron-LM's order, the step and bubble by hand, the
messages, the refusals, memory and numerics.

Hand cases as tests/test_pipeline.py's: one layer per model chunk, forward F and backward
B per micro-batch on every chunk, free links. Narayanan et al. 2021 (arXiv:2104.04473,
Sec. 2.2.2): with v chunks per device the bubble is (S − 1)/v of a device's (F + B)·v, so
a step lasts (M + (S − 1)/v)·v·(F + B) = (v·M + S − 1)(F + B) in chunk times.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_trees_close, tiny
from test_hybrid import hybrid
from test_pipeline import B, F, pipeline
from test_pipeline_numerics import pipeline_scenario

from simdist.errors import ScenarioError
from simdist.runtime.engine import run as engine_run
from simdist.runtime.engine import simulate
from simdist.runtime.preflight import preflight
from simdist.scenario import scenario_from_dict
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.pipeline.plan import chunks_at_peak, interleaved_ops


def chunk_costs(
    n: int, M: int, steps: int = 2, out: int = 0, names: list[str] | None = None, param: int = 100
) -> Costs:
    """``n`` equal layers, each F·M forward and B·M backward on the batch, ``out`` bytes of
    output and ``param`` of parameters each."""
    names = names or [f"l{i}" for i in range(n)]
    layers = tuple(LayerCost(names[i], F * M, B * M, param, (), out) for i in range(n))
    return Costs(
        compute_s=n * (F + B) * M,
        grad_nbytes=param * n,
        flops_per_replica_step=0.0,
        total_steps=steps,
        layers=layers,
    )


def interleaved(S: int, V: int, M: int, **strategy: object) -> dict:
    return pipeline(S, M, "interleaved", virtual_stages=V, **strategy)


# -- the order ----------------------------------------------------------------------------


def test_megatron_order_by_hand():
    # S = 2, v = 2, M = 4. Megatron's table (microbatch_group_size_per_vp_stage = S = 2):
    # virtual micro-batch 0..7 -> (m, chunk) (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1).
    # Device 0 warms up (2 - 0 - 1)·2 + (2 - 1)·2 = 4 forwards, device 1 2.
    ops = interleaved_ops(2, 2, 4)
    assert ops[0] == [
        ("F", 0, 0), ("F", 1, 0), ("F", 0, 2), ("F", 1, 2),
        ("F", 2, 0), ("B", 0, 2), ("F", 3, 0), ("B", 1, 2),
        ("F", 2, 2), ("B", 0, 0), ("F", 3, 2), ("B", 1, 0),
        ("B", 2, 2), ("B", 3, 2), ("B", 2, 0), ("B", 3, 0),
    ]  # fmt: skip
    assert ops[1][:4] == [("F", 0, 1), ("F", 1, 1), ("F", 0, 3), ("B", 0, 3)]


@pytest.mark.parametrize("S, V, M", [(2, 2, 4), (4, 2, 8), (4, 3, 4), (3, 2, 6)])
def test_each_device_runs_every_pass_of_its_chunks_once_after_its_warm_up(S, V, M):
    for d, ops in enumerate(interleaved_ops(S, V, M)):
        chunks = range(d, S * V, S)
        assert sorted(ops) == sorted(itertools.product("BF", range(M), chunks))
        warmup = min((S - d - 1) * 2 + (V - 1) * S, M * V)
        assert [k for k, _, _ in ops[:warmup]] == ["F"] * warmup
        assert ops[warmup][0] == ("B" if warmup == M * V else "F")
        # a micro-batch's chunks go forward in chunk order and backward in reverse
        for m in range(M):
            mine = [(k, j) for k, x, j in ops if x == m]
            assert [j for k, j in mine if k == "F"] == list(chunks)
            assert [j for k, j in mine if k == "B"] == list(reversed(chunks))


# -- the clock ----------------------------------------------------------------------------


@pytest.mark.parametrize("S, V, M", [(2, 2, 4), (4, 2, 8), (4, 4, 8), (4, 3, 4), (2, 2, 2)])
def test_step_and_bubble_by_hand(S, V, M):
    result = simulate(scenario_from_dict(interleaved(S, V, M)), chunk_costs(S * V, M))
    summary = result.summary
    assert summary["simulated_time_s"] == pytest.approx(2 * (V * M + S - 1) * (F + B), abs=1e-12)
    # Narayanan's bubble (S − 1)/(v·M) of the ideal time, as a share of the step
    assert summary["bubble_fraction"] == pytest.approx((S - 1) / (V * M + S - 1), abs=1e-12)
    assert summary["bubble_fraction_ideal"] == (S - 1) / (V * M + S - 1)
    assert summary["pipeline"]["virtual_stages"] == V
    assert summary["pipeline"]["partition"] == [1] * (S * V)


def test_hybrid_step_and_bubble_by_hand():
    S, V, M = 4, 2, 8
    names = [f"h.{i // 2}.{'attention' if i % 2 == 0 else 'mlp'}" for i in range(S * V)]
    free = {"bandwidth": "1GB/s", "latency": "0us"}
    data = hybrid(
        data=2,
        tensor=1,
        pipeline=S,
        **{
            "strategy.schedule": "interleaved",
            "strategy.virtual_stages": V,
            "strategy.micro_batches": M,
            "strategy.partition": [1] * (S * V),
            "workload.batch_size": 8 * M,
            "cluster.links.network": free,
            "cluster.links.intra_host": free,
        },
    )
    result = simulate(scenario_from_dict(data), chunk_costs(S * V, M, names=names, param=0))
    assert result.summary["simulated_time_s"] == pytest.approx(2 * (V * M + S - 1) * (F + B))
    assert result.summary["bubble_fraction"] == pytest.approx((S - 1) / (V * M + S - 1))
    assert result.summary["hybrid"]["virtual_stages"] == V
    # device 0 holds at most (S − 1)·2 + (v − 1)·S + 1 chunk micro-batches
    assert result.summary["peak_in_flight_per_stage"] == [11, 9, 7, 5]


def test_messages_cross_every_chunk_boundary_with_the_wrap():
    S, V, M = 4, 2, 8
    one = simulate(scenario_from_dict(pipeline(S, M, "1f1b")), chunk_costs(S, M, 1, out=4000))
    both = simulate(scenario_from_dict(interleaved(S, V, M)), chunk_costs(S * V, M, 1, out=4000))

    def sends(result):
        comm = result.events[result.events["kind"] == "comm"]
        return comm.drop_duplicates(["detail", "device", "start_s"])

    # an activation and a gradient per micro-batch at each of the S·v − 1 chunk boundaries:
    # (S·v − 1)/(S − 1) = 7/3 times 1f1b's, v times as many as S − 1 boundaries in the limit
    a, b = sends(one), sends(both)
    per_device_one = a.groupby("device").size().sum()
    per_device_both = b.groupby("device").size().sum()
    assert per_device_one * (S * V - 1) == per_device_both * (S - 1)
    # the wrap: device S − 1 sends chunk S − 1's output to device 0 (chunk S)
    rows = both.events[(both.events["kind"] == "comm") & (both.events["detail"] == "A0/c3")]
    assert {"worker0/gpu3", "worker0/gpu0"} <= set(rows["device"])
    # compute spans name their chunk: device 0 runs micro-batch 0 through chunks 0 and 4
    compute = both.events[
        (both.events["kind"] == "compute") & (both.events["device"] == "worker0/gpu0")
    ]
    assert list(compute["detail"])[:5] == ["F0/c0", "F1/c0", "F2/c0", "F3/c0", "F0/c4"]


# -- memory -------------------------------------------------------------------------------


@pytest.mark.parametrize("S, V", [(4, 2), (4, 4), (8, 2), (2, 3)])
def test_first_stage_holds_korthikantis_interleaved_share(S, V):
    # equal chunks: device 0 at its peak holds (S − 1)·2 + (v − 1)·S + 1 chunk micro-batches
    # = S·(1 + (S − 1)/(S·v)) micro-batches of its whole stage (Korthikanti et al. 2022,
    # Sec. 4.2.3), against 1f1b's S.
    M = 4 * S
    peak = chunks_at_peak(interleaved_ops(S, V, M)[0], lambda j: 1.0)
    assert sum(peak.values()) / V == pytest.approx(S * (1 + (S - 1) / (S * V)))


def test_device_memory_counts_its_chunks_at_the_peak():
    # every layer's stored input is the previous layer's output (500 bytes a micro-batch);
    # device 1 (chunks 1 and 5 of 8) holds (4 − 1 − 1)·2 + 4 + 1 = 9 chunk micro-batches
    S, V, M = 4, 2, 8
    result = simulate(scenario_from_dict(interleaved(S, V, M)), chunk_costs(8, M, 1, out=4000))
    memory = result.summary["memory_per_device"]["worker0/gpu1"]
    assert memory["activations"] == 9 * 500
    assert memory["params"] == 2 * 100


# -- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy, message",
    [
        (
            {"schedule": "1f1b", "virtual_stages": 2},
            "strategy.virtual_stages: got 2; model chunks per device are the interleaved "
            "schedule's, and schedule is 1f1b: use schedule: interleaved, or leave "
            "virtual_stages out",
        ),
        (
            {"schedule": "interleaved"},
            "strategy.virtual_stages: got 1; schedule interleaved gives each device at least "
            "2 model chunks, e.g. virtual_stages: 2",
        ),
        (
            {"schedule": "interleaved", "virtual_stages": 2, "micro_batches": 6},
            "strategy.micro_batches: got 6; schedule interleaved runs micro-batches in groups "
            "of the 4 stages (strategy.stages), as Megatron-LM does: use a multiple of 4, "
            "e.g. micro_batches: 4",
        ),
    ],
    ids=["without-interleaved", "v-below-2", "micro-batches"],
)
def test_pipeline_refusals(strategy, message):
    data = pipeline(4, strategy.pop("micro_batches", 8), **strategy)
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    assert message in " ".join(str(info.value).split())


def test_hybrid_refuses_micro_batches_not_a_multiple_of_its_stages():
    interleaving = {
        "strategy.schedule": "interleaved",
        "strategy.virtual_stages": 2,
        "strategy.micro_batches": 3,
        "workload.batch_size": 6,
    }
    data = hybrid(pipeline=2, **interleaving)
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    assert (
        "strategy.micro_batches: got 3; schedule interleaved runs micro-batches in groups of "
        "the 2 stages (strategy.mesh.pipeline), as Megatron-LM does: use a multiple of 2, "
        "e.g. micro_batches: 2"
    ) in " ".join(str(info.value).split())


def test_too_few_layers_for_the_chunks_is_refused_before_the_first_step():
    # the mlp of tests/test_pipeline_numerics has 3 layers: 2 stages x 2 chunks need 4
    scenario = pipeline_scenario(
        stages=2, micro_batches=2, schedule="interleaved", virtual_stages=2
    )
    with pytest.raises(ScenarioError) as info:
        preflight(scenario, source="s.yaml")
    assert (
        "strategy.virtual_stages: got 2; schedule interleaved cuts the model into 2 stages x "
        "2 = 4 model chunks of one layer at least, and the model has 3 layers (Dense_0, "
        "Dense_1, Dense_2), e.g. virtual_stages: 2"
    ) in " ".join(str(info.value).split())


# -- numerics -----------------------------------------------------------------------------


def test_interleaved_trains_exactly_as_one_device():
    # The step's arithmetic does not depend on the order: every micro-batch's gradient from
    # the same weights, summed, one update; so 4 chunks on 2 devices in Megatron's order
    # equal one_device on the global batch within 1f1b's tolerance.
    mlp = {"name": "mlp", "hidden": [16, 16, 16]}  # 4 layers: one per chunk
    common = {"workload.model": mlp, "workload.steps": 20, "workload.eval_every": 0}
    data = tiny(
        **common,
        **{
            "workload.batch_size": 16,
            "cluster.devices_per_host": 2,
            "strategy": {
                "kind": "pipeline",
                "stages": 2,
                "micro_batches": 4,
                "schedule": "interleaved",
                "virtual_stages": 2,
            },
        },
    )
    pipe = engine_run(scenario_from_dict(data))
    base = engine_run(scenario_from_dict(tiny(**common, **{"workload.batch_size": 16})))
    assert pipe.summary["pipeline"]["partition"] == [1, 1, 1, 1]
    assert_trees_close(pipe.params, base.params, atol=1e-6)
    np.testing.assert_allclose(
        pipe.metrics[pipe.metrics.metric == "train_loss"]["value"].to_numpy(),
        base.metrics[base.metrics.metric == "train_loss"]["value"].to_numpy(),
        atol=1e-6,
    )


def test_oom_check_counts_the_interleaved_share():
    # gpt2 on 2 v100s, 8 micro-batches of 7: 1f1b's stage 0 (13 layers, 2 micro-batches in
    # flight) fits in 14.9 GiB; interleaved's device 0 holds 5 chunk micro-batches of about
    # 6.5 layers, 1 + (S − 1)/(S·v) = 1.25 times as much, and is refused before the run.
    def scenario(**strategy: object):
        return scenario_from_dict(
            tiny(
                **{
                    "numerics": False,
                    "workload.model": "gpt2",
                    "workload.batch_size": 56,
                    "cluster.devices_per_host": 2,
                    "strategy": {"kind": "pipeline", "stages": 2, "micro_batches": 8, **strategy},
                }
            )
        )

    preflight(scenario(schedule="1f1b", partition=[13, 13]), source="s.yaml")
    chunks = scenario(schedule="interleaved", virtual_stages=2, partition=[7, 6, 6, 7])
    with pytest.raises(ScenarioError) as info:
        preflight(chunks, source="s.yaml")
    assert (
        "s.yaml: strategy.partition: pipeline stage 0 (model chunks 0, 2: layers "
        "embeddings..h.2.mlp, h.6.attention..h.8.mlp) does not fit on worker0/gpu0: it needs "
        "16.8 GiB"
    ) in " ".join(str(info.value).split())


def test_hybrid_interleaved_trains_exactly_as_one_device():
    # T 2 × P 2 × v 2 on the mlp's 8 dense layers (4 column/row pairs, one a chunk): the
    # numerics cut the same layers into 2 stages of 2 chunks; the arithmetic is 1f1b's
    mlp = {"name": "mlp", "hidden": [16] * 7}
    common = {
        "workload.model": mlp,
        "workload.optimizer": {"name": "adam", "learning_rate": 0.01},
        "workload.steps": 3,
        "workload.eval_every": 0,
    }
    one = engine_run(scenario_from_dict(tiny(**common, **{"workload.batch_size": 16})))
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": 1, "tensor": 2, "pipeline": 2},
        "micro_batches": 2,
        "schedule": "interleaved",
        "virtual_stages": 2,
        "partition": [2, 2, 2, 2],
    }
    layout = tiny(
        **common,
        **{"workload.batch_size": 16, "strategy": strategy, "cluster.devices_per_host": 4},
    )
    split = engine_run(scenario_from_dict(layout))
    assert split.summary["hybrid"]["virtual_stages"] == 2
    assert_trees_close(split.params, one.params, atol=1e-5)
    assert split.summary["final_train_loss"] == pytest.approx(
        one.summary["final_train_loss"], abs=1e-5
    )
