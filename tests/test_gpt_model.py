"""The configurable ``gpt`` against Narayanan et al. 2021 (arXiv:2104.04473): Table 1's
parameter counts and Sec. 5.1's FLOP formula; and its options' errors."""

from __future__ import annotations

import pytest

from simdist.catalog import GPT_DEFAULTS
from simdist.errors import ScenarioError
from simdist.gpt_shape import GptShape
from simdist.model_size import gpt_size
from simdist.numerics import fullsize
from simdist.numerics.memory import Footprint, gpt_footprint
from simdist.numerics.profile import profile_model
from simdist.runtime.preflight import preflight
from simdist.scenario import scenario_from_dict
from simdist.scenario.workload import ModelSpec

SEQ, VOCAB = 2048, 51200  # Narayanan et al. 2021, Sec. 5.1

# Table 1: (billions of parameters as printed, heads, hidden, layers).
TABLE_1 = [
    (1.7, 24, 2304, 24),
    (3.6, 32, 3072, 30),
    (7.5, 32, 4096, 36),
    (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48),
    (76.1, 80, 10240, 60),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]


def formula_params(layers: int, hidden: int) -> int:
    """12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) = 12lh² + 13lh + (V + s)h, exactly."""
    return 12 * layers * hidden**2 + 13 * layers * hidden + (VOCAB + SEQ) * hidden


@pytest.mark.parametrize(("billions", "heads", "hidden", "layers"), TABLE_1)
def test_param_count_is_table_1(billions: float, heads: int, hidden: int, layers: int) -> None:
    sizes = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": SEQ, "vocab": VOCAB}
    count = fullsize.param_count(fullsize.build("gpt", sizes=sizes))
    # the formula leaves out the final LayerNorm's scale and bias
    assert count == formula_params(layers, hidden) + 2 * hidden
    assert round(count / 1e9, 1) == billions


def test_flops_match_the_formula_without_recomputation() -> None:
    spec = ModelSpec(name="gpt", layers=2, hidden=256, heads=4, seq_len=128, vocab=1000)
    batch, s, n, h, v = 2, 128, 2, 256, 1000
    profile = profile_model(spec, batch, use_cache=False)
    total = sum(layer.forward_flops + layer.backward_flops for layer in profile.layers)
    published = 72 * batch * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
    assert total == pytest.approx(published, rel=0.03)


def test_hidden_is_one_width_and_defaults_are_gpt2() -> None:
    spec = ModelSpec.model_validate({"name": "gpt", "hidden": 2304, "heads": 24})
    assert spec.gpt_sizes() == {
        "layers": 12,
        "hidden": 2304,
        "heads": 24,
        "seq_len": 1024,
        "vocab": 50257,
        "kv_heads": 24,
        "ffn_hidden": 4 * 2304,
        "norm": "layernorm",
        "mlp": "gelu",
        "positions": "learned",
        "rope_theta": None,
        "tied_embeddings": True,
        "bias": True,
        "dropout": True,
    }
    assert ModelSpec(name="mlp").gpt_sizes() is None


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
    ("model", "words"),
    [
        ({"name": "gpt", "hidden": 100, "heads": 7}, "heads must divide hidden"),
        ({"name": "gpt", "hidden": [64, 64]}, "one width"),
        ({"name": "mlp", "layers": 4}, "option of model gpt only"),
        ({"name": "gpt", "layers": 0}, "workload.model.layers"),
    ],
)
def test_bad_options_are_refused(model: dict, words: str) -> None:
    with pytest.raises(ScenarioError, match=words):
        _load(model)


def test_profiles_of_two_sizes_are_cached_apart() -> None:
    small = ModelSpec(name="gpt", layers=1, hidden=64, heads=2, seq_len=16, vocab=100)
    wider = ModelSpec(name="gpt", layers=1, hidden=128, heads=2, seq_len=16, vocab=100)
    a, b = profile_model(small, 1), profile_model(wider, 1)
    assert a.param_count == 12 * 64**2 + 13 * 64 + 116 * 64 + 2 * 64
    assert b.param_count == 12 * 128**2 + 13 * 128 + 116 * 128 + 2 * 128


def test_tensor_parallel_splits_gpt_by_its_own_heads() -> None:
    with pytest.raises(ScenarioError, match="attention heads"):
        scenario_from_dict(
            {
                "name": "t",
                "numerics": False,
                "cluster": {"hosts": 1, "devices_per_host": 8},
                "workload": {
                    "model": {"name": "gpt", "layers": 1, "hidden": 96, "heads": 6},
                    "batch_size": 1,
                    "optimizer": {"name": "sgd", "learning_rate": 0.1},
                    "steps": 1,
                },
                "strategy": {"kind": "tensor_parallel", "tensor": 4},
            }
        )


# ---------------------------------------------------------------- size before build


@pytest.mark.parametrize(("billions", "heads", "hidden", "layers"), TABLE_1)
def test_the_closed_form_size_is_table_1_without_building(billions, heads, hidden, layers):
    size = gpt_size(GptShape(layers, hidden, heads, SEQ, VOCAB))
    assert size.params == formula_params(layers, hidden) + 2 * hidden
    forward = (
        24 * SEQ * layers * hidden**2 * (1 + SEQ / (6 * hidden) + VOCAB / (12 * layers * hidden))
    )
    assert size.train_flops == pytest.approx(3 * forward, rel=1e-12)


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ({"name": "gpt", "layers": 2, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 100}, None),
        ({"name": "gpt", "layers": 3, "hidden": 48, "heads": 6, "seq_len": 40, "vocab": 77}, 17),
        ({"name": "gpt2"}, None),
    ],
)
def test_the_counted_footprint_is_the_built_one(model, tokens):
    spec = ModelSpec.model_validate(model)
    shape = None if tokens is None else (tokens,)
    built = profile_model(spec, 1, shape, None, use_cache=False)
    counted = gpt_footprint(spec, shape)
    assert counted == Footprint.of(built)
    size = gpt_size(GptShape(**(spec.gpt_sizes() or GPT_DEFAULTS)), tokens=tokens)
    assert size.params == built.param_count
    assert size.activation_nbytes == counted.activation_nbytes + counted.example_nbytes
    flops = sum(layer.forward_flops + layer.backward_flops for layer in built.layers)
    assert size.train_flops == pytest.approx(flops, rel=0.05)  # matmuls only: within 5%


def test_a_token_input_the_gpt_cannot_take_is_left_to_its_build():
    spec = ModelSpec(name="gpt", layers=1, hidden=64, heads=2, seq_len=16, vocab=100)
    assert gpt_footprint(spec, (17,)) is None and gpt_footprint(spec, (4, 4)) is None
    assert gpt_footprint(ModelSpec(name="mlp"), None) is None


@pytest.mark.parametrize(
    ("model", "line"),
    [
        (
            {"name": "gpt", "layers": 10**12},
            "workload.model.layers: got 1000000000000; a gpt has at most 100,000 (the largest "
            "published have about 1,000): it is counted and built whole, e.g. layers: 96",
        ),
        (
            {"name": "gpt", "seq_len": 10**9},
            "workload.model.seq_len: got 1000000000; a gpt has at most 10,000,000",
        ),
        (
            {"name": "gpt", "vocab": 10**12},
            "workload.model.vocab: got 1000000000000; a gpt has at most 100,000,000",
        ),
        (
            {"name": "gpt", "hidden": 10**8, "heads": 1},
            "workload.model: a gpt of 1.44e+18 parameters (5.76e+03 PB of float32, 8.85e+21 "
            "FLOPs an example) is past simdist's cap of 10^15 parameters; e.g. {name: gpt, "
            "layers: 96, hidden: 12288, heads: 96} (GPT-3 175B)",
        ),
    ],
)
def test_a_gpt_past_the_caps_is_refused_as_it_loads(model, line, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("built")

    monkeypatch.setattr(fullsize, "build", never)
    with pytest.raises(ScenarioError) as caught:
        _load(model)
    assert str(caught.value).startswith(f"<scenario>: {line}")


def test_a_gpt_too_large_for_its_devices_is_refused_before_it_is_built(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("built")

    monkeypatch.setattr("simdist.numerics.profile.profile_model", never)
    scenario = scenario_from_dict(
        {
            "name": "t",
            "numerics": False,
            "cluster": {"hosts": 1, "devices_per_host": 4, "device": {"profile": "a100"}},
            "workload": {
                "model": {"name": "gpt", "layers": 10**5},
                "batch_size": 8,
                "optimizer": {"name": "adam", "learning_rate": 0.1},
                "steps": 2,
            },
            "strategy": {"kind": "zero", "stage": 3},
        }
    )
    with pytest.raises(ScenarioError) as caught:
        preflight(scenario, source="t.yaml")
    assert str(caught.value).startswith(
        "t.yaml: workload.model: does not fit: worker0/gpu0 needs 1.35e+05 GB and a a100 has "
        "80 GB (params 709, grads 709, optimizer 1.42e+03"
    )
