"""multi_worker_mirrored, central_storage and tpu: numerics, exact step times, TF_CONFIG."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import tiny

from simdist.errors import ScenarioError
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from simdist.strategies.multi_worker_mirrored import (
    chief_eval_s,
    pack_sizes,
    resolve_communication,
)

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

# mlp 64-16-10 in float32: (64*16 + 16 + 16*10 + 10) * 4 bytes
S = (64 * 16 + 16 + 16 * 10 + 10) * 4
C = 1e-3  # tiny's fixed compute time
STEPS = 12
EVALS = 3  # tiny evaluates after steps 5, 10 and 12
N_TEST = 359  # digits: round(1797 * 0.2) test examples
INTRA_ALPHA, INTRA_B = 10e-6, 1e9  # tiny's intra-host link
NET_ALPHA, NET_B = 50e-6, 100e6


def exact(value: float) -> object:
    return pytest.approx(value, rel=1e-12)


def ring(n: int, nbytes: float, alpha: float, bandwidth: float) -> float:
    return 2 * (n - 1) * (alpha + nbytes / (n * bandwidth))


def mwm(hosts: int, per_host: int, **changes: object) -> dict:
    return tiny(
        **{
            "strategy.kind": "multi_worker_mirrored",
            "cluster.hosts": hosts,
            "cluster.devices_per_host": per_host,
            "cluster.links.network": {"bandwidth": NET_B, "latency": NET_ALPHA},
            **changes,
        }
    )


def simulated(data: dict, numerics: bool = True) -> float:
    return run(scenario_from_dict({**data, "numerics": numerics})).summary["simulated_time_s"]


# ------------------------------------------------------------------ numerics


@pytest.fixture(scope="module")
def one_device_params():
    return run(scenario_from_dict(tiny(**{"workload.batch_size": 32}))).params


@pytest.mark.parametrize(
    "data",
    [
        mwm(2, 2, **{"strategy.communication": "ring"}),
        mwm(2, 2, **{"strategy.communication": "nccl", "strategy.bytes_per_pack": 2000}),
        mwm(4, 1, **{"strategy.execution": "devices"}),
        tiny(**{"strategy.kind": "central_storage", "cluster.devices_per_host": 4}),
        tiny(**{"strategy": {"kind": "tpu", "topology": [2, 2]}}),
    ],
    ids=["mwm-ring", "mwm-nccl-packs", "mwm-devices", "central_storage", "tpu"],
)
def test_sync_strategy_equals_one_device_with_the_global_batch(data, one_device_params):
    result = run(scenario_from_dict(data))
    assert result.scenario.global_batch == 32
    for a, b in zip(
        jax.tree_util.tree_leaves(result.params),
        jax.tree_util.tree_leaves(one_device_params),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ multi_worker_mirrored


def test_pack_sizes_and_chief_eval_cost():
    assert pack_sizes(S, 0) == [S]
    assert pack_sizes(S, 2000) == [2000, 2000, 840]
    assert pack_sizes(S, 2420) == [2420, 2420]
    assert pack_sizes(S, 10**6) == [S]
    # forward over ⌈359/2⌉ = 180 test examples per chief device, a third of a
    # training step's 8 examples each: 1ms · 180 / 24.
    assert chief_eval_s(C, 8, N_TEST, 2) == exact(7.5e-3)
    assert resolve_communication("auto", "gpu") == "nccl"
    assert resolve_communication("auto", "tpu") == "ring"
    assert resolve_communication("ring", "gpu") == "ring"


def test_mwm_ring_step_is_compute_plus_network_ring_and_the_chief_evaluates():
    result = run(scenario_from_dict(mwm(2, 2, **{"strategy.communication": "ring"})))
    allreduce = ring(4, S, NET_ALPHA, NET_B)
    eval_s = C * 180 / (3 * 8)
    assert result.summary["simulated_time_s"] == exact(STEPS * (C + allreduce) + EVALS * eval_s)
    assert result.summary["allreduce_s"] == exact(allreduce)
    assert result.summary["algbw_Bps"] == exact(S / allreduce)
    assert result.summary["busbw_Bps"] == exact(S / allreduce * 2 * 3 / 4)
    evals = result.events.query("kind == 'eval'")
    assert set(evals["host"]) == {"worker0"}
    assert len(evals) == EVALS * 2
    assert list(evals["step"].drop_duplicates()) == [5, 10, 12]
    assert (evals["end_s"] - evals["start_s"]).to_numpy() == pytest.approx(eval_s, rel=1e-12)
    # The other worker waits for the chief at the barrier of the step after an eval.
    idle = result.events.query("kind == 'idle' and host == 'worker1' and step == 5")
    assert (idle["end_s"] - idle["start_s"]).to_numpy() == pytest.approx(eval_s, rel=1e-9)
    # Test metrics are stamped when the chief has finished.
    acc = result.metrics.query("metric == 'test_accuracy'")
    assert acc["time_s"].iloc[-1] == exact(result.summary["simulated_time_s"])


def test_mwm_nccl_step_is_compute_plus_hierarchical_allreduce():
    result = run(scenario_from_dict(mwm(2, 4, **{"strategy.communication": "nccl"})))
    intra = 2 * 3 * (INTRA_ALPHA + S / (4 * INTRA_B))
    allreduce = intra + ring(2, S, NET_ALPHA, NET_B)
    eval_s = C * 90 / (3 * 8)
    assert result.summary["simulated_time_s"] == exact(STEPS * (C + allreduce) + EVALS * eval_s)
    assert result.summary["communication"] == "nccl"  # given explicitly
    assert result.summary["busbw_Bps"] == exact(S / allreduce * 2 * 7 / 8)


def test_mwm_packs_run_back_to_back_each_paying_latency():
    data = mwm(2, 2, **{"strategy.communication": "ring", "strategy.bytes_per_pack": 2000})
    result = run(scenario_from_dict({**data, "numerics": False}))
    allreduce = sum(ring(4, p, NET_ALPHA, NET_B) for p in (2000, 2000, 840))
    eval_s = C * 180 / (3 * 8)
    assert result.summary["simulated_time_s"] == exact(STEPS * (C + allreduce) + EVALS * eval_s)
    assert allreduce == exact(ring(4, S, NET_ALPHA, NET_B) + 2 * 2 * 3 * NET_ALPHA)
    comm = result.events.query("kind == 'comm'")
    assert len(comm) == STEPS * 3 * 4
    assert sorted(set(comm["nbytes"])) == [840, 2000]
    assert result.summary["packs"] == 3


def test_mwm_on_one_host_rings_over_the_intra_host_link():
    result = run(scenario_from_dict(mwm(1, 4, **{"strategy.communication": "ring"})))
    eval_s = C * 90 / (3 * 8)
    expected = STEPS * (C + ring(4, S, INTRA_ALPHA, INTRA_B)) + EVALS * eval_s
    assert result.summary["simulated_time_s"] == exact(expected)


def test_auto_communication_is_nccl_on_gpus_and_ring_elsewhere():
    gpu = run(scenario_from_dict({**mwm(2, 2), "numerics": False}))
    cpu = run(
        scenario_from_dict({**mwm(2, 2, **{"cluster.device.profile": "cpu"}), "numerics": False})
    )
    assert gpu.summary["communication"] == "nccl"
    assert cpu.summary["communication"] == "ring"


def test_timing_only_mwm_has_the_same_clock():
    data = mwm(2, 2)
    assert simulated(data, numerics=False) == simulated(data)


@pytest.mark.parametrize(
    ("intra", "network", "hierarchical_wins"),
    [
        # NIC 1000x slower than NVLink: only 2 of hierarchical's ring steps cross it.
        ({"bandwidth": "100GB/s", "latency": 0}, {"bandwidth": "100MB/s", "latency": 0}, True),
        # Equal links, no latency: the flat ring moves 2·7/8·S per device, hierarchical
        # 2·(3/4 + 1/2)·S.
        ({"bandwidth": "100MB/s", "latency": 0}, {"bandwidth": "100MB/s", "latency": 0}, False),
    ],
    ids=["slow-network", "equal-links"],
)
def test_hierarchical_beats_ring_only_when_the_network_is_much_slower(
    intra, network, hierarchical_wins
):
    def time(communication: str) -> float:
        data = mwm(
            2,
            4,
            **{
                "strategy.communication": communication,
                "cluster.links": {"intra_host": intra, "network": network},
            },
        )
        return simulated(data, numerics=False)

    assert (time("nccl") < time("ring")) is hierarchical_wins


def test_tf_config_cluster_gives_the_same_run_as_counts():
    def tasks(**lists: list[str]) -> dict:
        data = mwm(2, 2)
        del data["cluster"]["hosts"]
        data["cluster"].update(lists)
        return data

    counted = run(scenario_from_dict(mwm(2, 2)))
    listed = run(scenario_from_dict(tasks(worker=["w0:2222", "w1:2222"])))
    with_chief = run(scenario_from_dict(tasks(chief=["c0:2222"], worker=["w0:2222"])))
    assert listed.summary["chief"] == "w0" and with_chief.summary["chief"] == "c0"
    for result, names in ((listed, ("w0", "w1")), (with_chief, ("c0", "w0"))):
        events = result.events.copy()
        for column in ("host", "device", "links"):
            for given, counted_name in zip(names, ("worker0", "worker1"), strict=True):
                events[column] = events[column].str.replace(
                    f"(^|;){given}(?=/|$)", rf"\g<1>{counted_name}", regex=True
                )
        assert events.equals(counted.events)
        assert result.metrics.equals(counted.metrics)
        for a, b in zip(
            jax.tree_util.tree_leaves(result.params),
            jax.tree_util.tree_leaves(counted.params),
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------ central_storage


def central_storage_step(
    n: int, alpha: float, bandwidth: float, reduce_bandwidth: float, sharing: str
) -> float:
    wire = S / bandwidth
    if sharing == "fair":
        # the N fetches share the link and arrive together, then the N pushes do
        return 2 * alpha + 2 * n * wire + C + n * S / reduce_bandwidth
    # FIFO link: fetch k ends at k·S/B; pushes queue behind the fetches; the last push
    # leaves at max(2N·S/B, c + α + (N+1)·S/B) and arrives α later; the CPU reads N·S.
    return alpha + max(2 * n * wire, C + alpha + (n + 1) * wire) + n * S / reduce_bandwidth


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
@pytest.mark.parametrize("bandwidth", [1e6, 1e9], ids=["link-bound", "compute-bound"])
def test_central_storage_step_time_follows_the_link_model(bandwidth, sharing):
    times = {}
    for n in (1, 2, 4, 8):
        data = tiny(
            **{
                "strategy": {"kind": "central_storage", "reduce_bandwidth": "1GB/s"},
                "cluster.devices_per_host": n,
                "cluster.links.intra_host": {"bandwidth": bandwidth, "latency": "10us"},
                "cluster.network.sharing": sharing,
            }
        )
        times[n] = simulated(data, numerics=False)
        step = central_storage_step(n, 10e-6, bandwidth, 1e9, sharing)
        assert times[n] == exact(STEPS * step)
    if bandwidth == 1e6:
        # Link-bound: every added device adds a fetch and a push (2·S/B) and one CPU read.
        per_device = 2 * S / 1e6 + S / 1e9
        assert (times[8] - times[4]) / STEPS == exact(4 * per_device)
        assert (times[4] - times[2]) / STEPS == exact(2 * per_device)


def test_central_storage_records_fetches_pushes_and_the_cpu_update():
    data = tiny(**{"strategy.kind": "central_storage", "cluster.devices_per_host": 2})
    result = run(scenario_from_dict({**data, "numerics": False}))
    comm = result.events.query("kind == 'comm'")
    assert list(comm["detail"].value_counts().sort_index().items()) == [
        ("fetch variables", STEPS * 2),
        ("push gradient", STEPS * 2),
    ]
    assert result.summary["host_link_bytes_per_step"] == 2 * 2 * S
    assert len(result.events.query("kind == 'apply'")) == STEPS


# ------------------------------------------------------------------ tpu


@pytest.mark.parametrize("topology", [[2, 2], [4, 2]])
def test_tpu_step_is_compute_plus_torus_allreduce(topology):
    x, y = topology
    result = run(
        scenario_from_dict(
            {**tiny(**{"strategy": {"kind": "tpu", "topology": topology}}), "numerics": False}
        )
    )
    # 2[(x−1)(α + S/(x·B)) + (y−1)(α + S/(x·y·B))] on the ICI (tiny's intra-host link).
    torus = 2 * (
        (x - 1) * (INTRA_ALPHA + S / (x * INTRA_B))
        + (y - 1) * (INTRA_ALPHA + S / (x * y * INTRA_B))
    )
    assert result.summary["simulated_time_s"] == exact(STEPS * (C + torus))
    assert result.summary["allreduce_s"] == exact(torus)
    assert result.summary["busbw_Bps"] == exact(S / torus * 2 * (x * y - 1) / (x * y))
    assert result.events["device"].nunique() == x * y


def test_tpu_defaults_to_the_tpu_profile_and_one_host():
    data = tiny(**{"strategy.kind": "tpu"})
    del data["cluster"]["device"]["profile"]
    scenario = scenario_from_dict(data)
    assert scenario.cluster.device.profile == "tpu-v4"
    assert scenario.cluster.devices_per_host == 4
    with pytest.raises(ScenarioError, match=r"cluster\.hosts"):
        scenario_from_dict(tiny(**{"strategy.kind": "tpu", "cluster.hosts": 2}))


# ------------------------------------------------------------------ scenario files


@pytest.mark.parametrize(
    "name", ["mwm_2x4_ring", "mwm_2x4_nccl", "central_storage_4dev", "tpu_2x2"]
)
def test_shipped_scenarios_run(name):
    result = run(SCENARIOS / f"{name}.yaml", overrides=["workload.steps=3", "numerics=false"])
    assert result.summary["steps"] == 3
    assert math.isfinite(result.summary["simulated_time_s"])
