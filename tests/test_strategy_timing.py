"""Strategy timing without JAX: step times pinned exactly from hand-made ``Costs``.

``simdist.runtime.engine.simulate(scenario, costs, workload=None)`` runs the SimPy half of a
strategy alone. With a fixed compute time c and gradient size S, each synchronous
step lasts c plus what the network charges for its communication, so the simulated
time of k steps is known to the last bit (the same float additions, in the same order).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from simdist.collectives import (
    hierarchical_allreduce_s,
    ring_allreduce_s,
    torus2d_allreduce_s,
    tree_allreduce_s,
)
from simdist.runtime.engine import simulate
from simdist.scenario import load_scenario
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.bucketing import Bucket, gradient_buckets
from simdist.strategies.central_storage import CentralStorageStrategy, central_storage_step_s
from simdist.strategies.multi_worker_mirrored import chief_eval_s

C = 1e-3  # seconds of compute per replica step
S = 1_000_000  # gradient bytes
STEPS = 5


def costs(steps: int = STEPS, test_examples: int = 0) -> Costs:
    return Costs(
        compute_s=C,
        grad_nbytes=S,
        flops_per_replica_step=0.0,
        total_steps=steps,
        param_leaves=(("params/w", (1000, 250), S),),
        test_examples=test_examples,
    )


# Step-time variability off: every device computes exactly C, so the times below are
# exact and hand-checkable.
EXACT = "cluster.device.variability=0"


def run(path: str, *overrides: str, steps: int = STEPS, test_examples: int = 0, exact: bool = True):
    scenario = load_scenario(path, ["numerics=false", *([EXACT] if exact else []), *overrides])
    return simulate(scenario, costs(steps, test_examples))


def ends(steps: int, step_parts: list[float]) -> float:
    """The clock after ``steps`` steps that each advance it by ``step_parts`` in turn."""
    t = 0.0
    for _ in range(steps):
        for part in step_parts:
            t += part
    return t


def test_one_device_steps_are_compute_only():
    result = run("scenarios/one_device_digits.yaml")
    assert result.summary["simulated_time_s"] == ends(STEPS, [C])
    assert result.summary["steps"] == STEPS
    assert set(result.events["kind"]) == {"compute"}
    assert result.params is None


@pytest.mark.parametrize("algo, formula", [("ring", ring_allreduce_s), ("tree", tree_allreduce_s)])
def test_mirrored_step_is_compute_plus_intra_host_allreduce(algo, formula):
    result = run("scenarios/mirrored_4dev.yaml", f"strategy.all_reduce={algo}")
    link = result.scenario.cluster.links.intra_host
    allreduce = formula(4, S, link.latency_s, link.bandwidth_Bps)
    assert result.summary["simulated_time_s"] == ends(STEPS, [C, allreduce])
    comm = result.events[result.events["kind"] == "comm"]
    assert len(comm) == 4 * STEPS and set(comm["links"]) == {"worker0/intra"}


def test_multi_worker_ring_is_priced_on_the_network():
    result = run("scenarios/mwm_2x4_ring.yaml", "workload.eval_every=0")
    net = result.scenario.cluster.links.network
    allreduce = ring_allreduce_s(8, S, net.latency_s, net.bandwidth_Bps)
    assert result.summary["simulated_time_s"] == ends(STEPS, [C, allreduce])
    assert result.summary["allreduce_s"] == allreduce


def test_multi_worker_nccl_is_hierarchical_and_packs_add_latency():
    result = run("scenarios/mwm_2x4_nccl.yaml", "workload.eval_every=0")
    links = result.scenario.cluster.links
    intra, net = links.intra_host, links.network

    def hier(nbytes: float) -> float:
        return hierarchical_allreduce_s(
            2, 4, nbytes, intra.latency_s, intra.bandwidth_Bps, net.latency_s, net.bandwidth_Bps
        )

    assert result.summary["simulated_time_s"] == ends(STEPS, [C, hier(S)])
    packed = run(
        "scenarios/mwm_2x4_nccl.yaml", "workload.eval_every=0", "strategy.bytes_per_pack=400000"
    )
    parts = [C, hier(400_000), hier(400_000), hier(200_000)]
    assert packed.summary["simulated_time_s"] == ends(STEPS, parts)
    assert packed.summary["packs"] == 3


def test_multi_worker_chief_evaluates_before_the_next_step():
    n_test = 360
    result = run("scenarios/mwm_2x4_ring.yaml", "workload.eval_every=2", test_examples=n_test)
    net = result.scenario.cluster.links.network
    allreduce = ring_allreduce_s(8, S, net.latency_s, net.bandwidth_Bps)
    eval_s = chief_eval_s(C, 16, n_test, 4)
    assert eval_s == C * math.ceil(n_test / 4) / (3 * 16)
    # evaluations after steps 2 and 4 delay steps 3 and 5; the final one (step 5) ends the run
    expected = ends(1, [C, allreduce, C, allreduce, eval_s + C, allreduce, C, allreduce])
    expected = ends(1, [expected, eval_s + C, allreduce, eval_s])
    assert result.summary["simulated_time_s"] == pytest.approx(expected, rel=1e-15)
    evals = result.events[result.events["kind"] == "eval"]
    assert set(evals["host"]) == {"worker0"} and len(evals) == 3 * 4


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_central_storage_step_matches_its_closed_form(sharing):
    result = run("scenarios/central_storage_4dev.yaml", f"cluster.network.sharing={sharing}")
    link = result.scenario.cluster.links.intra_host
    cpu = result.scenario.strategy.reduce_bandwidth_Bps
    step = central_storage_step_s(4, S, link.latency_s, link.bandwidth_Bps, C, cpu, sharing)
    assert result.summary["simulated_time_s"] == pytest.approx(STEPS * step, rel=1e-12)
    assert result.summary["predicted_step_s"] == step


def _process_per_device_compute(self, step):
    """central_storage's compute phase as it was written first: a SimPy process per device
    (fetch, compute, push), joined by ``all_of``: the reference of the callback chains."""
    env, net, host, nbytes = self.env, self.net, self.host, self.costs.grad_nbytes
    wait = "waiting for the host link"

    def replica(device):
        _, fetched = yield net.send(
            host, device, nbytes, step=step, detail="fetch variables", wait_detail=wait
        ).done
        seconds = self.compute_s(device, step)
        self.record_compute(device, fetched, seconds, step)
        yield env.timeout(seconds)
        _, pushed = yield net.send(
            device, host, nbytes, step=step, detail="push gradient", wait_detail=wait
        ).done
        return pushed

    devices = self.training_devices
    replicas = [env.process(replica(d)) for d in devices]
    yield env.all_of(replicas)
    for d, done in zip(devices, replicas, strict=True):
        self.recorder.event(done.value, env.now, d.host, d.name, "idle", 0, step, "barrier")


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_central_storage_records_what_a_process_per_device_recorded(monkeypatch, sharing):
    """The same rows in the same order and the same summary, with stragglers (random, drawn
    in arrival order) and a restart, under both sharing models."""
    overrides = [
        f"cluster.network.sharing={sharing}",
        "faults.stragglers=[{device: 3, slowdown: 3.0}, {probability: 0.3, slowdown: 2.5}]",
        "faults.failures=[{target: worker 0, at: 12ms, restart_after: 1ms}]",
    ]
    # variability left on: the two must agree whatever each device's pace
    chains = run("scenarios/central_storage_4dev.yaml", *overrides, steps=12, exact=False)
    monkeypatch.setattr(CentralStorageStrategy, "compute", _process_per_device_compute)
    processes = run("scenarios/central_storage_4dev.yaml", *overrides, steps=12, exact=False)
    assert {"straggle", "restart"} <= set(chains.events["kind"])
    pd.testing.assert_frame_equal(chains.events, processes.events, check_exact=True)
    assert chains.summary == processes.summary


def test_tpu_step_is_compute_plus_torus_allreduce():
    result = run("scenarios/tpu_2x2.yaml", "strategy.topology=[4, 2]")
    ici = result.scenario.cluster.links.intra_host
    allreduce = torus2d_allreduce_s(4, 2, S, ici.latency_s, ici.bandwidth_Bps)
    assert result.summary["simulated_time_s"] == ends(STEPS, [C, allreduce])
    assert set(result.events.loc[result.events["kind"] == "comm", "links"]) == {"worker0/ici"}


def test_a_persistent_straggler_sets_the_pace_of_a_sync_step():
    result = run("scenarios/mirrored_4dev.yaml", "faults.stragglers=[{device: 2, slowdown: 3}]")
    link = result.scenario.cluster.links.intra_host
    allreduce = ring_allreduce_s(4, S, link.latency_s, link.bandwidth_Bps)
    assert result.summary["simulated_time_s"] == ends(STEPS, [3 * C, allreduce])
    idle = result.events[(result.events["kind"] == "idle") & (result.events["step"] == 0)]
    assert idle["end_s"].tolist() == [3 * C] * 3 and idle["start_s"].tolist() == [C] * 3


def test_a_failure_costs_restart_restore_and_the_redone_steps():
    # checkpoint after step 2 (written from 2C to 3C); the failure at 3.5C hits step 3,
    # noticed at its end (4C): restart, restore, then steps 3, 4, 5 again
    result = run(
        "scenarios/one_device_digits.yaml",
        "checkpoint={every_steps: 2, storage_bandwidth: 1GB/s}",
        f"faults.failures=[{{target: worker 0, at: {3.5 * C}, restart_after: 10ms}}]",
    )
    ckpt = S / 1e9  # parameters only: the optimizer state is empty in these Costs
    t = ends(1, [C, C, ckpt, C, 10e-3, ckpt, C, C, ckpt, C])
    assert result.summary["simulated_time_s"] == pytest.approx(t, rel=1e-12)
    assert result.summary["failures"] == 1 and result.summary["lost_steps"] == 1
    assert result.summary["time_lost_s"] == pytest.approx(C + 10e-3 + ckpt, rel=1e-12)


# -- backward overlapped with bucketed all-reduces --------------------------------------

MiB = 1024 * 1024


def three_layers(grad_nbytes: int = 4 * MiB) -> tuple[LayerCost, ...]:
    return tuple(LayerCost(f"l{i}", 1e-3, 2e-3, grad_nbytes) for i in range(3))


def layered_costs(layers: tuple[LayerCost, ...], steps: int = STEPS) -> Costs:
    return Costs(
        compute_s=sum(layer.forward_s + layer.backward_s for layer in layers),
        grad_nbytes=sum(layer.grad_nbytes for layer in layers),
        flops_per_replica_step=0.0,
        total_steps=steps,
        layers=layers,
    )


def test_gradient_buckets_close_before_the_cap_in_backward_order():
    layers = (
        LayerCost("a", 0, 0, 4),
        LayerCost("relu", 0, 0, 0),
        LayerCost("b", 0, 0, 4),
        LayerCost("c", 0, 0, 9),
    )
    # backward order c, b, relu, a: c alone exceeds the cap and gets its own bucket
    assert gradient_buckets(layers, 8) == [Bucket(0, 1, 9), Bucket(1, 4, 8)]
    assert gradient_buckets(layers, 7) == [Bucket(0, 1, 9), Bucket(1, 3, 4), Bucket(3, 4, 4)]
    assert gradient_buckets(layers, 100) == [Bucket(0, 4, 17)]


def test_overlap_hand_case_three_layers_two_buckets():
    # forward 3 ms; backward l2, l1 (bucket 1: 8 MiB ready at 7 ms), l0 (bucket 2: 4 MiB
    # ready at 9 ms); bucket 2 starts when it is ready and bucket 1's all-reduce has ended.
    scenario = load_scenario(
        "scenarios/mirrored_4dev.yaml", ["numerics=false", EXACT, "strategy.bucket_bytes=8MiB"]
    )
    result = simulate(scenario, layered_costs(three_layers()))
    link = scenario.cluster.links.intra_host
    a8 = ring_allreduce_s(4, 8 * MiB, link.latency_s, link.bandwidth_Bps)
    a4 = ring_allreduce_s(4, 4 * MiB, link.latency_s, link.bandwidth_Bps)
    t = 0.0
    for _ in range(STEPS):
        start = t
        first_end = (start + 7e-3) + a8
        t = max(start + 9e-3, first_end) + a4
    # exact up to the rounding of the clock's own additions (now + (ready - now))
    assert result.summary["simulated_time_s"] == pytest.approx(t, rel=1e-13)
    comm = result.events[(result.events["kind"] == "comm") & (result.events["step"] == 0)]
    assert comm.drop_duplicates("detail")[["detail", "nbytes"]].values.tolist() == [
        ["all-reduce ring bucket 1/2", 8 * MiB],
        ["all-reduce ring bucket 2/2", 4 * MiB],
    ]
    # bucket 1's all-reduce runs during l0's backward: the timeline shows the overlap
    first = comm.iloc[0]
    assert first["start_s"] == 7e-3 and first["end_s"] > 7e-3
    step = t / STEPS
    assert result.summary["exposed_comm_s"] == pytest.approx(STEPS * (step - 9e-3), rel=1e-9)


def test_overlap_off_computes_then_all_reduces_the_whole_gradient():
    scenario = load_scenario(
        "scenarios/mirrored_4dev.yaml", ["numerics=false", EXACT, "strategy.overlap=false"]
    )
    costs = layered_costs(three_layers())
    result = simulate(scenario, costs)
    link = scenario.cluster.links.intra_host
    allreduce = ring_allreduce_s(4, 12 * MiB, link.latency_s, link.bandwidth_Bps)
    assert result.summary["simulated_time_s"] == ends(STEPS, [costs.compute_s, allreduce])
    assert result.summary["exposed_comm_s"] == pytest.approx(STEPS * allreduce, rel=1e-9)


def test_overlap_with_a_straggler_waits_for_its_buckets():
    scenario = load_scenario(
        "scenarios/mwm_2x4_ring.yaml",
        [
            "numerics=false",
            EXACT,
            "workload.eval_every=0",
            "strategy.bucket_bytes=4MiB",
            "faults.stragglers=[{device: 5, slowdown: 2}]",
        ],
    )
    result = simulate(scenario, layered_costs(three_layers(), steps=1))
    net = scenario.cluster.links.network
    a4 = ring_allreduce_s(8, 4 * MiB, net.latency_s, net.bandwidth_Bps)
    # the straggler's buckets are ready at 2x (5, 7, 9) ms = 10, 14, 18 ms
    t = 10e-3 + a4
    t = max(14e-3, t) + a4
    t = max(18e-3, t) + a4
    assert result.summary["simulated_time_s"] == pytest.approx(t, rel=1e-13)
    straggle = result.events[result.events["kind"] == "straggle"]
    assert set(straggle["device"]) == {"worker1/gpu1"} and len(straggle) == 4


@pytest.mark.parametrize(
    "path",
    [
        "scenarios/mirrored_4dev.yaml",
        "scenarios/mwm_2x4_ring.yaml",
        "scenarios/mwm_2x4_nccl.yaml",
        "scenarios/tpu_2x2.yaml",
        "scenarios/resnet50_4x8_25g.yaml",
    ],
)
def test_overlap_off_is_the_single_compute_span_then_the_collective(path):
    # overlap: false gives exactly the step of a whole-step compute span followed by the
    # all-reduce (the model before per-layer costs), whatever the layer profile says.
    from dataclasses import replace

    from simdist.runtime.costs import measure_costs
    from simdist.runtime.engine import cached_workload, needs_workload

    scenario = load_scenario(path, ["numerics=false", "strategy.overlap=false", "workload.steps=3"])
    workload = cached_workload(scenario) if needs_workload(scenario) else None
    costs = measure_costs(scenario, workload)
    assert len(costs.layers) > 1
    layered = simulate(scenario, costs)
    whole = simulate(scenario, replace(costs, layers=()))
    assert layered.summary["simulated_time_s"] == whole.summary["simulated_time_s"]
    assert layered.events.equals(whole.events)
