"""tensor_parallel: numerics ≡ one_device, one Megatron layer's time by hand, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_trees_close, tiny

from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.hardware.cluster import Cluster
from simdist.numerics.fullsize import Layer, apply_layer, build
from simdist.numerics.fullsize.blocks import DenseLayer
from simdist.numerics.fullsize.transformer import (
    FeedForward,
    Pooler,
    SelfAttention,
    TokenEmbeddings,
)
from simdist.numerics.tensor_parallel import (
    layered_model,
    loss_sum,
    place,
    sharded_value_and_grad,
    tensor_mesh,
)
from simdist.runtime.costs import measure_costs
from simdist.runtime.engine import run, simulate
from simdist.scenario import scenario_from_dict
from simdist.sharding import Sharding
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.steps import Compute
from simdist.strategies.tensor_parallel.plan import device_grad_nbytes, layer_roles, step_plan
from simdist.strategies.tensor_parallel.spec import TRANSFORMER_SIZES

OPTIMIZERS = {
    "sgd": {"name": "sgd", "learning_rate": 0.1},
    "momentum": {"name": "momentum", "learning_rate": 0.05, "momentum": 0.9},
    "adam": {"name": "adam", "learning_rate": 0.01},
}


def tp(tensor: int, data: int = 1, **changes: object) -> dict:
    """tiny on one host of tensor × data devices, tensor_parallel."""
    return tiny(
        **{
            "strategy": {"kind": "tensor_parallel", "tensor": tensor, "data": data},
            "cluster.devices_per_host": tensor * data,
            **changes,
        }
    )


# ------------------------------------------------------------------ numerics (mlp)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize(
    "hidden, tensor, data, sequence_parallel",
    [([16], 4, 1, False), ([16, 8, 12], 2, 2, False), ([16, 8, 12, 6], 2, 2, True)],
    ids=["one-pair-T4", "two-pairs-T2xD2", "sequence-parallel-T2xD2"],
)
def test_tensor_parallel_equals_one_device_with_the_global_batch(
    optimizer, hidden, tensor, data, sequence_parallel
):
    model = {"name": "mlp", "hidden": hidden}
    common = {
        "workload.model": model,
        "workload.optimizer": OPTIMIZERS[optimizer],
        "workload.steps": 6,
        "workload.eval_every": 0,
    }
    one = run(scenario_from_dict(tiny(**common, **{"workload.batch_size": 32})))
    sp = {"workload.batch_size": 32 // data, "strategy.sequence_parallel": sequence_parallel}
    split = run(scenario_from_dict(tp(tensor, data, **common, **sp)))
    assert split.scenario.global_batch == 32 and split.summary["execution"] == "devices"
    assert_trees_close(split.params, one.params, atol=1e-5)
    assert split.summary["final_train_loss"] == pytest.approx(
        one.summary["final_train_loss"], abs=1e-5
    )


def test_tensor_parallel_reruns_are_byte_identical():
    data = tp(4, **{"workload.steps": 4, "cluster.device.variability": {"step": 0.05}})
    a, b = run(scenario_from_dict(data)), run(scenario_from_dict(data))
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    assert a.events.equals(b.events)


# ------------------------------------------------------------ numerics (transformer)


def small_transformer() -> list[Layer]:
    """The smallest BERT / GPT-2 mix fullsize/transformer.py builds: hidden 16, 4 heads."""
    return [
        Layer("embeddings", TokenEmbeddings(16, 8, 16, 2, 1e-12)),
        Layer("encoder.0.attention", SelfAttention(4)),
        Layer("encoder.0.ffn", FeedForward(32)),
        Layer("h.1.attention", SelfAttention(4, causal=True, pre_layer_norm=True, epsilon=1e-5)),
        Layer("h.1.mlp", FeedForward(32, pre_layer_norm=True, epsilon=1e-5, approximate_gelu=True)),
        Layer("pooler", Pooler()),
        Layer("classifier", DenseLayer(3, relu=False)),
    ]


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_small_transformer_split_by_heads_equals_one_device(optimizer):
    layers = small_transformer()
    rng = np.random.default_rng(np.random.SeedSequence([30, 4]))
    ids = jnp.asarray(rng.integers(0, 16, (8, 8)), jnp.int32)
    labels = jnp.asarray(rng.integers(0, 3, 8), jnp.int32)
    variables, x = {}, ids
    for i, layer in enumerate(layers):
        variables[layer.name] = layer.module.init(jax.random.PRNGKey(i), x)
        x = apply_layer(layer.module, variables[layer.name], x)

    def one_device_loss(params, ids, labels):
        x = ids
        for layer in layers:
            x = apply_layer(layer.module, params[layer.name], x)
        return loss_sum(x, labels, "classification") / 8

    mesh = tensor_mesh(2, 2)  # data 2 x tensor 2: 2 heads of 4 per device
    model = layered_model(layers, variables, tensor=2)
    split_grads = sharded_value_and_grad(model, mesh, "classification", 8)
    one_grads = jax.jit(jax.value_and_grad(one_device_loss))
    opt = {
        "sgd": optax.sgd(0.1),
        "momentum": optax.sgd(0.05, momentum=0.9),
        # The key projection's bias has a gradient of exactly 0 (softmax is unchanged by
        # adding q.b_k to every key's logit), so both runs' gradients there are rounding
        # noise (~1e-9), which Adam's default eps = 1e-8 would scale up to lr-sized steps in
        # unrelated directions; eps = 1e-4 keeps that noise below the tolerance.
        "adam": optax.adam(0.01, eps=1e-4),
    }[optimizer]
    a, b = variables, place(variables, model.specs, mesh)
    sa, sb = opt.init(a), opt.init(b)
    for _ in range(3):
        la, ga = one_grads(a, ids, labels)
        lb, gb = split_grads(b, ids, labels)
        assert float(lb) == pytest.approx(float(la), abs=1e-5)
        ua, sa = opt.update(ga, sa, a)
        ub, sb = opt.update(gb, sb, b)
        a, b = optax.apply_updates(a, ua), optax.apply_updates(b, ub)
    assert_trees_close(b, a, atol=1e-5)
    query = b["encoder.0.attention"]["params"]["query"]["kernel"]
    assert query.sharding.spec == jax.sharding.PartitionSpec(None, "tensor")
    assert query.addressable_shards[0].data.shape == (16, 8)


def test_transformer_sizes_are_the_built_models():
    for name, size in TRANSFORMER_SIZES.items():
        layers = build(name).layers
        heads = {layer.module.heads for layer in layers if isinstance(layer.module, SelfAttention)}
        inner = {layer.module.inner for layer in layers if isinstance(layer.module, FeedForward)}
        assert (heads, inner) == ({size.heads}, {size.inner})
        assert layers[0].module.hidden == size.hidden


# ------------------------------------------------------------------ the clock

X = 1_000_000  # bytes of one activation (batch x sequence x hidden)
F, B = 1e-3, 2e-3  # a block's forward and backward on the whole batch
LAUNCH = 1e-5


def megatron_layer_costs(recompute: bool = False) -> Costs:
    """An embedding (not split) and one transformer layer: attention and MLP blocks; with
    ``recompute``, each block's backward holds its forward again (``recompute: full``)."""
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
        total_steps=3,
        layers=layers,
    )


def timed(
    tensor: int = 4,
    data: int = 1,
    sequence_parallel: bool = False,
    hosts: int = 1,
    recompute: bool = False,
):
    """megatron_layer_costs under tensor_parallel on one host, variability off (exact)."""
    strategy = {"kind": "tensor_parallel", "tensor": tensor, "data": data}
    scenario = scenario_from_dict(
        tiny(
            **{
                "numerics": False,
                "workload.timing_model": "gpt2",
                "strategy": {**strategy, "sequence_parallel": sequence_parallel},
                "cluster.hosts": hosts,
                "cluster.devices_per_host": tensor * data // hosts,
                "cluster.links.network": {"bandwidth": "1GB/s", "latency": "10us"},
            }
        )
    )
    return simulate(scenario, megatron_layer_costs(recompute))


def split(seconds: float) -> float:
    return (seconds - LAUNCH) / 4 + LAUNCH


def test_one_megatron_layer_has_two_all_reduces_each_way_on_the_critical_path():
    result = timed()
    ar = ring_allreduce_s(4, X, 10e-6, 1e9)  # tiny's intra-host link: 1 GB/s, 10 us
    step = [
        0.0 + 4e-4,  # the embedding lookup: every device looks up every token
        ar,  # g after the vocabulary-parallel embedding
        0.0 + split(F),  # the attention block's share
        ar,  # g after attention
        0.0 + split(2 * F),
        ar,  # g after the MLP
        0.0 + split(2 * B),
        ar,  # f: the MLP's input gradient
        0.0 + split(B),
        ar,  # f: the attention's input gradient
        0.0 + 6e-4,  # the embedding's backward (its input is token ids: no f)
    ]
    t = 0.0
    for _ in range(3):
        for part in step:
            t += part
    assert result.summary["simulated_time_s"] == t
    comm = result.events[result.events["kind"] == "comm"]
    assert len(comm) == 5 * 4 * 3  # 5 all-reduces x 4 devices x 3 steps
    assert list(comm["detail"].iloc[::4][:5]) == [
        "tensor all-reduce forward embeddings",
        "tensor all-reduce forward h.0.attention",
        "tensor all-reduce forward h.0.mlp",
        "tensor all-reduce backward h.0.mlp",
        "tensor all-reduce backward h.0.attention",
    ]
    assert result.summary["tensor_collectives_per_step"] == 5
    assert result.summary["tensor_comm_s_per_step"] == pytest.approx(5 * ar, rel=1e-12)
    # links.csv: each ring all-reduce of X over 4 devices puts 2(N-1) X bytes on the host's
    # shared intra-host link (every flow of every step crosses it)
    links = result.tables["links"].set_index("link")
    assert links.loc["worker0/intra", "bytes"] == pytest.approx(3 * 5 * 2 * 3 * X, rel=1e-12)


def test_full_recomputation_runs_each_blocks_forward_all_reduce_again():
    """Megatron's full recomputation reruns a block's forward, its ``g`` all-reduce
    included, before the block's backward: one more all-reduce per block, on the critical
    path (the recomputed forward's compute is inside the block's backward span)."""
    result = timed(recompute=True)
    ar = ring_allreduce_s(4, X, 10e-6, 1e9)
    step = [
        0.0 + 4e-4,
        ar,  # g after the embedding
        0.0 + split(F),
        ar,  # g after attention
        0.0 + split(2 * F),
        ar,  # g after the MLP
        ar,  # g after the MLP, recomputed
        0.0 + split(2 * (B + F)),
        ar,  # f: the MLP's input gradient
        ar,  # g after attention, recomputed
        0.0 + split(B + F),
        ar,  # f: the attention's input gradient
        0.0 + 6e-4,  # the embedding is not recomputed
    ]
    t = 0.0
    for _ in range(3):
        for part in step:
            t += part
    assert result.summary["simulated_time_s"] == t
    comm = result.events[result.events["kind"] == "comm"]
    assert list(comm["detail"].iloc[::4][:7]) == [
        "tensor all-reduce forward embeddings",
        "tensor all-reduce forward h.0.attention",
        "tensor all-reduce forward h.0.mlp",
        "tensor all-reduce recompute h.0.mlp",
        "tensor all-reduce backward h.0.mlp",
        "tensor all-reduce recompute h.0.attention",
        "tensor all-reduce backward h.0.attention",
    ]
    assert result.summary["tensor_collectives_per_step"] == 7
    assert result.summary["tensor_comm_nbytes_per_step"] == 7 * X


def test_full_recomputation_with_sequence_parallelism_gathers_and_scatters_again():
    """With sequence parallelism each recomputed block all-gathers its input and
    reduce-scatters its output again: 4 more collectives of X, as long as the 2 more
    all-reduces without it."""
    plain, sp = timed(recompute=True), timed(sequence_parallel=True, recompute=True)
    assert sp.summary["tensor_collectives_per_step"] == 10 + 4
    recomputed = sp.events[sp.events["detail"].str.contains("recompute")]["detail"]
    assert list(recomputed.iloc[::4]) == 3 * [
        "tensor all-gather recompute h.0.mlp",
        "tensor reduce-scatter recompute h.0.mlp",
        "tensor all-gather recompute h.0.attention",
        "tensor reduce-scatter recompute h.0.attention",
    ]
    assert sp.summary["simulated_time_s"] == pytest.approx(
        plain.summary["simulated_time_s"], rel=1e-12
    )


def test_sequence_parallel_swaps_each_all_reduce_for_reduce_scatter_and_all_gather():
    plain, sp = timed(), timed(sequence_parallel=True)
    kinds = sp.events[sp.events["kind"] == "comm"]["detail"].str.split().str[1]
    assert set(kinds) == {"reduce-scatter", "all-gather"} and len(kinds) == 10 * 4 * 3
    assert sp.summary["simulated_time_s"] == pytest.approx(
        plain.summary["simulated_time_s"], rel=1e-12
    )
    assert (
        sp.summary["tensor_comm_nbytes_per_step"]
        == 2 * plain.summary["tensor_comm_nbytes_per_step"]
    )


def test_data_copies_all_reduce_their_shard_after_backward():
    one, two = timed(tensor=2), timed(tensor=2, data=2, hosts=2)
    # each device all-reduces with its copy the embedding's gradient (whole) and its half
    # of the blocks': 4000 + (8000 + 16000) / 2 bytes
    assert two.summary["data_allreduce_nbytes"] == 16000
    # a copy per host; the two data groups (devices 0 and 2, 1 and 3) all-reduce at once
    # over the same two NICs, each at half their bandwidth: twice the closed form
    ar = ring_allreduce_s(2, 16000, 10e-6, 1e9)
    assert two.summary["simulated_time_s"] == pytest.approx(
        one.summary["simulated_time_s"] + 3 * 2 * ar, rel=1e-12
    )
    data = two.events[two.events["detail"] == "data all-reduce"]
    assert len(data) == 4 * 3


# ------------------------------------------------------------------ layout and errors


def test_sharding_splits_model_state_and_with_sequence_parallel_activations():
    scenario = scenario_from_dict(tp(4))
    assert scenario.strategy.sharding(scenario.cluster) == Sharding(4, 4, 4, 1, tensor=4)
    scenario = scenario_from_dict(tp(4, **{"strategy.sequence_parallel": True, "strategy.data": 1}))
    assert scenario.strategy.sharding(scenario.cluster) == Sharding(4, 4, 4, 4, tensor=4)
    assert scenario.numeric_devices == 4 and scenario.replicas == 1


def test_tensor_left_out_is_one_host():
    scenario = scenario_from_dict(
        tiny(**{"strategy": "tensor_parallel", "cluster.devices_per_host": 2})
    )
    assert scenario.strategy.tensor == 2


@pytest.mark.parametrize(
    "changes, field, words",
    [
        (
            {"strategy.tensor": 3, "cluster.devices_per_host": 3},
            "strategy.tensor",
            "hidden[0] (16)",
        ),
        (
            {
                "numerics": False,
                "workload.timing_model": "gpt2",
                "strategy.tensor": 8,
                "cluster.devices_per_host": 8,
            },
            "strategy.tensor",
            "attention heads (12)",
        ),
        (
            {"cluster.hosts": 2, "cluster.devices_per_host": 2},
            "strategy.tensor",
            "span hosts [0, 1]",
        ),
        ({"strategy.data": 2}, "strategy.tensor", "needs 8 devices"),
        ({"workload.model": "cnn"}, "workload.model", "cannot be split"),
        (
            {"numerics": False, "workload.timing_model": "resnet50"},
            "workload.timing_model",
            "cannot be split",
        ),
        (
            {"strategy.sequence_parallel": True, "workload.batch_size": 6},
            "workload.batch_size",
            "splits them over the 4 devices",
        ),
        ({"workload.model": {"name": "mlp", "hidden": []}}, "workload.model.hidden", "no hidden"),
    ],
    ids=[
        "hidden",
        "heads",
        "across-hosts",
        "devices",
        "cnn",
        "resnet50",
        "sequence-rows",
        "no-pair",
    ],
)
def test_bad_layouts_name_the_field_and_the_sizes(changes, field, words):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(tp(4, **changes))
    assert field in str(info.value) and words in str(info.value)


def test_tensor_groups_across_hosts_when_allowed():
    data = tp(4, **{"cluster.hosts": 2, "cluster.devices_per_host": 2})
    data["strategy"]["cross_host"] = True
    assert scenario_from_dict(data).strategy.tensor == 4


def test_gpt2_roles_and_each_devices_gradient_bytes():
    scenario = scenario_from_dict(
        tiny(
            **{
                "numerics": False,
                "workload.timing_model": "gpt2",
                "workload.input_shape": [16],
                "workload.batch_size": 1,
                "strategy": {"kind": "tensor_parallel", "tensor": 4},
                "cluster.devices_per_host": 4,
            }
        )
    )
    costs = measure_costs(scenario, None)
    names = [layer.name for layer in costs.layers]
    roles = layer_roles("gpt2", names)
    assert roles[0] == "vocab_embedding" and roles[-1] == "vocab_head"
    assert set(roles[1:-1]) == {"block"} and len(roles) == 26
    h, v, T = 768, 50257, 4
    split = v * h + 12 * (3 * (h * h + h) + h * h + (h * 4 * h + 4 * h) + 4 * h * h)
    whole = 1024 * h + 12 * (2 * h + h + 2 * h + h) + 2 * h  # wpe, LNs, row biases, ln_f
    leaves = {path: nbytes for path, _, nbytes in costs.param_leaves}
    assert sum(leaves.values()) == 4 * (split + whole)
    assert device_grad_nbytes(costs.layers, roles, T, leaves) == 4 * (split // T + whole)


def test_mlp_sequence_parallel_plan_keeps_whole_layers_on_the_split_rows():
    layers = [LayerCost(f"Dense_{i}", 1.0, 2.0, 100, (), 10 * (i + 1)) for i in range(3)]
    roles = layer_roles("mlp", [layer.name for layer in layers])
    assert roles == ("column", "row", "whole")
    plan = step_plan(layers, roles, 2, True, gather_whole=False)
    assert [(c.op, c.nbytes) for c in plan.collectives] == [
        ("reduce_scatter", 20),  # after the row layer; Dense_2 runs on its rows
        ("all_gather", 20),  # backward: the row layer's output gradient, gathered
    ]
    # forward: Dense_0 and Dense_1 halved (0.5 + 0.5), then Dense_2 whole; backward alike
    spans = [op for op in plan.program if isinstance(op, Compute)]
    assert [(op.unit, op.seconds) for op in spans] == [(0, 1.0), (1, 1.0), (2, 2.0), (3, 2.0)]


def test_a_straggler_may_name_any_device_of_the_tensor_groups():
    data = tp(2, 2, **{"faults.stragglers": [{"device": 3, "slowdown": 2.0}]})
    scenario = scenario_from_dict({**data, "numerics": False})
    assert scenario.faults.stragglers[0].device == 3
    events = simulate(scenario, megatron_layer_costs()).events
    straggling = events[events["kind"] == "straggle"]
    assert len(straggling) and set(straggling["device"]) == {
        Cluster(scenario.cluster).devices[3].name
    }
