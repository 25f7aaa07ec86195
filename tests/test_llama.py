"""The configurable ``gpt`` in Llama's layout: the Llama 3 presets against their published
parameter counts and FLOP accounting (Dubey et al. 2024, "The Llama 3 Herd of Models",
arXiv:2407.21783), the options' activations by hand (Korthikanti et al. 2022's rule, one
tensor at a time), the built model against the counted one, and the refusals."""

from __future__ import annotations

import math

import pytest

from simdist.activation_memory import activations, gpt_layer_tensors
from simdist.catalog import GPT_PRESETS
from simdist.errors import ScenarioError
from simdist.gpt_shape import GptShape
from simdist.model_size import gpt_layers, gpt_model_flops_per_token, gpt_size
from simdist.numerics import fullsize
from simdist.numerics.memory import Footprint, gpt_footprint
from simdist.numerics.profile import profile_model
from simdist.scenario import scenario_from_dict
from simdist.scenario.workload import ModelSpec
from simdist.sharding import Sharding
from simdist.strategies.tensor_parallel.plan import leaf_split

# Published parameter counts. 405B: the paper's abstract and Table 3 ("a dense Transformer
# with 405B parameters"). 8.03B and 70.6B: the released checkpoints' counts on their model
# pages (huggingface.co/meta-llama/Meta-Llama-3-8B and Meta-Llama-3-70B), the figures Meta
# publishes the weights under.
PUBLISHED = {"llama3_8b": 8.03e9, "llama3_70b": 70.6e9, "llama3_405b": 405e9}
# The checkpoints' exact counts (the sum of the released tensors' sizes): what the layout
# counts to, tensor by tensor (embeddings, 32/80/126 blocks, final RMSNorm, output head).
EXACT = {"llama3_8b": 8_030_261_248, "llama3_70b": 70_553_706_496, "llama3_405b": 405_853_388_800}


def preset(name: str, **options: object) -> dict:
    return ModelSpec.model_validate({"name": "gpt", "preset": name, **options}).gpt_sizes() or {}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_presets_have_the_published_parameter_counts(name: str) -> None:
    params = gpt_size(GptShape(**preset(name))).params
    assert params == EXACT[name]
    assert abs(params / PUBLISHED[name] - 1) < 0.005


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_built_presets_have_the_counted_parameters(name: str) -> None:
    built = fullsize.build("gpt", sizes=preset(name))
    assert fullsize.param_count(built) == EXACT[name]


def test_the_8b_parameters_by_hand() -> None:
    h, kv, f, V, layers = 4096, 8 * 128, 14_336, 128_256, 32
    attention = 2 * h * h + 2 * h * kv + h  # Q, O; K, V of 8 heads of 128; RMSNorm
    mlp = 3 * h * f + h  # gate, up, down; RMSNorm
    assert (
        gpt_size(GptShape(**preset("llama3_8b"))).params
        == 2 * V * h + layers * (attention + mlp) + h
    )


def test_the_405b_compute_budget_is_6nd() -> None:
    # Sec. 3.2.1: a 405B model on 15.6T tokens for the 3.8e25-FLOP budget (6·N·D).
    params = gpt_size(GptShape(**preset("llama3_405b"))).params
    assert f"{6 * params * 15.6e12:.1e}" == "3.8e+25"


def test_model_flops_per_token_are_6n_plus_12lhs() -> None:
    # Chowdhery et al. 2022, Appendix B, as Llama 3's MFU counts them: 6·N for the
    # parameters that multiply (the token embedding is a lookup) + 12·l·h·s for attention.
    sizes = preset("llama3_8b")
    multiplying = EXACT["llama3_8b"] - 128_256 * 4096
    assert gpt_model_flops_per_token(GptShape(**sizes)) == 6 * multiplying + 12 * 32 * 4096 * 8192
    assert gpt_model_flops_per_token(GptShape(**sizes)) == 57_914_449_920
    # 405B at 8K: the per-GPU rate of Table 4 is this times tokens / s / GPUs.
    assert gpt_model_flops_per_token(GptShape(**preset("llama3_405b"))) == 2_625_449_459_712
    # GPT-2's layout: its tied matrix multiplies once (as the head), positions are a lookup.
    gpt2 = ModelSpec(name="gpt").gpt_sizes() or {}
    assert (
        gpt_model_flops_per_token(GptShape(**gpt2))
        == 6 * (124_439_808 - 1024 * 768) + 12 * 12 * 768 * 1024
    )


def test_a_preset_takes_overrides() -> None:
    sizes = preset("llama3_8b", seq_len=131_072)
    assert sizes["seq_len"] == 131_072 and sizes["layers"] == 32 and sizes["kv_heads"] == 8
    # positions are rotary: no parameter grows with the sequence
    assert gpt_size(GptShape(**sizes)).params == EXACT["llama3_8b"]
    assert GPT_PRESETS["llama3_405b"]["rope_theta"] == 500_000.0
    # learned positions instead: a table of seq_len x hidden, and no rotary base left over
    learned = preset("llama3_8b", positions="learned")
    assert learned["rope_theta"] is None
    assert gpt_size(GptShape(**learned)).params == EXACT["llama3_8b"] + 8192 * 4096


# ------------------------------------------------------------- built against counted

SMALL = [
    {"preset": "llama3_8b", "layers": 2, "hidden": 128, "heads": 8, "kv_heads": 2},
    {"layers": 2, "hidden": 64, "heads": 4, "norm": "rmsnorm", "tied_embeddings": False},
    {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 1, "bias": False},
    {"layers": 1, "hidden": 64, "heads": 4, "mlp": "swiglu", "positions": "rotary", "bias": False},
]


@pytest.mark.parametrize("options", SMALL)
def test_the_counted_llama_is_the_built_one(options: dict) -> None:
    model = {"name": "gpt", **options, "ffn_hidden": 352, "seq_len": 32, "vocab": 300}
    spec = ModelSpec.model_validate(model)
    built = profile_model(spec, 1, use_cache=False)
    counted = gpt_footprint(spec, None)
    assert counted == Footprint.of(built)
    sizes = spec.gpt_sizes() or {}
    size = gpt_size(GptShape(**sizes))
    assert size.params == built.param_count
    assert [layer.params for layer in gpt_layers(GptShape(**sizes))] == [
        layer.param_nbytes // 4 for layer in built.layers
    ]
    flops = sum(layer.forward_flops + layer.backward_flops for layer in built.layers)
    assert size.train_flops == pytest.approx(flops, rel=0.05)  # matmuls only: within 5%


def test_grouped_queries_attend_as_repeated_keys() -> None:
    import jax
    import jax.numpy as jnp

    from simdist.numerics.fullsize.transformer import SelfAttention

    grouped = SelfAttention(4, causal=True, pre_layer_norm=True, kv_heads=2, rope_theta=1e4)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 16))
    variables = grouped.init(jax.random.PRNGKey(1), x)
    # The same attention with 4 key/value heads, each of the 2 repeated for its 2 queries.
    full = SelfAttention(4, causal=True, pre_layer_norm=True, rope_theta=1e4)
    p = jax.tree_util.tree_map(lambda a: a, variables["params"])
    for name in ("key", "value"):
        kernel = p[name]["kernel"].reshape(16, 2, 1, 4)
        bias = p[name]["bias"].reshape(2, 1, 4)
        p[name] = {
            "kernel": jnp.broadcast_to(kernel, (16, 2, 2, 4)).reshape(16, 16),
            "bias": jnp.broadcast_to(bias, (2, 2, 4)).reshape(16),
        }
    assert jnp.allclose(grouped.apply(variables, x), full.apply({"params": p}, x), atol=1e-5)


# ------------------------------------------------------------- activations by hand

# Llama 3 70B at 8K (Table 3): a = 64, h = 8192, k = 8 key/value heads (g = k/a = 1/8),
# f = 28,672, no dropout; 16-bit activations, one sequence, tensor group t = 8.
A, H, S, F, T = 64, 8192, 8192, 28_672, 8
SBH, SBF, KV = S * H, S * F, S * H // 8  # K and V: s·b·k·d = sbh/8
LLAMA = gpt_layer_tensors(
    GptShape(
        2, H, A, S, 128_256, kv_heads=8, ffn_hidden=F, norm="rmsnorm", mlp="swiglu", dropout=False
    )
)[1:3]


def llama_bytes(sharding: Sharding, **settings: object) -> int:
    held = activations(LLAMA, examples=1, act_nbytes=2, sharding=sharding, **settings)
    return held.total - held.recompute_working_set


def test_llama_layer_without_parallelism() -> None:
    # attention: RMSNorm input, QKV input, Q, projection input (4 sbh), K and V (2 sbh/8),
    # softmax output (as²b, no dropout); MLP: RMSNorm input, fc1 input (2 sbh), gate output,
    # SiLU output, up output, down input (4 sbf); all at 2 bytes.
    assert llama_bytes(Sharding()) == 2 * (4 * SBH + 2 * KV + A * S * S) + 2 * (2 * SBH + 4 * SBF)
    assert llama_bytes(Sharding()) == (12 + 4 / 8) * SBH + 8 * SBF + 2 * A * S * S


def test_llama_layer_under_tensor_parallelism() -> None:
    # The norms' and the two first linears' inputs stay whole (8 sbh); Q, K, V, the
    # projection's input, the scores and the MLP's four inner tensors split over t.
    split = 2 * (2 * SBH + 2 * KV + A * S * S + 4 * SBF) // T
    assert llama_bytes(Sharding(tensor=T)) == 8 * SBH + split
    assert llama_bytes(Sharding(activations=T, tensor=T)) == (8 * SBH) // T + split


def test_llama_layer_with_flash_attention_and_selective_recompute() -> None:
    no_scores = 2 * (4 * SBH + 2 * KV) + 2 * (2 * SBH + 4 * SBF)
    assert llama_bytes(Sharding(), flash=True) == no_scores
    assert llama_bytes(Sharding(), recompute="selective") == no_scores


def test_dropout_adds_the_masks_and_the_dropped_scores() -> None:
    with_dropout = gpt_layer_tensors(
        GptShape(2, H, A, S, 128_256, kv_heads=8, ffn_hidden=F, norm="rmsnorm", mlp="swiglu")
    )[1:3]
    held = activations(with_dropout, examples=1, act_nbytes=2, sharding=Sharding())
    # + one-byte masks after attention and MLP (2 sbh), the softmax's mask and output (3as²b)
    assert held.total == llama_bytes(Sharding()) + 2 * SBH + 3 * A * S * S


def test_model_state_follows_the_parameter_count() -> None:
    spec = ModelSpec.model_validate({"name": "gpt", "preset": "llama3_70b"})
    footprint = gpt_footprint(spec, None)
    assert footprint is not None
    assert sum(footprint.layer_param_nbytes) == 4 * EXACT["llama3_70b"]


# ------------------------------------------------------------- tensor parallelism


@pytest.mark.parametrize(
    ("strategy", "field"),
    [
        ({"kind": "tensor_parallel", "tensor": 4}, "strategy.tensor"),
        ({"kind": "hybrid", "mesh": {"data": 2, "tensor": 4}}, "strategy.mesh.tensor"),
    ],
)
def test_tensor_parallelism_refuses_kv_heads_it_cannot_split(strategy: dict, field: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(
            {
                "name": "t",
                "numerics": False,
                "cluster": {"hosts": 1, "devices_per_host": 8},
                "workload": {
                    "model": {"name": "gpt", "layers": 1, "hidden": 256, "heads": 8, "kv_heads": 2},
                    "batch_size": 1,
                    "optimizer": {"name": "sgd", "learning_rate": 0.1},
                    "steps": 1,
                },
                "strategy": strategy,
            }
        )
    assert str(caught.value) == (
        f"<scenario>: {field}: got 4; it must divide gpt's kv heads (2) to split it evenly "
        "(model gpt has attention heads 8, kv heads 2, MLP width 1024), e.g. tensor: 2"
    )


def test_an_untied_head_is_split_by_the_vocabulary() -> None:
    assert leaf_split("vocab_head", "params/lm_head/output_embeddings/kernel")
    assert not leaf_split("vocab_head", "params/lm_head/ln_f/scale")
    assert not leaf_split("vocab_head", "params/lm_head/wte")  # tied: the embedding's


def _load(model: dict) -> None:
    scenario_from_dict(
        {
            "name": "t",
            "numerics": False,
            "cluster": {"hosts": 1, "devices_per_host": 1},
            "workload": {
                "model": model,
                "batch_size": 1,
                "optimizer": {"name": "sgd", "learning_rate": 0.1},
                "steps": 1,
            },
            "strategy": {"kind": "one_device"},
        }
    )


@pytest.mark.parametrize(
    ("model", "line"),
    [
        (
            {"name": "gpt", "heads": 12, "kv_heads": 5},
            "workload.model.kv_heads: got 5: the key/value heads must divide heads 12 (each "
            "serves heads / kv_heads query heads), e.g. heads: 32, kv_heads: 8",
        ),
        (
            {"name": "gpt", "rope_theta": 10000},
            "workload.model.rope_theta: is the base of rotary positions only; give positions: "
            "rotary with it, e.g. positions: rotary, rope_theta: 500000",
        ),
        (
            {"name": "mlp", "preset": "llama3_8b"},
            "workload.model.preset: is an option of model gpt only, not of mlp",
        ),
        (
            {"name": "gpt", "preset": "llama4"},
            "workload.model.preset: got 'llama4'; did you mean 'llama3_405b'? Expected one of "
            "'llama3_8b', 'llama3_70b', 'llama3_405b', e.g. preset: llama3_405b",
        ),
        (
            {"name": "gpt", "hidden": 100, "heads": 4, "positions": "rotary"},
            "workload.model.positions: got rotary with heads of width 25 (hidden 100 / heads "
            "4): rotary positions turn pairs of features, the width must be even, e.g. "
            "hidden: 4096, heads: 32",
        ),
        (
            {"name": "gpt", "norm": "batchnorm"},
            "workload.model.norm: got 'batchnorm'; expected one of 'layernorm', 'rmsnorm', "
            "e.g. norm: layernorm",
        ),
    ],
)
def test_bad_llama_options_are_refused(model: dict, line: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        _load(model)
    assert str(caught.value) == f"<scenario>: {line}"


def test_the_per_layer_clock_costs_a_llama_under_tensor_parallelism() -> None:
    from simdist.runtime.engine import run

    model = {"name": "gpt", "preset": "llama3_8b", "layers": 2, "hidden": 256, "heads": 8}
    model |= {"kv_heads": 2, "ffn_hidden": 704, "vocab": 1000, "seq_len": 128}
    summaries = []
    for strategy in ({"kind": "one_device"}, {"kind": "tensor_parallel", "tensor": 2}):
        scenario = scenario_from_dict(
            {
                "name": "t",
                "seed": 0,
                "numerics": False,
                "cluster": {"hosts": 1, "devices_per_host": 2, "device": {"variability": 0}},
                "workload": {
                    "model": model,
                    "batch_size": 2,
                    "optimizer": {"name": "adam", "learning_rate": 0.1},
                    "steps": 2,
                },
                "strategy": strategy,
            }
        )
        summaries.append(run(scenario).summary)
    one, split = summaries
    spec = ModelSpec.model_validate(model)
    profile = profile_model(spec, 2)
    assert one["flops_per_replica_step"] == profile.flops
    assert one["param_bytes"] == 4 * gpt_size(GptShape(**(spec.gpt_sizes() or {}))).params
    assert math.isfinite(split["simulated_time_s"]) and split["simulated_time_s"] > 0
