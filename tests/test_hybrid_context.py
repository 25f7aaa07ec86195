"""hybrid's context axis: ring attention's key/value blocks on the clock by hand, the
gradient reduced over data x context, activations / CP, and the layouts it refuses."""

from __future__ import annotations

import pytest
from helpers import tiny

from simdist.errors import ScenarioError
from simdist.report.table_figures import key_number_rows
from simdist.runtime.engine import run, simulate
from simdist.scenario import scenario_from_dict
from simdist.sharding import Sharding
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.context_ring import ContextRing, core_share, kv_block_nbytes
from simdist.strategies.hybrid.plan import stage_plans
from simdist.strategies.steps import Compute, Receive, Send
from simdist.units import format_duration, format_size

X = 1_000_000  # bytes of one activation on the whole batch (batch x sequence x hidden)
LAUNCH = 1e-5
LATENCY, BANDWIDTH = 10e-6, 1e9
LINK = {"bandwidth": "1GB/s", "latency": "10us"}
# gpt2's shape (the clock model): 1024 positions, width 768, 12 heads of 64; 8 sequences.
SEQ, HIDDEN, HEADS, BATCH = 1024, 768, 12, 8


def layer_costs(attention_f: float, attention_b: float) -> Costs:
    """gpt2's layer names, hand-made costs: an embedding and one transformer layer."""
    layers = (
        LayerCost("embeddings", 4e-4, 6e-4, 4000, (), X),
        LayerCost("h.0.attention", attention_f, attention_b, 8000, (), X, LAUNCH),
        LayerCost("h.0.mlp", 2e-3, 4e-3, 16000, (), X, LAUNCH),
    )
    return Costs(
        compute_s=sum(x.forward_s + x.backward_s for x in layers),
        grad_nbytes=28000,
        flops_per_replica_step=0.0,
        total_steps=1,
        layers=layers,
    )


def layout(context: int = 2, tensor: int = 1, **changes: object) -> dict:
    """tiny timing-only on gpt2's clock at fp16: one stage, ``context`` x ``tensor``
    devices, a host per context rank (their blocks cross the network)."""
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": 1, "tensor": tensor, "pipeline": 1, "context": context},
        "micro_batches": 1,
    }
    return tiny(
        **{
            "numerics": False,
            "workload.model": "gpt2",
            "workload.steps": 1,
            "cluster.device.precision": "fp16",
            "strategy": strategy,
            "cluster.hosts": context,
            "cluster.devices_per_host": tensor,
            "cluster.links.network": LINK,
            **changes,
        }
    )


def test_the_ring_moves_kv_blocks_megatron_sends():
    # 2 (K and V) x 512 positions x 8 sequences x 12 heads x 64 x 2 bytes
    assert kv_block_nbytes(SEQ, 2, BATCH, HEADS, 64, 1, 2) == 12_582_912
    # grouped-query attention: 8 kv heads of 128 over a tensor group of 8, a quarter of 131k
    assert kv_block_nbytes(131072, 4, 1, 8, 128, 8, 2) == 2 * 32768 * 128 * 2
    # the core's share: 4s²h against the projections' 8sh² (heads = kv heads): s / (s + 2h)
    assert core_share(SEQ, HIDDEN, HEADS, HEADS) == pytest.approx(1024 / (1024 + 1536))
    ring = ContextRing(4, 10, 0.5)
    assert ring.sends("forward") == [10, 10, 10, 0]
    assert ring.sends("backward") == [10, 20, 20, 10]  # K/V, K/V + dK/dV, ..., dK/dV


def test_an_attention_layer_is_its_ring_steps_between_sends_and_receives():
    layers = [LayerCost("h.0.attention", 1.0 + LAUNCH, 2.0 + LAUNCH, 0, (), X, LAUNCH)]
    ring = ContextRing(2, 7, 0.5)
    forward, backward, _ = stage_plans(layers, ["block"], 0, 1, 1, False, True, ring)
    assert [type(op).__name__ for op in forward.program] == [
        "Compute", "Send", "Compute", "Receive", "Compute"
    ]  # fmt: skip
    outside, step = forward.program[0], forward.program[2]
    assert isinstance(outside, Compute) and outside.seconds == pytest.approx(0.5 + LAUNCH)
    assert isinstance(step, Compute) and step.seconds == pytest.approx(0.25)
    send = forward.program[1]
    assert isinstance(send, Send) and send.nbytes == 7 and send.peer == 1
    assert isinstance(forward.program[3], Receive) and forward.program[3].tag == send.tag
    assert [op.nbytes for op in backward.program if isinstance(op, Send)] == [7, 7]
    assert isinstance(backward.program[-1], Compute)  # the projections after the ring


def test_each_ring_step_waits_for_the_slower_of_its_compute_and_its_block_by_hand():
    # forward: a ring step (5 ms of core / 2) is faster than its 12.6 MB block (12.6 ms);
    # backward: a ring step (0.1 s) is slower than a block.
    f, b = 0.05, 0.5
    result = simulate(scenario_from_dict(layout()), layer_costs(f, b))
    share = core_share(SEQ, HIDDEN, HEADS, HEADS)
    kv = kv_block_nbytes(SEQ, 2, BATCH, HEADS, 64, 1, 2)
    block = 2 * LATENCY + kv / BANDWIDTH  # NIC out, NIC in: each rank to the other host

    def half(seconds: float, launch: float = 0.0) -> float:
        """A layer on one of 2 context ranks: half the work, the whole launch."""
        return (seconds - launch) / 2 + launch

    def ring(seconds: float) -> tuple[float, float]:
        core = (half(seconds, LAUNCH) - LAUNCH) * share
        return half(seconds, LAUNCH) - core, core / 2

    out_f, step_f = ring(f)
    out_b, step_b = ring(b)
    assert step_f < block < step_b
    forward = half(4e-4) + out_f + max(step_f, block) + step_f + half(2e-3, LAUNCH)
    backward = half(4e-3, LAUNCH) + 2 * max(step_b, block) + out_b + half(6e-4)
    reduce = result.events[result.events["detail"] == "data all-reduce stage 0"]
    assert len(reduce) == 2  # the two context ranks all-reduce their gradients
    reduce_s = float(reduce["end_s"].iloc[0] - reduce["start_s"].iloc[0])
    assert reduce["start_s"].min() == pytest.approx(forward + backward, rel=1e-12)
    assert result.summary["simulated_time_s"] == pytest.approx(
        forward + backward + reduce_s, rel=1e-12
    )
    ring_rows = result.events[result.events["detail"].str.startswith("context ring")]
    # 1 forward + 2 backward blocks per device, each on its sender's tx and receiver's rx
    assert len(ring_rows) == 3 * 2 * 2
    assert (ring_rows["nbytes"] == kv).all()
    first = ring_rows[ring_rows["detail"] == "context ring forward h.0.attention step 0"]
    assert (first["end_s"] - first["start_s"]).to_numpy() == pytest.approx([block] * 4)
    summary = result.summary["context"]
    assert summary["kv_block_nbytes"] == kv
    assert summary["nbytes_per_device_per_micro_batch"] == [{"forward": kv, "backward": 2 * kv}]
    assert summary["nbytes_per_step"] == 3 * kv * 2
    assert summary["nbytes_per_device_per_step"] == [3 * kv]
    # the forward's one ring step waits for its block; the backward's hide theirs
    assert summary["exposed_s_per_step"] == pytest.approx(block - step_f, rel=1e-9)
    # report.md's rows for the ring, read from the summary by the report's generic hook
    rows = dict(key_number_rows(result.summary))
    assert rows["context ring (2 devices): K/V block"] == format_size(kv)
    assert rows["context ring (2 devices): per device and step (busiest stage)"] == format_size(
        3 * kv
    )
    assert rows["context ring (2 devices): not hidden behind attention"] == format_duration(
        summary["exposed_s_per_step"]
    )
    # links.csv: each NIC carries its device's 3 blocks and the gradient all-reduce's 28000
    links = result.tables["links"].set_index("link")["bytes"]
    assert links["worker0/nic/tx"] == pytest.approx(3 * kv + 28000)


def test_the_gradient_is_reduced_over_data_and_context_and_zero_shards_over_both():
    data = layout(**{"strategy.zero": 1})
    scenario = scenario_from_dict(data)
    assert scenario.strategy.sharding(scenario.cluster) == Sharding(1, 1, 2, 1, tensor=1, context=2)
    wider = layout(context=2, tensor=2, **{"strategy.zero": 2})
    wider["strategy"]["mesh"]["data"] = 2
    wider["cluster"]["hosts"] = 4
    scenario = scenario_from_dict(wider)
    assert scenario.strategy.sharding(scenario.cluster) == Sharding(2, 8, 8, 1, tensor=2, context=2)


def test_each_device_holds_its_share_of_the_sequence():
    """A small gpt's stored tensors (Korthikanti et al. 2022, Sec. 4.1) at fp16 on 16 of its
    32 positions, kind by kind; the parameters whole on every context rank."""
    gpt = {"name": "gpt", "layers": 2, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 128}
    result = run(scenario_from_dict(layout(**{"workload.model": gpt})))
    held = result.summary["memory_per_device"]["worker1/gpu0"]
    n, h, a, v, b, whole = 2, 64, 4, 128, BATCH, 32
    s = whole // 2
    inputs = b * (
        4 * s  # the embeddings' int32 token ids
        + n * 2 * (1 + 1 + 2 + 1 + 1) * s * h  # attention's inputs, Q, K, V at 16 bits
        + n * 2 * (1 + 1 + 4 + 4) * s * h  # the MLP's
        + 2 * 2 * s * h  # the head's LayerNorm and projection inputs
        + 4 * s * v  # float32 logits
    )
    # the softmax output and its dropout's output (16 bits), the dropout's mask (a byte):
    # each device's 16 queries against all 32 keys
    scores = b * n * (2 + 1 + 2) * a * s * whole
    masks = b * (s * h + n * (s * h + s * h))  # the dropout masks, a byte each
    by_kind = held["activations_by_kind"]
    assert (by_kind["stored_inputs"], by_kind["attention_scores"], by_kind["masks"]) == (
        inputs,
        scores,
        masks,
    )
    one = run(scenario_from_dict(layout(context=1, **{"workload.model": gpt})))
    assert held["params"] == one.summary["memory_per_device"]["worker0/gpu0"]["params"]


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"strategy.mesh": {"data": 1, "tensor": 1, "pipeline": 1, "context": 3}},
            "strategy.mesh.context: got 3; the sequences of 1024 positions must split into 2 x "
            "context = 6 equal chunks (Megatron-LM's load-balanced causal split: device i holds "
            "chunks i and 5 - i), e.g. context: 2",
        ),
        (
            {"cluster.hosts": 3},
            "strategy.mesh: data 1 x tensor 1 x pipeline 1 x context 2 = 2 devices; the cluster "
            "has 3 (hosts holding [1, 1, 1]): the mesh must cover them, e.g. mesh: {data: 1, "
            "tensor: 1, pipeline: 1, context: 3}",
        ),
        (
            {"workload.model": "mlp"},
            "strategy.mesh.context: got 2; context parallelism splits a transformer's sequences "
            "and runs its attention as a ring, and workload.model mlp has no attention layers: "
            "use a gpt (timing_model: gpt), or context: 1",
        ),
        (
            {"strategy.placement": ["data", "context", "tensor"]},
            "strategy.placement: got ['data', 'context', 'tensor']; name each of ['data', "
            "'pipeline', 'tensor'] once (and context, or leave it out to put it just outside "
            "tensor), outermost first, e.g. placement: [data, pipeline, context, tensor]",
        ),
        (
            {"strategy.overlap_grad_reduce": True},
            "strategy.overlap_grad_reduce: a context axis (2 devices) runs each attention "
            "layer's backward as ring steps, and the gradient buckets that overlap the backward "
            "are not cut along them yet: use overlap_grad_reduce: false with a context axis, or "
            "context: 1",
        ),
    ],
    ids=["seq_len", "devices", "no-attention", "placement", "overlap"],
)
def test_bad_context_layouts_are_refused_with_one_line(changes, message):
    data = layout(**changes)
    if "strategy.mesh" in changes:
        data["cluster"]["hosts"] = 3
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    assert message in " ".join(str(info.value).split())


def test_placement_puts_the_context_axis_where_it_is_named():
    # left out: just outside tensor, so a host's 2 devices are the two context ranks
    near = layout(**{"cluster.hosts": 2, "cluster.devices_per_host": 2})
    near["strategy"]["mesh"]["pipeline"] = 2
    inside = simulate(scenario_from_dict(near), layer_costs(0.05, 0.5)).summary["hybrid"]
    assert inside["placement"] == ["data", "pipeline", "context", "tensor"]
    assert inside["stage_devices"] == [
        ["worker0/gpu0", "worker0/gpu1"],
        ["worker1/gpu0", "worker1/gpu1"],
    ]
    # named outermost but data: the context ranks on different hosts, a stage per device
    near["strategy"]["placement"] = ["data", "context", "pipeline", "tensor"]
    across = simulate(scenario_from_dict(near), layer_costs(0.05, 0.5)).summary["hybrid"]
    assert across["stage_devices"] == [
        ["worker0/gpu0", "worker1/gpu0"],
        ["worker0/gpu1", "worker1/gpu1"],
    ]
