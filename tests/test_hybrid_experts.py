"""hybrid's expert axis: a MoE gpt's experts over groups carved out of data x context, the
all-to-all bytes of a fixed routing by hand, the wait for the busiest expert, the experts'
gradients over the expert-data group, memory per device, and the layouts it refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simdist.errors import ScenarioError, SimdistError
from simdist.gpt_shape import GptShape
from simdist.model_size import gpt_expert_params, gpt_size
from simdist.runtime.engine import run, simulate
from simdist.scenario import scenario_from_dict
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.hybrid import experts as experts_module
from simdist.strategies.hybrid.experts import group_tokens, stage_passes
from simdist.strategies.steps import Collective, Compute, Issue, Wait

SIZES = {"layers": 2, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 100}
GPT = {"name": "gpt", **SIZES}
TOKEN_NBYTES = 64 * 2  # a token's hidden state at bf16
# A fixed routing of 4 devices' 32 tokens each over 4 experts (top 1): row = device, column =
# expert; device i holds expert i (expert axis 4).
FIXED = np.array(
    [
        [10, 12, 6, 4],
        [0, 20, 8, 4],
        [7, 0, 23, 2],
        [1, 4, 3, 24],
    ]
)


def scenario(mesh: dict, hosts: int = 4, per_host: int = 1, **changes: object) -> dict:
    """A timing-only gpt with one MoE layer (h.1.moe) under hybrid, each host's devices on
    its own NIC, 1 GB/s links."""
    model = {**GPT, "experts": 4, "top_k": 1, "capacity_factor": 4.0, "moe_every": 2}
    data = {
        "name": "hybrid_experts",
        "seed": 0,
        "numerics": False,
        "cluster": {
            "hosts": hosts,
            "devices_per_host": per_host,
            "device": {"profile": "a100", "precision": "bf16", "variability": 0},
            "links": {
                "intra_host": {"bandwidth": "10GB/s", "latency": "2us"},
                "network": {"bandwidth": "1GB/s", "latency": "10us"},
            },
        },
        "workload": {
            "model": model,
            "batch_size": 2,
            "optimizer": {"name": "adam", "learning_rate": 1e-4},
            "steps": 2,
        },
        "strategy": {"kind": "hybrid", "mesh": mesh, "micro_batches": 1},
    }
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[leaf] = value
    return data


def fixed(rng, weights, devices, tokens, top_k):
    """The router of the hand case: FIXED for every MoE layer and micro-batch."""
    del rng, weights, top_k
    assert (devices, tokens) == (4, 32)
    return FIXED[:, None, :].copy()


@pytest.fixture
def hand_case(monkeypatch):
    monkeypatch.setattr(experts_module, "draw_routing", fixed)
    return run(scenario_from_dict(scenario({"data": 4, "expert": 4})))


# ------------------------------------------------------------------ the plan


def test_a_stage_pass_puts_each_moe_layers_exchanges_around_its_experts():
    """Layers 0..3 with h.1.moe and h.3.moe: forward the runs before, between and after,
    each MoE layer dispatch → experts → combine; backward the combine's gradient first;
    with full recomputation two more all-to-alls before each MoE layer's backward."""
    layers = [
        LayerCost("embeddings", 1.0, 2.0, 0),
        LayerCost("h.0.attention", 1.0, 2.0, 0),
        LayerCost("h.1.moe", 3.0, 6.0, 0),
        LayerCost("lm_head", 1.0, 2.0, 0),
    ]
    roles = ("vocab_embedding", "block", "whole", "vocab_head")
    forward, backward = stage_passes(layers, roles, 0, 4, None, recompute=False)
    ops = forward.plan.program
    assert [type(op).__name__ for op in ops] == [
        "Compute", "Compute", "Issue", "Wait", "Compute", "Issue", "Wait", "Compute",
    ]  # fmt: skip
    assert [op.unit for op in ops if isinstance(op, Compute)] == [0, 1, 2, 3]
    assert forward.experts == {2: 2}
    assert forward.plan.collectives == [
        Collective("all_to_all", 0, "dispatch forward h.1.moe"),
        Collective("all_to_all", 0, "combine forward h.1.moe"),
    ]
    assert forward.exchanges == {0: (2, True), 1: (2, False)}
    assert [c.detail for c in backward.plan.collectives] == [
        "combine backward h.1.moe",
        "dispatch backward h.1.moe",
    ]
    assert backward.exchanges == {0: (2, True), 1: (2, False)}
    experts = [op for op in backward.plan.program if isinstance(op, Compute)][1]
    assert experts == Compute(1, "backward", 6.0, "backward h.1.moe")
    _, again = stage_passes(layers, roles, 0, 4, None, recompute=True)
    assert [c.detail for c in again.plan.collectives] == [
        "dispatch recomputed h.1.moe",
        "combine recomputed h.1.moe",
        "combine backward h.1.moe",
        "dispatch backward h.1.moe",
    ]
    assert again.exchanges == {0: (2, True), 1: (2, False), 2: (2, True), 3: (2, False)}
    assert isinstance(again.plan.program[1], Issue) and isinstance(again.plan.program[2], Wait)


def test_group_tokens_are_each_groups_exchange():
    """Two groups of 2 holders over 4 experts (2 a device): column j's experts are 2j, 2j+1."""
    kept = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [0, 1, 0, 1], [2, 0, 2, 0]])
    assert group_tokens(kept, 2).tolist() == [[[3, 7], [11, 15]], [[1, 1], [2, 2]]]


# ------------------------------------------------------------------ the clock


def test_all_to_all_bytes_are_the_routed_tokens_step_by_step(hand_case):
    """Each MoE layer's four all-to-alls move FIXED's off-diagonal tokens × 64 × 2 bytes,
    each message counted on both ends; each NIC sends its row's tokens (dispatch forward,
    combine backward) and its column's (combine forward, dispatch backward), plus the dense
    gradients' ring all-reduce, 2·3/4 of them; the experts' expert-data groups are of one
    device (data 4 = expert 4), so nothing more."""
    result = hand_case
    off_diagonal = int(FIXED.sum() - np.trace(FIXED))
    assert off_diagonal == 51
    events = result.events
    comm = events[events.kind == "comm"]
    for step in range(2):
        rows = comm[comm.step == step]
        for detail in ("dispatch forward", "combine forward", "combine backward"):
            moved = rows[rows.detail == f"{detail} h.1.moe"].nbytes.sum()
            assert moved == 2 * off_diagonal * TOKEN_NBYTES
    steps = result.tables["moe_steps"]
    assert steps["all_to_all_nbytes"].tolist() == [4 * off_diagonal * TOKEN_NBYTES] * 2
    assert steps["dropped_fraction"].tolist() == [0.0, 0.0]
    dense = result.summary["data_nbytes_per_device_per_step"][0]["allreduce"]
    experts = 4 * (2 * 64 * 256 + 256 + 64) * 2  # 4 experts, gelu MLP of 4·64, bf16
    total = gpt_size(GptShape(**SIZES, experts=4, top_k=1, moe_every=2)).params * 2
    assert dense == total - experts
    links = result.tables["links"].set_index("link")
    for i in range(4):
        row, column = FIXED[i].sum() - FIXED[i, i], FIXED[:, i].sum() - FIXED[i, i]
        sent = 2 * (row + column) * TOKEN_NBYTES + 2 * 3 * dense // 4
        assert links.loc[f"worker{i}/nic/tx", "bytes"] == pytest.approx(2 * sent)


def test_the_step_waits_for_the_busiest_expert(hand_case):
    """Device 2's expert receives the most tokens (40 of FIXED's column sums 18, 36, 40,
    34): its span is the longest, in proportion to the tokens; the others wait for it
    (idle: barrier is inside each copy; across copies the combine waits) and the combine
    all-to-all starts when it ends."""
    ev = hand_case.events[hand_case.events.step == 0]
    spans = ev[(ev.kind == "compute") & (ev.detail == "F0 forward h.1.moe")].set_index("device")
    seconds = spans.end_s - spans.start_s
    assert FIXED.sum(axis=0).tolist() == [18, 36, 40, 34]
    assert seconds.idxmax() == "worker2/gpu0"
    assert seconds.sort_index().rank().tolist() == [1.0, 3.0, 4.0, 2.0]
    launch = (seconds["worker1/gpu0"] * 40 - seconds["worker2/gpu0"] * 36) / 4
    assert (seconds.sort_index() - launch).tolist() == pytest.approx(
        ((seconds["worker2/gpu0"] - launch) * FIXED.sum(axis=0) / 40).tolist()
    )
    combine = ev[(ev.kind == "comm") & (ev.detail == "combine forward h.1.moe")]
    assert combine.start_s.min() == pytest.approx(spans.end_s.max())


def test_expert_gradients_reduce_over_the_expert_data_group(monkeypatch):
    """data 4, expert 2: each expert lives on 2 devices (the expert-data group), which
    all-reduce their experts' gradient (2 of the 4 experts); the dense gradient goes over
    all 4."""
    result = run(scenario_from_dict(scenario({"data": 4, "expert": 2})))
    comm = result.events[(result.events.kind == "comm") & (result.events.step == 0)]
    reduced = comm[comm.detail == "data all-reduce stage 0 experts"]
    experts = 4 * (2 * 64 * 256 + 256 + 64) * 2
    # a ring all-reduce of E/X experts over 2 devices: each device sends it once (2·1/2)
    assert sorted(reduced.device.unique()) == [f"worker{i}/gpu0" for i in range(4)]
    assert reduced.nbytes.sum() == 2 * 4 * (experts // 2) // 2
    assert result.summary["experts"]["expert_data"] == 2
    moved = result.summary["experts"]["data_nbytes_per_device_per_step"]
    assert moved == [{"allreduce": experts // 2, "reduce_scatter": 0, "all_gather": 0}]


def test_context_and_pipeline_compose_with_the_expert_axis():
    """data 2 x context 2 x pipeline 2 with expert 4: each stage's 4 token holders are one
    expert group (context innermost, as Megatron-Core orders them); a micro-batch's holder
    keeps batch 2 x 16 / (2 micro-batches x 2 context) = 8 tokens, each MoE layer moves
    4 all-to-alls of every one of them that crosses devices."""
    data = scenario(
        {"data": 2, "pipeline": 2, "context": 2, "expert": 4},
        hosts=2,
        per_host=4,
        **{"workload.model.layers": 4, "strategy.micro_batches": 2},
    )
    result = run(scenario_from_dict(data))
    s = result.summary
    assert s["experts"]["tokens_per_device_per_micro_batch"] == 8
    assert s["experts"]["expert_data"] == 1
    comm = result.events[(result.events.kind == "comm") & (result.events.step == 0)]
    moved = comm[comm.detail.str.startswith(("dispatch", "combine"))].nbytes.sum() // 2
    assert moved == result.tables["moe_steps"].all_to_all_nbytes[0]
    assert set(comm[comm.detail.str.startswith("dispatch")].detail) == {
        "dispatch forward h.1.moe",
        "dispatch backward h.1.moe",
        "dispatch forward h.3.moe",
        "dispatch backward h.3.moe",
    }
    steps = result.tables["moe_steps"]
    assert steps.tokens.tolist() == [2 * 2 * 2 * 16] * 2  # MoE layers x copies x batch x seq


# ------------------------------------------------------------------ memory


@pytest.mark.parametrize(("zero", "expert"), [(0, 4), (1, 2)])
def test_memory_divides_the_experts_over_the_expert_axis(zero, expert):
    """bf16 + Adam: 2 bytes a parameter, 2 a gradient, 12 of optimizer state; the dense
    parameters whole (ZeRO-1: their state over data 4), the experts / X (ZeRO-1: their state
    over the expert-data group of 4 / X more)."""
    data = scenario({"data": 4, "expert": expert}, **{"strategy.zero": zero})
    memory = run(scenario_from_dict(data)).summary["memory_per_device"]["worker0/gpu0"]
    sizes = {**SIZES, "experts": 4, "top_k": 1, "moe_every": 2}
    experts = gpt_expert_params(GptShape(**sizes))
    dense = gpt_size(GptShape(**sizes)).params - experts
    assert memory["params"] == 2 * (dense + math.ceil(experts / expert))
    assert memory["gradients"] == 2 * (dense + math.ceil(experts / expert))
    if zero:
        opt = math.ceil(dense / 4) + math.ceil(experts / 4)
    else:
        opt = dense + math.ceil(experts / expert)
    assert memory["optimizer"] == 12 * opt


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("mesh", "changes", "message"),
    [
        (
            {"data": 4, "expert": 2},
            {"workload.model": GPT},
            "strategy.mesh.expert: got 2; the expert axis spreads the experts of a "
            "mixture-of-experts gpt and workload.model is a gpt without experts: give the gpt "
            "experts, e.g. {name: gpt, experts: 8, top_k: 2}, or leave expert out",
        ),
        (
            {"data": 3, "expert": 3},
            {"cluster.hosts": 3},
            "strategy.mesh.expert: got 3; the expert axis must divide the gpt's experts (4) "
            "so that each device holds as many, e.g. expert: 2",
        ),
        (
            {"data": 2, "pipeline": 2, "expert": 4},
            {},
            "strategy.mesh.expert: got 4; expert-parallel groups are carved out of the "
            "data-parallel ranks (data 2), as Megatron-Core carves them "
            "(megatron/core/parallel_state.py), so the expert axis must divide them, e.g. "
            "expert: 2",
        ),
        (
            {"data": 2, "tensor": 2, "expert": 2},
            {"cluster.hosts": 2, "cluster.devices_per_host": 2},
            "strategy.mesh.tensor: got 2 with expert 2; the experts' own tensor split "
            "(Megatron-Core's expert_tensor_parallel_size) is not built, and a tensor group "
            "would run them whole on every device: use tensor: 1 with an expert axis",
        ),
        (
            {"data": 4, "expert": 2},
            {"strategy.overlap_grad_reduce": True},
            "strategy.overlap_grad_reduce: an expert axis (2 devices) reduces the experts' "
            "gradients over their own groups, which the buckets overlapping the backward are "
            "not cut along yet: use overlap_grad_reduce: false with an expert axis, or leave "
            "expert out",
        ),
        (
            {"data": 4},
            {"strategy.routing": "uniform"},
            "strategy.routing: routes tokens to experts on an expert axis, and the mesh has "
            "none: give mesh.expert (with a gpt with experts), or leave routing out",
        ),
    ],
    ids=["dense-gpt", "experts", "data", "tensor", "overlap", "routing"],
)
def test_bad_expert_axis_is_one_clear_error(mesh, changes, message):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(scenario(mesh, **changes))
    assert str(info.value) == f"<scenario>: {message}"


def test_full_recomputation_exchanges_again_in_the_backward(monkeypatch):
    """recompute: full reruns each MoE layer's forward before its backward, its dispatch and
    combine included: six all-to-alls a layer, 6 × 51 tokens × 128 bytes a step."""
    monkeypatch.setattr(experts_module, "draw_routing", fixed)
    data = scenario({"data": 4, "expert": 4}, **{"strategy.recompute": "full"})
    result = run(scenario_from_dict(data))
    assert result.tables["moe_steps"]["all_to_all_nbytes"].tolist() == [6 * 51 * 128] * 2
    comm = result.events[(result.events.kind == "comm") & (result.events.step == 0)]
    for detail in ("dispatch recomputed h.1.moe", "combine recomputed h.1.moe"):
        assert comm[comm.detail == detail].nbytes.sum() == 2 * 51 * TOKEN_NBYTES


def test_one_micro_batch_draws_what_expert_parallel_draws():
    """The same gpt, seed and devices: hybrid's expert axis (data 2 = expert 2, one
    micro-batch) routes each step's tokens exactly as expert_parallel's timing-only gpt, and
    its all-to-alls move the same bytes."""
    hybrid = run(scenario_from_dict(scenario({"data": 2, "expert": 2}, hosts=1, per_host=2)))
    data = scenario({"data": 2, "expert": 2}, hosts=1, per_host=2)
    data["strategy"] = {"kind": "expert_parallel", "expert": 2, "data": 1}
    expert_parallel = run(scenario_from_dict(data))
    for table in ("moe_routing", "moe_steps"):
        ours, theirs = hybrid.tables[table], expert_parallel.tables[table]
        assert ours.equals(theirs), table


def test_the_expert_axis_makes_a_layout_fit():
    """A gpt of 4 MoE blocks of 64 experts (8.6B parameters) on 8 A100s: every device
    holding every expert needs 129.2 GiB and is refused before the first step; the experts
    over 8 devices leave the dense parameters and 8 experts a block on each, 18.4 GB."""
    sizes = {**SIZES, "layers": 4, "hidden": 2048, "heads": 16, "seq_len": 128, "vocab": 1000}
    moe = {"experts": 64, "top_k": 1, "ffn_hidden": 8192}
    model = {"name": "gpt", **sizes, **moe}

    def layout(mesh: dict) -> dict:
        return scenario(mesh, hosts=1, per_host=8, **{"workload.model": model})

    with pytest.raises(SimdistError) as info:
        run(scenario_from_dict(layout({"data": 8})))
    assert str(info.value) == (
        "hybrid_experts: hybrid stage 0 (layers embeddings..lm_head) does not fit on "
        "worker0/gpu0: each device of its tensor group needs 129.2 GiB (params 16.1 GiB, "
        "gradients 16.1 GiB, optimizer 96.8 GiB, activations 90.5 MiB) and a a100 has 74.5 "
        "GiB; use more stages, a larger tensor group, zero: 1 or 2, fewer micro-batches in "
        "flight or a smaller batch"
    )
    fits = run(scenario_from_dict(layout({"data": 8, "expert": 8})))
    memory = fits.summary["memory_per_device"]["worker0/gpu0"]
    experts = gpt_expert_params(GptShape(**sizes, **moe))
    dense = gpt_size(GptShape(**sizes, **moe)).params - experts
    assert memory["params"] == 2 * (dense + experts // 8)
    assert memory["total"] == 18_400_191_488


# ------------------------------------------------------------------ interleaved

# Two holders' 16 tokens each over 4 experts (top 1), expert 2: device 0 holds experts 0 and
# 1, device 1 experts 2 and 3. Each receives 16 tokens and sends the other 4.
FIXED2 = np.array([[6, 6, 3, 1], [2, 2, 6, 6]])


def fixed2(rng, weights, devices, tokens, top_k):
    """The interleaved hand case's router: FIXED2 for every MoE layer and micro-batch."""
    del rng, weights, top_k
    assert (devices, tokens) == (2, 16)
    return FIXED2[:, None, :].copy()


def test_interleaved_chunks_exchange_on_their_own_and_keep_the_schedules_step(monkeypatch):
    """data 2 x pipeline 2 x v 2 with expert 2, one layer a chunk: h.0.attention (chunk 0,
    stage 0), h.0.moe (chunk 1, stage 1), h.1.attention (chunk 2, stage 0), h.1.moe (chunk
    3, stage 1), 2 micro-batches. Stage 1 holds both MoE chunks; each all-to-all is its own
    chunk's (a meeting of the 2 copies per chunk, micro-batch and exchange). An MoE pass is
    dispatch + its experts' span (16 tokens of the 128 slots a copy's batch was costed for: 1/8
    of the layer's batch time) +
    combine, each all-to-all 4 tokens x 128 bytes each way at 1 GB/s; with the attention
    chunks as long, every chunk pass is F' or B' and a step lasts Narayanan's
    (v·M + S - 1)(F' + B') = 5 (F' + B')."""
    monkeypatch.setattr(experts_module, "draw_routing", fixed2)
    free = {"bandwidth": "1GB/s", "latency": "0us"}
    data = scenario(
        {"data": 2, "pipeline": 2, "expert": 2},
        hosts=2,
        per_host=2,
        **{
            "strategy.micro_batches": 2,
            "strategy.schedule": "interleaved",
            "strategy.virtual_stages": 2,
            "strategy.partition": [1, 1, 1, 1],
            "cluster.links.network": free,
            "cluster.links.intra_host": free,
        },
    )
    a2a = 4 * TOKEN_NBYTES / 1e9  # one all-to-all: 4 tokens each way, both at once
    f, b = 8e-3 / 8 + 2 * a2a, 16e-3 / 8 + 2 * a2a  # F', B' of an MoE chunk
    names = ["h.0.attention", "h.0.moe", "h.1.attention", "h.1.moe"]
    # per batch (M = 2 micro-batches); an expert span is the batch's layer time in proportion
    times = [(2 * f, 2 * b), (8e-3, 16e-3)] * 2
    layers = tuple(LayerCost(n, x, y, 0) for n, (x, y) in zip(names, times, strict=True))
    costs = Costs(sum(map(sum, times)), 0, 0.0, 2, layers=layers, element_nbytes=2)
    result = simulate(scenario_from_dict(data), costs)
    s = result.summary
    assert s["experts"]["expert_capacity"] == 32
    assert s["hybrid"]["stage_layers"] == [[n] for n in names]
    assert s["simulated_time_s"] == pytest.approx(2 * 5 * (f + b), rel=1e-12)
    comm = result.events[result.events.kind == "comm"]
    for layer in ("h.0.moe", "h.1.moe"):
        for detail in ("dispatch forward", "combine forward", "dispatch backward"):
            rows = comm[comm.detail == f"{detail} {layer}"]
            # per step 2 micro-batches x 2 messages of 4 tokens, counted on both ends
            assert rows.nbytes.sum() == 2 * 2 * 2 * 2 * 4 * TOKEN_NBYTES
            assert set(rows.device) == {"worker0/gpu1", "worker1/gpu1"}
    steps = result.tables["moe_steps"]
    assert steps.all_to_all_nbytes.tolist() == [2 * 2 * 4 * 2 * 4 * TOKEN_NBYTES] * 2
    # each NIC sends 4 tokens per all-to-all: 2 layers x 2 micro-batches x 4 a step, 2 steps
    links = result.tables["links"].set_index("link")
    for host in ("worker0", "worker1"):
        sent = links.loc[f"{host}/nic/tx", "bytes"]  # summed in float by the link
        assert sent == pytest.approx(2 * 2 * 2 * 4 * 4 * TOKEN_NBYTES, rel=1e-12)


def test_interleaved_memory_and_reduction_add_up_a_devices_chunks():
    """data 4 x pipeline 2 x v 2, expert 2, a 4-block gpt (h.1.moe and h.3.moe): the auto
    partition puts both MoE layers on stage 1's chunks 1 and 3; each of its devices holds
    half the experts of both (the same device without an expert axis all of them), and its
    expert-data group of 2 all-reduces both chunks' half at once."""
    changes = {
        "workload.model.layers": 4,
        "strategy.micro_batches": 2,
        "strategy.schedule": "interleaved",
        "strategy.virtual_stages": 2,
        "strategy.partition": [3, 2, 2, 3],
    }
    sizes = {**SIZES, "layers": 4, "experts": 4, "top_k": 1, "moe_every": 2}
    experts = gpt_expert_params(GptShape(**sizes))
    dense = gpt_size(GptShape(**sizes)).params - experts
    split, whole = (
        run(scenario_from_dict(scenario(mesh, hosts=4, per_host=2, **changes))).summary
        for mesh in ({"data": 4, "pipeline": 2, "expert": 2}, {"data": 4, "pipeline": 2})
    )
    assert split["hybrid"]["stage_layers"][1::2] == [
        ["h.1.attention", "h.1.moe"],
        ["h.3.attention", "h.3.moe", "lm_head"],
    ]
    ours, theirs = split["memory_per_device"], whole["memory_per_device"]
    assert ours["worker0/gpu0"] == theirs["worker0/gpu0"]
    for kind in ("params", "gradients"):
        assert theirs["worker0/gpu1"][kind] - ours["worker0/gpu1"][kind] == 2 * experts // 2
        assert ours["worker0/gpu0"][kind] + ours["worker0/gpu1"][kind] == 2 * (dense + experts // 2)
    assert theirs["worker0/gpu1"]["optimizer"] - ours["worker0/gpu1"]["optimizer"] == 12 * (
        experts // 2
    )
    moved = split["experts"]["data_nbytes_per_device_per_step"]
    assert moved == [
        {"allreduce": 0, "reduce_scatter": 0, "all_gather": 0},
        {"allreduce": 2 * experts // 2, "reduce_scatter": 0, "all_gather": 0},
    ]
