"""The configurable gpt with mixture-of-experts blocks, and expert_parallel running it
timing-only: its closed-form size against the built model, the all-to-all bytes of each MoE
layer on a hand case, refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from simdist.errors import ScenarioError
from simdist.gpt_shape import GptShape
from simdist.model_size import gpt_expert_params, gpt_layers, gpt_model_flops_per_token, gpt_size
from simdist.numerics import fullsize
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict

GELU_EVERY_OTHER = {
    "layers": 4,
    "hidden": 64,
    "heads": 4,
    "seq_len": 32,
    "vocab": 100,
    "experts": 4,
    "top_k": 2,
    "moe_every": 2,
}
SWIGLU_EVERY = {
    "layers": 3,
    "hidden": 64,
    "heads": 4,
    "seq_len": 32,
    "vocab": 100,
    "kv_heads": 2,
    "ffn_hidden": 96,
    "norm": "rmsnorm",
    "mlp": "swiglu",
    "positions": "rotary",
    "tied_embeddings": False,
    "bias": False,
    "experts": 8,
    "top_k": 1,
    "moe_every": 1,
}
# Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088, Table 1): 32 layers, dim 4096,
# hidden_dim 14336, 32 heads, 8 kv heads, vocabulary 32000, 8 experts, top 2.
MIXTRAL_8X7B = {
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "seq_len": 4096,
    "vocab": 32000,
    "kv_heads": 8,
    "ffn_hidden": 14336,
    "norm": "rmsnorm",
    "mlp": "swiglu",
    "positions": "rotary",
    "tied_embeddings": False,
    "bias": False,
    "experts": 8,
    "top_k": 2,
}


@pytest.mark.parametrize("sizes", [GELU_EVERY_OTHER, SWIGLU_EVERY], ids=["gelu-2", "swiglu-1"])
def test_closed_form_counts_the_built_model_layer_by_layer(sizes):
    built = fullsize.build("gpt", sizes=sizes)
    assert fullsize.param_count(built) == gpt_size(GptShape(**sizes)).params
    names = [layer.name for layer in built.layers]
    assert names == [layer.name for layer in gpt_layers(GptShape(**sizes))]
    moe = [n for n in names if n.endswith(".moe")]
    assert moe == (
        ["h.1.moe", "h.3.moe"] if sizes["moe_every"] == 2 else ["h.0.moe", "h.1.moe", "h.2.moe"]
    )


def test_gelu_moe_block_by_hand():
    """h = 64, f = 256, E = 4: each expert 2·64·256 + 256 + 64 = 33,088; the MoE block its
    LayerNorm (128), router 64·4 = 256 and 4 experts: 132,736; two such blocks."""
    assert gpt_expert_params(GptShape(**GELU_EVERY_OTHER)) == 2 * 4 * 33_088
    dense = gpt_size(GptShape(**{**GELU_EVERY_OTHER, "experts": None})).params
    assert gpt_size(GptShape(**GELU_EVERY_OTHER)).params - dense == 2 * (256 + 3 * 33_088)


def test_mixtral_8x7b_counts_its_published_46_7b():
    """46,702,792,704 parameters (Mixtral's 46.7B); 12,879,925,248 active (its 12.9B: 6 of
    the 8 experts of 3·4096·14336 left out in each of 32 blocks), of which all but the
    token embedding's 32000·4096 multiply, plus the attention core's 12·l·h·s."""
    assert gpt_size(GptShape(**MIXTRAL_8X7B)).params == 46_702_792_704
    assert 46_702_792_704 - gpt_expert_params(GptShape(**MIXTRAL_8X7B)) * 6 // 8 == 12_879_925_248
    per_token = gpt_model_flops_per_token(GptShape(**MIXTRAL_8X7B))
    assert per_token == 6 * (12_879_925_248 - 32_000 * 4096) + 12 * 32 * 4096 * 4096


def scenario(**model: object) -> dict:
    """A timing-only gpt with experts on 2 devices of one host, expert-parallel."""
    return {
        "name": "moe_gpt",
        "seed": 0,
        "numerics": False,
        "cluster": {
            "hosts": 1,
            "devices_per_host": 2,
            "device": {"profile": "a100", "precision": "bf16", "variability": 0},
            "links": {"intra_host": {"bandwidth": "300GB/s", "latency": "2us"}},
        },
        "workload": {
            "model": {
                "name": "gpt",
                "layers": 4,
                "hidden": 64,
                "heads": 4,
                "seq_len": 16,
                "vocab": 100,
                **model,
            },
            "batch_size": 2,
            "optimizer": {"name": "adam", "learning_rate": 1e-4},
            "steps": 2,
        },
        "strategy": {"kind": "expert_parallel", "expert": 2},
    }


def test_each_moe_layer_moves_its_routed_tokens():
    """2 experts, top-2, capacity factor 1: every token goes to both experts and none is
    dropped, so each device sends its 2 × 16 = 32 tokens to the other's expert in each of a
    MoE layer's four all-to-alls: 4 × 2 × 32 tokens × 64 wide × 2 bytes (bf16) = 32,768
    bytes a layer, two MoE layers (moe_every 2) a step."""
    data = scenario(experts=2, top_k=2, capacity_factor=1.0, moe_every=2)
    result = run(scenario_from_dict(data))
    steps = pd.DataFrame(result.tables["moe_steps"])
    assert steps["all_to_all_nbytes"].tolist() == [2 * 32_768] * 2
    assert steps["dropped_fraction"].tolist() == [0.0, 0.0]
    assert steps["tokens"].tolist() == [2 * 2 * 2 * 32] * 2  # layers × devices × k × tokens
    assert result.summary["expert_capacity"] == 64


@pytest.mark.parametrize(
    ("model", "strategy", "message"),
    [
        (
            {"experts": 3, "top_k": 1},
            {},
            "strategy.expert: got 2; the expert axis must divide the model's experts (3) so "
            "that each device holds as many, e.g. expert: 1",
        ),
        (
            {"experts": 1, "top_k": 2},
            {},
            "workload.model.top_k: got 2; each token goes to its top_k experts: 1 (Switch) or "
            "2 (GShard), at most experts (1), e.g. top_k: 1",
        ),
        (
            {"top_k": 1},
            {},
            "workload.model.top_k: is an option of a gpt's mixture-of-experts layers; give "
            "experts with it, e.g. experts: 8, top_k: 2",
        ),
        (
            {"experts": 2, "moe_every": 5},
            {},
            "workload.model.moe_every: got 5; every moe_every-th of the 4 blocks has experts, "
            "so it must be at most layers, e.g. moe_every: 2",
        ),
        (
            {},
            {},
            "workload.model: got a gpt without experts; expert_parallel spreads the experts of "
            "mixture-of-experts layers over devices, e.g. model: {name: moe, experts: 8, "
            "top_k: 2} or {name: gpt, experts: 8} (timing-only)",
        ),
    ],
    ids=["expert-axis", "top-k-experts", "top-k-alone", "moe-every", "dense-gpt"],
)
def test_bad_moe_gpt_is_one_clear_error(model, strategy, message):
    data = scenario(**model)
    data["strategy"].update(strategy)
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    assert str(info.value) == f"<scenario>: {message}"


@pytest.mark.parametrize(
    ("strategy", "field"),
    [
        ({"kind": "tensor_parallel", "tensor": 2}, "strategy.tensor"),
        ({"kind": "hybrid", "mesh": {"data": 1, "tensor": 2}}, "strategy.mesh.tensor"),
    ],
    ids=["tensor_parallel", "hybrid"],
)
def test_a_tensor_group_refuses_a_moe_gpt_in_one_line(strategy, field):
    """Tensor parallelism splits dense blocks; a MoE layer would run whole on every device
    of the group, so the layout is refused rather than priced wrong."""
    data = scenario(experts=2)
    data["strategy"] = strategy
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    assert str(info.value) == (
        f"<scenario>: {field}: got 2; a tensor group splits the dense blocks' matmuls, and the "
        "mixture-of-experts layers of model gpt (experts: 2) are not split over it: use "
        "tensor: 1 (every device holds the experts whole), or strategy expert_parallel"
    )
