"""TensorFlow's parameter-server layouts: greedy placement, per-device pulls and pushes, host
staging (simdist.strategies.parameter_server.staging), exact times by hand.

The quantities of tests/helpers/ps_timing.py: a NIC message of S bytes occupies the NIC for
σ = S/B and arrives L = 2α later (``sharing: fifo``, ``duplex: half``); a copy between a
device and its host occupies the host's one intra-host link for S/B_INTRA = σ/4 and arrives
α_INTRA later. Step-time variability is off.
"""

from __future__ import annotations

import pytest
from helpers.ps_timing import ALPHA_INTRA, B_INTRA, SIGMA, L, S, applied_times, costs, scenario

from simdist.errors import ScenarioError
from simdist.runtime.engine import simulate
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.parameter_server.partition import bytes_per_ps, partition

COPY = S / B_INTRA  # σ/4: one copy of S bytes between a device and its host
C = 2.0**-9  # compute per step


def _sync(**options: object) -> dict[str, object]:
    return {"kind": "parameter_server", "mode": "sync", **options}


# -- placement -------------------------------------------------------------------------


def test_greedy_puts_each_variable_on_the_least_loaded_ps():
    leaves = [(f"w{i}", (n,), n) for i, n in enumerate((8, 4, 4, 2, 1))]
    # loads: w0 → ps0 [8, 0]; w1 → ps1 [8, 4]; w2 → ps1 [8, 8]; w3 → ps0 (tie: lowest
    # index) [10, 8]; w4 → ps1 [10, 9]
    shards = partition(leaves, 2, "greedy")
    assert [s.ps for s in shards] == [0, 1, 1, 0, 1]
    assert bytes_per_ps(shards, 2) == [10, 9]
    assert [(s.start, s.stop) for s in shards] == [(0, 8), (0, 4), (0, 4), (0, 2), (0, 1)]
    # round robin deals them in turn whatever their size
    assert [s.ps for s in partition(leaves, 2, "round_robin")] == [0, 1, 0, 1, 0]


def test_round_robin_puts_every_kernel_on_the_same_ps_tasks_when_layers_alternate():
    # kernel, bias, kernel, bias... over 4 PS tasks: kernels on ps0 and ps2 only, as TF's
    # replica_device_setter deals them (VGG-16's weights on two of four PS tasks)
    leaves = []
    for layer in range(6):
        leaves += [(f"l{layer}/kernel", (100,), 400), (f"l{layer}/bias", (1,), 4)]
    assert bytes_per_ps(partition(leaves, 4, "round_robin"), 4) == [1200, 12, 1200, 12]
    # greedy spreads the kernels: k0 → ps0, k1 → ps2, k2 → ps1, k3 → ps3, k4 → ps2,
    # k5 → ps1 (each bias on the least loaded task of its moment)
    assert bytes_per_ps(partition(leaves, 4, "greedy"), 4) == [412, 804, 800, 408]


def test_greedy_placement_in_a_run():
    result = simulate(
        scenario(1, ps=2, strategy={"kind": "parameter_server", "partitioner": "greedy"}),
        costs(C, 1, leaves=(S, S // 2, S // 2)),
    )
    assert result.summary["bytes_per_ps"] == [S, S]


# -- host staging ----------------------------------------------------------------------


def test_host_staging_adds_the_pcie_copy_before_and_after_the_wire():
    # pull: the message (σ + L), then its copy to the GPU; push: the GPU's copy to the
    # host, then the message
    plain = simulate(scenario(1, profile="p100"), costs(C, 3))
    staged = simulate(scenario(1, profile="p100", strategy=_sync(host_staging=True)), costs(C, 3))
    step = C + 2 * (SIGMA + L)
    assert applied_times(plain)[:1] == [step]
    step_staged = step + 2 * (COPY + ALPHA_INTRA)
    assert applied_times(staged) == [k * step_staged for k in (1, 2, 3)]


def test_host_staging_copies_to_and_from_every_device_of_a_worker():
    # two devices share the host's intra link: the pulled variable is copied to each (2
    # copies in a row), and each device's gradient is copied to the host, which sums
    # them (the local reduction: no all-reduce on the devices)
    strategy = _sync(host_staging=True)
    result = simulate(
        scenario(1, devices_per_host=2, profile="p100", strategy=strategy), costs(C, 2)
    )
    step = C + 2 * (SIGMA + L) + 2 * (2 * COPY + ALPHA_INTRA)
    assert applied_times(result) == [step, 2 * step]
    assert not (result.events["detail"] == "local all-reduce").any()


# -- pulls and pushes per device -------------------------------------------------------


def test_per_device_fetch_multiplies_the_pulls_of_a_worker():
    # two devices each pull their own copy: two messages queue on the NIC (2σ), then the
    # devices all-reduce (a ring over the intra link) and the worker pushes once
    result = simulate(
        scenario(1, devices_per_host=2, strategy=_sync(fetch="per_device")), costs(C, 2)
    )
    ring = 2 * (ALPHA_INTRA + S / (2 * B_INTRA))
    step = 2 * SIGMA + L + C + ring + SIGMA + L
    assert applied_times(result) == [step, 2 * step]
    ps = result.events.query("host == 'ps0' and step == 0")
    assert list(ps["detail"]) == ["pull ps0", "pull ps0", "push ps0"]


def test_per_device_push_sends_every_gradient_without_a_local_reduction():
    result = simulate(
        scenario(1, devices_per_host=2, strategy=_sync(push="per_device")), costs(C, 2)
    )
    step = SIGMA + L + C + 2 * SIGMA + L
    assert applied_times(result) == [step, 2 * step]
    ps = result.events.query("host == 'ps0' and step == 0")
    assert list(ps["detail"]) == ["pull ps0", "push ps0", "push ps0"]
    assert not (result.events["detail"] == "local all-reduce").any()


def test_per_device_pulls_and_pushes_with_staging():
    # pulls: the two messages queue on the NIC; the second arrives at 2σ + L and is then
    # copied to its device (the first copy ended meanwhile). Pushes: both devices' copies
    # to the host queue on the intra link; the first message leaves after the first copy
    # (σ/4 + α_i) and the NIC then carries both messages in a row (2σ + L), the second
    # copy long done.
    strategy = _sync(fetch="per_device", push="per_device", host_staging=True)
    result = simulate(
        scenario(1, devices_per_host=2, profile="p100", strategy=strategy), costs(C, 2)
    )
    pull = 2 * SIGMA + L + COPY + ALPHA_INTRA
    push = COPY + ALPHA_INTRA + 2 * SIGMA + L
    assert applied_times(result) == [pull + C + push, 2 * (pull + C + push)]


def test_overlap_on_a_host_of_two_devices_with_host_staging():
    f, b = SIGMA, 2 * SIGMA  # each layer: forward σ, backward 2σ
    layers = (
        LayerCost("l0", f, b, S, ("params/w0",)),
        LayerCost("l1", f, b, S, ("params/w1",)),
    )
    base = costs(2 * (f + b), 3, leaves=(S, S))
    layered = Costs(**{**base.__dict__, "layers": layers})
    strategy = {"kind": "parameter_server", "overlap": True, "host_staging": True}
    result = simulate(scenario(1, devices_per_host=2, profile="p100", strategy=strategy), layered)
    # w0 arrives at σ + L and is copied to both devices (σ/2 in all, + α_i); w1 arrives at
    # 2σ + L, when l0's forward ends and is copied meanwhile... l1's copies end at
    # 2σ + L + σ/2 + α_i = the end of l0's forward: no wait. Backward of l1 ends at
    # T = 5σ + L + σ/2 + α_i; its two copies to the host (σ/2 + α_i), then its push (σ + L);
    # l0's backward ends at T + 2σ, its copies, its push from T + 2.5σ + α_i, arriving at
    # T + 3.5σ + α_i + L: the iteration is 9σ + 2L + 2α_i.
    iteration = 9 * SIGMA + 2 * L + 2 * ALPHA_INTRA
    assert applied_times(result) == [k * iteration for k in (1, 2, 3)]
    compute = result.events.query("step == 0 and kind == 'compute' and device == 'worker0/gpu0'")
    assert compute[["start_s", "end_s", "detail"]].values.tolist() == [
        [SIGMA + L + SIGMA / 2 + ALPHA_INTRA, 2 * SIGMA + L + SIGMA / 2 + ALPHA_INTRA, "forward"],
        [
            2 * SIGMA + L + SIGMA / 2 + ALPHA_INTRA,
            3 * SIGMA + L + SIGMA / 2 + ALPHA_INTRA,
            "forward",
        ],
        [
            3 * SIGMA + L + SIGMA / 2 + ALPHA_INTRA,
            7 * SIGMA + L + SIGMA / 2 + ALPHA_INTRA,
            "backward",
        ],
    ]


# -- bad combinations ------------------------------------------------------------------


def test_per_device_push_needs_sync_mode():
    with pytest.raises(ScenarioError, match=r"strategy\.push.*mode: sync"):
        scenario(1, devices_per_host=2, strategy={"kind": "parameter_server", "push": "per_device"})


def test_host_staging_needs_accelerators():
    with pytest.raises(ScenarioError, match=r"strategy\.host_staging.*profile cpu"):
        scenario(1, strategy=_sync(host_staging=True))


def test_unknown_partitioner_lists_greedy():
    with pytest.raises(ScenarioError, match="greedy"):
        scenario(1, strategy={"kind": "parameter_server", "partitioner": "least_loaded"})


def test_pull_on_update_starts_a_shard_pull_when_its_gradients_are_in():
    f, b = SIGMA, 2 * SIGMA
    layers = (
        LayerCost("l0", f, b, S, ("params/w0",)),
        LayerCost("l1", f, b, S, ("params/w1",)),
    )
    base = costs(2 * (f + b), 3, leaves=(S, S))
    layered = Costs(**{**base.__dict__, "layers": layers})
    strategy = _sync(overlap=True, pull="on_update")
    result = simulate(scenario(1, strategy=strategy), layered)
    # As test_ps_timing's overlap hand case, l1's push arrives at 6σ + 2L: its pull for step
    # 1 leaves the PS at once [6σ + 2L, 7σ + 2L], so l0's push, ready at 7σ + L, waits for
    # the half-duplex PS NIC and arrives at 8σ + 3L, which ends step 0 (at step start
    # it would end at 8σ + 2L, the pull following it); step 1 then pulls w0 only.
    ps = result.events.query("host == 'ps0' and step <= 1")
    assert ps[["start_s", "detail", "step"]].values.tolist() == [
        [0.0, "pull ps0", 0],
        [SIGMA, "pull ps0", 0],
        [5 * SIGMA + L, "push ps0", 0],
        [6 * SIGMA + 2 * L, "pull ps0", 1],
        [7 * SIGMA + 2 * L, "push ps0", 0],
        [8 * SIGMA + 3 * L, "pull ps0", 1],
        [13 * SIGMA + 4 * L, "push ps0", 1],
        [15 * SIGMA + 5 * L, "push ps0", 1],
    ]
    assert applied_times(result)[0] == 8 * SIGMA + 3 * L


def test_pull_on_update_needs_sync_and_overlap():
    with pytest.raises(ScenarioError, match=r"strategy\.pull.*overlap: true"):
        scenario(1, strategy=_sync(pull="on_update"))


def test_overlap_on_a_host_of_two_devices_all_reduces_each_layer_before_its_push():
    # Without staging, a layer's gradients are all-reduced on the devices (a ring over the
    # intra link, 2(α_i + S/(2·B_INTRA))) as backward reaches it, then pushed: as
    # test_ps_timing's one-device hand case (8σ + 2L) plus the last layer's all-reduce.
    f, b = SIGMA, 2 * SIGMA
    layers = (
        LayerCost("l0", f, b, S, ("params/w0",)),
        LayerCost("l1", f, b, S, ("params/w1",)),
    )
    base = costs(2 * (f + b), 3, leaves=(S, S))
    layered = Costs(**{**base.__dict__, "layers": layers})
    strategy = {"kind": "parameter_server", "overlap": True}
    result = simulate(scenario(1, devices_per_host=2, strategy=strategy), layered)
    ring = 2 * (ALPHA_INTRA + S / (2 * B_INTRA))
    iteration = 8 * SIGMA + 2 * L + ring
    assert applied_times(result) == [k * iteration for k in (1, 2, 3)]
    local = result.events.query("step == 0 and detail == 'local all-reduce'")
    assert local[["start_s", "end_s"]].drop_duplicates().values.tolist() == [
        [5 * SIGMA + L, 5 * SIGMA + L + ring],
        [7 * SIGMA + L, 7 * SIGMA + L + ring],
    ]
